// Package experiment defines the reproductions of the source documents'
// evaluations that `tokenmesh experiment NAME` runs: each one simulates the
// paper's setup, writes a report (Markdown and JSON) with plots into a
// directory, and prints a short summary that puts our numbers beside the
// paper's.
package experiment

import (
	"fmt"
	"image/color"
	"io"
	"sort"
	"strings"
)

// Palette is Okabe & Ito's colour-blind safe set (eval's plots use it
// too), for the experiments' line plots; past its end, plots repeat it
// with dashes.
var Palette = []color.Color{
	color.RGBA{R: 0xE6, G: 0x9F, B: 0x00, A: 255},
	color.RGBA{R: 0x00, G: 0x72, B: 0xB2, A: 255},
	color.RGBA{R: 0x00, G: 0x9E, B: 0x73, A: 255},
	color.RGBA{R: 0xD5, G: 0x5E, B: 0x00, A: 255},
	color.RGBA{R: 0x56, G: 0xB4, B: 0xE9, A: 255},
	color.RGBA{R: 0xCC, G: 0x79, B: 0xA7, A: 255},
	color.Black,
}

// Context is what an experiment runs with.
type Context struct {
	Out      string    // directory for report.md, report.json and plots; created by the caller
	Seeds    int       // how many seeds to average over (the papers use 10)
	Quick    bool      // a smaller, faster version (for tests and a first look)
	Traces   string    // directory of the real traces (../shared/data/traces), "" if absent
	Stdout   io.Writer // the summary
	Progress func(step string, done, total int)
}

// Experiment is one reproduction.
type Experiment struct {
	Name    string // the CLI name, e.g. "thesis", "gdrl-ring"
	Summary string // one line for --help
	Source  string // the paper section it reproduces
	Run     func(ctx Context) error
}

// Find returns the experiment called name among list; the error lists the names.
func Find(list []Experiment, name string) (Experiment, error) {
	names := make([]string, 0, len(list))
	for _, e := range list {
		if e.Name == name {
			return e, nil
		}
		names = append(names, e.Name)
	}
	sort.Strings(names)
	return Experiment{}, fmt.Errorf("unknown experiment %q (known: %s)", name, strings.Join(names, ", "))
}
