package main

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/tokenmesh/tokenmesh/workload"
)

// traceFlags are the trace input flags sim and replay share.
type traceFlags struct {
	trace, format, key string
	skipBad            bool
}

// add defines --trace (described by traceHelp), --format, --key and
// --skip-bad on fl.
func (f *traceFlags) add(fl *pflag.FlagSet, traceHelp string) {
	fl.StringVar(&f.trace, "trace", "", traceHelp)
	fl.StringVar(&f.format, "format", "auto", "trace format: auto, csv or clf")
	fl.StringVar(&f.key, "key", "", "for access logs, what identifies a client: host (the default), user or path")
	fl.BoolVar(&f.skipBad, "skip-bad", false, "skip and count malformed trace lines instead of failing")
}

// read reads the --trace file (errors name the file and line).
func (f *traceFlags) read() (*workload.Trace, error) {
	return workload.ReadFile(f.trace, workload.ReadOptions{Format: f.format, SkipBad: f.skipBad, Key: f.key})
}

// reportFlags are the report output flags sim and replay share.
type reportFlags struct {
	json          bool
	out, progress string
}

// add defines --json, --out and --progress on fl.
func (f *reportFlags) add(fl *pflag.FlagSet) {
	fl.BoolVar(&f.json, "json", false, "print the report as JSON instead of a table")
	fl.StringVar(&f.out, "out", "", "also write report.json, report.md, PNG plots and report.html (one self-contained page with the tables, notes and plots, for a browser) into this directory")
	fl.StringVar(&f.progress, "progress", "auto", "progress bar on stderr: auto (when stderr is a terminal), always or never")
}

// check reports a bad --progress.
func (f *reportFlags) check() error {
	if f.progress != "auto" && f.progress != "always" && f.progress != "never" {
		return usageErr("--progress %q: want auto, always or never", f.progress)
	}
	return nil
}

// shortfallWindowHelp is --shortfall-window's help, in sim and replay.
const shortfallWindowHelp = "add the shortfall columns (JSON shortfall_tokens, shortfall_pct, shortfall_after_birth_pct): per key and per window of this length (trace time), the tokens central admitted beyond the strategy's, summed, and the same without each key's first window (0: off)"

// checkShortfallWindow reports a negative --shortfall-window.
func checkShortfallWindow(w time.Duration) error {
	if w < 0 {
		return usageErr("--shortfall-window %v: the window must not be negative", w)
	}
	return nil
}
