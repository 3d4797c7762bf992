package main

import (
	"fmt"
	"os"
	"runtime/debug"
	"strconv"

	"github.com/spf13/cobra"
)

// defaultGCPercent is serve's garbage-collection target (Go's GOGC): the
// heap may grow to 1 + 400/100 = 5 times the live heap before a
// collection. A node's live heap is small (its buckets) while every API
// call allocates a few KB in grpc-go, so with Go's default of 100 the
// collector ran about every few thousand calls and took about a fifth of
// the server's CPU per unbatched check (docs/PERFORMANCE.md, "The service
// path"). Ours: the value is a measurement on this harness, not a rule
// from a source.
const defaultGCPercent = 400

// gcPercentFlag is serve's --gc-percent.
const gcPercentFlag = "gc-percent"

// addGCFlag defines --gc-percent on cmd.
func addGCFlag(cmd *cobra.Command, pct *int) {
	cmd.Flags().IntVar(pct, gcPercentFlag, defaultGCPercent,
		"garbage-collection target percent (as GOGC): the heap grows to 1+N/100 times the live heap between collections; "+
			"a GOGC environment variable wins over the default, the flag over both; set GOMEMLIMIT to cap the heap of a node with many keys")
}

// resolveGCPercent is the GC percent serve sets: the flag's when given,
// none (set false: the runtime already applied it) when GOGC is in the
// environment, else the flag's default. The value must be between 10 and
// 10000.
func resolveGCPercent(flagGiven bool, pct int, gogcEnv string) (value int, set bool, err error) {
	if !flagGiven && gogcEnv != "" {
		return 0, false, nil
	}
	if pct < 10 || pct > 10000 {
		return 0, false, fmt.Errorf("--%s: %d must be between 10 and 10000", gcPercentFlag, pct)
	}
	return pct, true, nil
}

// applyGCPercent sets the GC percent serve runs with and returns what it
// is, for the start log ("GOGC=..." when the environment's was kept).
func applyGCPercent(cmd *cobra.Command, pct int) (string, error) {
	env := os.Getenv("GOGC")
	v, set, err := resolveGCPercent(cmd.Flags().Changed(gcPercentFlag), pct, env)
	if err != nil {
		return "", err
	}
	if !set {
		return "GOGC=" + env, nil
	}
	debug.SetGCPercent(v)
	return strconv.Itoa(v), nil
}
