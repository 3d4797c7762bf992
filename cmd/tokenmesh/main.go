// Command tokenmesh is the distributed rate limiter's command line: `sim`
// evaluates coordination strategies on a trace in the deterministic
// simulator.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// errUsage marks errors in the command line itself; they exit with code 2.
var errUsage = errors.New("usage")

func main() {
	root := &cobra.Command{
		Use:   "tokenmesh",
		Short: "tokenmesh: one global token bucket per key, enforced by a cluster without a central hop",
		Long: `tokenmesh enforces one token bucket (rate r, burst b) per key across a cluster of
nodes. Every node decides from its own memory; the nodes coordinate in the
background with one of several strategies. The evaluator (tokenmesh sim) tells
you, on your own traffic, how far each strategy drifts from a single exact
limiter and what it costs.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       readBuildInfo().String(),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.AddCommand(newSimCmd(), newExperimentCmd(), newPlanCmd(), newServeCmd(), newBenchCmd(), newReplayCmd(), newCertsCmd())
	root.AddCommand(newVersionCmd(), newStrategiesCmd(), newChaosCmd())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "tokenmesh:", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
