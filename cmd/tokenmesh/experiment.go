package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tokenmesh/tokenmesh/experiment"
	"github.com/tokenmesh/tokenmesh/experiment/gdrlexp"
	"github.com/tokenmesh/tokenmesh/experiment/srtmexp"
	"github.com/tokenmesh/tokenmesh/experiment/thesis"
)

// experiments lists the reproductions `tokenmesh experiment` knows, in the
// order --help shows them.
func experiments() []experiment.Experiment {
	return []experiment.Experiment{thesis.Experiment(), gdrlexp.Ring(), gdrlexp.Dynamic(), gdrlexp.Scale(),
		srtmexp.Penalty(), srtmexp.Concentration(), srtmexp.Correlation(), srtmexp.Table1()}
}

// sourcesNote says what the citations of the help texts ("GDRL
// §III-A", "thesis 002") point to.
const sourcesNote = `000-004 (seed 000, thesis 002, ...) are the five source documents, by number and
section: docs/SOURCES.md names them (authors, titles) and what each is used for.
`

func newExperimentCmd() *cobra.Command {
	var out, traces, progress string
	var seeds int
	var quick bool
	list := experiments()
	var help strings.Builder
	for _, e := range list {
		fmt.Fprintf(&help, "  %-20s %s (%s)\n", e.Name, e.Summary, e.Source)
	}
	cmd := &cobra.Command{
		Use:   "experiment [NAME]",
		Short: "Reproduce a source document's evaluation in the simulator and write a report with plots",
		Long: `experiment runs the evaluation of one of the source documents in the
simulator, with the paper's setup, and writes report.md, report.json and plots
into --out, putting our numbers beside the paper's.

Experiments:
` + help.String() + `
` + sourcesNote,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				// No name: list what can be run.
				fmt.Fprint(cmd.OutOrStdout(), "Experiments (tokenmesh experiment NAME runs one):\n"+help.String()+"\n"+sourcesNote)
				return nil
			}
			e, err := experiment.Find(list, args[0])
			if err != nil {
				return usageErr("%v", err)
			}
			if seeds < 1 {
				return usageErr("--seeds %d: need at least 1", seeds)
			}
			if out == "" {
				out = filepath.Join("report", e.Name)
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return err
			}
			if traces != "" {
				if _, err := os.Stat(traces); err != nil {
					return usageErr("--traces: %v", err)
				}
			}
			ctx := experiment.Context{Out: out, Seeds: seeds, Quick: quick, Traces: traces, Stdout: cmd.OutOrStdout()}
			if bar := newProgress(progress, cmd.ErrOrStderr(), 100); bar != nil {
				ctx.Progress = func(step string, done, total int) {
					bar.ChangeMax(total)
					bar.Describe(step)
					_ = bar.Set(done)
				}
				defer bar.Finish()
			}
			if err := e.Run(ctx); err != nil {
				return fmt.Errorf("experiment %s: %w", e.Name, err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", filepath.Join(out, "report.md"))
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&out, "out", "", "directory for the report and plots (default report/NAME)")
	fl.IntVar(&seeds, "seeds", 10, "seeds to average over (the papers average 10 runs)")
	fl.BoolVar(&quick, "quick", false, "a smaller, faster version of the experiment")
	fl.StringVar(&traces, "traces", defaultTraces(), "directory of the real ts_ms,key traces, also run where the experiment uses them")
	fl.StringVar(&progress, "progress", "auto", "progress bar on stderr: auto, always or never")
	return cmd
}

// defaultTraces is ../shared/data/traces when it exists (the project's
// layout), else "".
func defaultTraces() string {
	p := filepath.Join("..", "shared", "data", "traces")
	if st, err := os.Stat(p); err == nil && st.IsDir() {
		return p
	}
	return ""
}
