package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/registry"
)

// waitingParams are the parameters sim --max-wait D sets to D when not
// given: the strategies that grant waits only up to their own max_wait
// (lease; adaptive, whose raises also wait that long).
var waitingParams = []string{"lease.max_wait", "adaptive.max_wait"}

// withMaxWaitParams adds NAME=maxWait for each of waitingParams not given
// in params, when waiting mode is on (SRTM §5.2).
func withMaxWaitParams(params []string, maxWait time.Duration) []string {
	if maxWait <= 0 {
		return params
	}
	out := slices.Clone(params)
	for _, name := range waitingParams {
		if !slices.ContainsFunc(params, func(p string) bool { return strings.HasPrefix(p, name+"=") }) {
			out = append(out, name+"="+maxWait.String())
		}
	}
	return out
}

// checkWaiting refuses --max-wait with a strategy named in --strategies
// that has no waiting mode (strategy.CheckWait: gcounter and tbqueue say
// why), and returns a note for each such strategy that "all" brought in:
// they run with plain checks, and the report marks them.
func checkWaiting(list string, infos []registry.Info, maxWait time.Duration) (notes []string, err error) {
	if maxWait <= 0 {
		return nil, nil
	}
	named := map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		named[strings.TrimSpace(n)] = true
	}
	for _, info := range infos {
		if info.New == nil {
			continue
		}
		s, err := info.New(strategy.Config{Self: "n0", Members: []strategy.NodeID{"n0"},
			Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 1, Rand: rand.New(rand.NewPCG(1, 1))})
		if err != nil {
			continue // its own parameters decide; the run reports the error
		}
		if err := strategy.CheckWait(info.Name, s); err != nil {
			if named[info.Name] {
				return nil, usageErr("--max-wait with --strategies %s: %v", info.Name, err)
			}
			notes = append(notes, err.Error())
		}
	}
	return notes, nil
}

// warnWaiting prints checkWaiting's notes.
func warnWaiting(w interface{ Write([]byte) (int, error) }, notes []string) {
	for _, n := range notes {
		fmt.Fprintf(w, "--max-wait: %s\n", n)
	}
}
