package gdrlexp

import (
	"fmt"

	"github.com/tokenmesh/tokenmesh/strategy/gdrl"
)

// scaleDemand is the paper's lambda_i = i/(N+1) (i = 1..N) in tokens per
// interval, scaled by 100 N tokens/s so that the smallest is about 10 tokens
// per interval whatever N (a node with no demand would be idle), rounded to
// whole tokens; it returns the per-interval tokens and the rates (tokens/s).
func scaleDemand(n int) ([]int64, []float64) {
	tok := make([]int64, n)
	lambda := make([]float64, n)
	for i := range n {
		x := float64(i+1) / float64(n+1) * 100 * float64(n) * dt.Seconds()
		tok[i] = int64(x + 0.5)
		lambda[i] = float64(tok[i]) / dt.Seconds()
	}
	return tok, lambda
}

// gdrlRun is one run of gdrl nodes on a random d-regular graph with
// deterministic demand.
type gdrlRun struct {
	N, D       int
	MeanDegree float64   // distinct neighbours per node in the graph gdrl built
	Intervals  int       // first interval with JFI >= 0.99; -1 if not within Max
	Max        int       // intervals run at most
	JFI        []float64 // JFI after each interval (sampled: every Every-th)
	Every      int
	Messages   int64
	Bytes      int64
}

// runScaleGDRL drives N gdrl nodes (spare bandwidth, eta = 1/(2d), load
// 90%) until JFI >= 0.99 and then as many intervals again (at most max),
// with demand known exactly from the first interval (deterministic), so
// that what is measured is GDRL's own pace, not the demand filter's.
func runScaleGDRL(n, d, maxIntervals int, seed uint64) (*gdrlRun, error) {
	tok, lambda := scaleDemand(n)
	params := []string{"graph=regular", fmt.Sprintf("degree=%d", d), "indicator=spare", "alpha=1", "noise_band=0", "idle=10s"}
	c, err := newCluster(n, seed, sum(lambda)/0.9, 1000, params)
	if err != nil {
		return nil, err
	}
	run := &gdrlRun{N: n, D: d, Intervals: -1, Max: maxIntervals, Every: max(1, maxIntervals/2000)}
	for _, g := range c.nodes {
		run.MeanDegree += float64(len(g.Neighbours()))
	}
	run.MeanDegree /= float64(n)
	est, truth := make([]float64, n), make([]float64, n)
	stop := maxIntervals
	for k := 1; k <= stop; k++ {
		if err := c.interval(k, tok); err != nil {
			return nil, err
		}
		c.spare(lambda, est, truth)
		j := gdrl.JFI(truth)
		if k%run.Every == 0 || k == 1 {
			run.JFI = append(run.JFI, j)
		}
		if run.Intervals < 0 && j >= 0.99 {
			run.Intervals = k
			stop = min(maxIntervals, 2*k+10)
		}
	}
	run.Messages, run.Bytes = c.messages, c.bytes
	return run, nil
}
