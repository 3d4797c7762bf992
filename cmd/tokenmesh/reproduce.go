package main

import (
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tokenmesh/tokenmesh/eval"
)

// noOutputFlags change how a run goes, not what it reports: the command
// that reproduces a report leaves them out.
var noOutputFlags = map[string]bool{"parallel": true, "progress": true, "cpuprofile": true}

// reproduceSteps are the commands that reproduce the report of cmd (sim
// or replay) after its flags were parsed, for eval.Report.Reproduce: its
// command line (commandLine), to run from the same directory with the
// same build.
func reproduceSteps(cmd *cobra.Command) []eval.Step {
	return []eval.Step{{
		Why:     "From the directory it ran in (paths are as given), with the same build: " + readBuildInfo().String() + " (tokenmesh version prints yours).",
		Command: commandLine(cmd),
	}}
}

// commandLine is cmd's command line as a shell command: its path
// ("tokenmesh sim") and the flags given, in the order given (a repeated
// flag's values together, where it first appeared), values quoted for a
// POSIX shell; flags that change no output (noOutputFlags) left out.
func commandLine(cmd *cobra.Command) string {
	parts := []string{cmd.CommandPath()}
	fl := cmd.Flags()
	sorted := fl.SortFlags
	fl.SortFlags = false // Visit then goes in the order the flags were set
	defer func() { fl.SortFlags = sorted }()
	fl.Visit(func(f *pflag.Flag) {
		if noOutputFlags[f.Name] {
			return
		}
		if v, ok := f.Value.(pflag.SliceValue); ok {
			for _, s := range v.GetSlice() {
				parts = append(parts, "--"+f.Name, shellQuote(s))
			}
			return
		}
		switch {
		case f.Value.Type() == "bool" && f.Value.String() == "true":
			parts = append(parts, "--"+f.Name)
		case f.Value.Type() == "bool":
			parts = append(parts, "--"+f.Name+"=false")
		default:
			parts = append(parts, "--"+f.Name, shellQuote(f.Value.String()))
		}
	})
	return strings.Join(parts, " ")
}
