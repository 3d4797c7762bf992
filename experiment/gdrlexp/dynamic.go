package gdrlexp

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"

	"github.com/tokenmesh/tokenmesh/experiment"
	"github.com/tokenmesh/tokenmesh/internal/poisson"
	"github.com/tokenmesh/tokenmesh/strategy/gdrl"
)

// dynLambda is the paper's piecewise demand of §III-B for node i (1-based)
// at time slot t, in units of the paper (times the scale for tokens/s):
// i/(N+1) on [0, tau0) and [3 tau0, 4 tau0), 1 - i/(N+1) on [tau0, 2 tau0),
// and a linear shift from 1 - i/(N+1) back to i/(N+1) on [2 tau0, 3 tau0).
// The formula as printed swaps the two end points of the shift, which makes
// it jump at 2 tau0 and 3 tau0; the text ("a slow smooth change", "an
// abrupt change" only at tau0) and Fig. 5's caption ("piecewise linear ...
// 4 segments") describe the continuous shift, which we use.
func dynLambda(i, n, t, tau0 int) float64 {
	a := float64(i) / float64(n+1)
	switch {
	case t < tau0 || t >= 3*tau0:
		return a
	case t < 2*tau0:
		return 1 - a
	default:
		x := float64(t-2*tau0) / float64(tau0)
		return x*a + (1-x)*(1-a)
	}
}

// dynPhase summarises one of the four segments.
type dynPhase struct {
	Phase string `json:"phase"`
	From  int    `json:"from_interval"`
	To    int    `json:"to_interval"`
	// First interval after the phase's start at which JFI >= 0.99 (-1: not
	// in the phase); JFI minimum and mean over the phase's last 10%.
	EstRecover  int     `json:"jfi_est_ge_099_after"`
	TrueRecover int     `json:"jfi_true_ge_099_after"`
	EstMin      float64 `json:"jfi_est_min"`
	TrueMin     float64 `json:"jfi_true_min"`
	EstTail     float64 `json:"jfi_est_mean_last_10pct"`
	TrueTail    float64 `json:"jfi_true_mean_last_10pct"`
}

type dynReport struct {
	Experiment string         `json:"experiment"`
	Source     string         `json:"source"`
	Setup      map[string]any `json:"setup"`
	Phases     []dynPhase     `json:"phases"`
	Messages   int64          `json:"messages"`
	Bytes      int64          `json:"bytes"`
	Plots      []string       `json:"plots"`
}

// Dynamic is gdrl-dynamic: GDRL §III-B, Figs. 5-6.
func Dynamic() experiment.Experiment {
	return experiment.Experiment{
		Name:    "gdrl-dynamic",
		Summary: "GDRL on a ring of 10 nodes when demand changes abruptly and linearly: lambda-hat_i(t), q_i(t), JFI",
		Source:  "seed 001 §III-B, Figs. 5-6",
		Run:     runDynamic,
	}
}

func runDynamic(ctx experiment.Context) error {
	const n = 10
	tau0, alpha := 10000, 0.001
	if ctx.Quick {
		tau0, alpha = 2000, 0.005 // alpha * tau0 = 10 as in the full run
	}
	total := 4 * tau0
	scale := float64(ringScale)
	capacity := float64(n) / 2 * scale / 0.9 // sum lambda_i = N/2 at every t; load 90%
	c, err := newCluster(n, 1, capacity, 1000, []string{"graph=ring", "indicator=spare", fmt.Sprintf("alpha=%g", alpha), "eta=0.25", "idle=10s", "noise_band=0"})
	if err != nil {
		return err
	}
	run := newDynRun(n, total)
	if err := run.simulate(ctx, c, tau0, scale); err != nil {
		return err
	}
	rep := dynReport{Experiment: "gdrl-dynamic", Source: "seed 001 §III-B, Figs. 5-6", Messages: c.messages, Bytes: c.bytes,
		Setup: map[string]any{"nodes": n, "graph": "ring", "indicator": "spare", "eta": 0.25, "alpha_per_interval": alpha, "tau0_intervals": tau0,
			"load": 0.9, "capacity_tokens_per_s": capacity, "lambda_scale_tokens_per_s": scale, "interval": dt.String(), "seed": 1,
			"demand": "Poisson tokens per interval, one request per node per interval", "driver": "direct (experiment/gdrlexp driver)"}}
	rep.Phases = dynPhases(run.estJ, run.trueJ, tau0)
	if rep.Plots, err = writePlots(ctx.Out, "gdrl-dynamic", run.plots(tau0)); err != nil {
		return err
	}
	stable := true
	for p, ph := range rep.Phases {
		if p != 2 { // the linear shift is itself the transient: judged by the segment after it
			stable = stable && ph.EstTail >= 0.99 && ph.TrueTail >= 0.95
		}
	}
	return writeDynReport(ctx, &rep, c, tau0, alpha, scale, total, stable)
}

// dynRun is what runDynamic records: the JFI of the indicators and of the
// true spare bandwidth at every interval, and, at the sampled intervals,
// each node's demand, its estimate and its indicator.
type dynRun struct {
	n, total       int
	estJ, trueJ    []float64
	idx            []int // the sampled intervals
	keep           map[int]bool
	xs             []float64
	lam, lamHat, q [][]float64
}

// newDynRun is the record of n nodes over total intervals.
func newDynRun(n, total int) *dynRun {
	r := &dynRun{n: n, total: total,
		estJ: make([]float64, 0, total), trueJ: make([]float64, 0, total),
		idx: sample(total, 2000), keep: map[int]bool{},
		lam: make([][]float64, n), lamHat: make([][]float64, n), q: make([][]float64, n)}
	for _, t := range r.idx {
		r.keep[t] = true
	}
	return r
}

// simulate drives c through the total intervals with the demand of
// dynLambda (segments of tau0, times scale tokens/s), recording r.
func (r *dynRun) simulate(ctx experiment.Context, c *cluster, tau0 int, scale float64) error {
	n, total := r.n, r.total
	rnd := rand.New(rand.NewPCG(1, 0x64796e))
	lambda, demand := make([]float64, n), make([]int64, n)
	est, truth := make([]float64, n), make([]float64, n)
	for t := 0; t < total; t++ {
		if t%(total/20) == 0 {
			progress(ctx, "gdrl-dynamic", t, total)
		}
		for i := range n {
			lambda[i] = dynLambda(i+1, n, t, tau0) * scale
			demand[i] = poisson.Draw(rnd, lambda[i]*dt.Seconds())
		}
		if err := c.interval(t+1, demand); err != nil {
			return err
		}
		c.spare(lambda, est, truth)
		r.estJ, r.trueJ = append(r.estJ, gdrl.JFI(est)), append(r.trueJ, gdrl.JFI(truth))
		if r.keep[t] {
			r.record(c, t, lambda, est)
		}
	}
	progress(ctx, "gdrl-dynamic", total, total)
	return nil
}

// record keeps, at interval t, each node's demand (lambda), estimate and
// indicator (est).
func (r *dynRun) record(c *cluster, t int, lambda, est []float64) {
	r.xs = append(r.xs, float64(t+1))
	for i, g := range c.nodes {
		r.lam[i] = append(r.lam[i], lambda[i])
		r.lamHat[i] = append(r.lamHat[i], g.Demand(key)/gdrl.UnitsPerToken)
		r.q[i] = append(r.q[i], est[i])
	}
}

// dynPhases summarises the four segments of tau0 intervals of the JFIs of
// the indicators (estJ) and of the true spare bandwidth (trueJ).
func dynPhases(estJ, trueJ []float64, tau0 int) []dynPhase {
	names := []string{"[0, tau0): lambda_i = i/(N+1)", "[tau0, 2 tau0): abrupt change to 1 - i/(N+1)", "[2 tau0, 3 tau0): linear shift back to i/(N+1)", "[3 tau0, 4 tau0): i/(N+1)"}
	var phases []dynPhase
	for p := range 4 {
		from, to := p*tau0, (p+1)*tau0
		ph := dynPhase{Phase: names[p], From: from + 1, To: to, EstRecover: -1, TrueRecover: -1, EstMin: 1, TrueMin: 1}
		for t := from; t < to; t++ {
			ph.EstMin, ph.TrueMin = min(ph.EstMin, estJ[t]), min(ph.TrueMin, trueJ[t])
			if ph.EstRecover < 0 && estJ[t] >= 0.99 {
				ph.EstRecover = t - from + 1
			}
			if ph.TrueRecover < 0 && trueJ[t] >= 0.99 {
				ph.TrueRecover = t - from + 1
			}
		}
		ph.EstMin, ph.TrueMin = r4(ph.EstMin), r4(ph.TrueMin)
		ph.EstTail, ph.TrueTail = r4(tailMean(estJ[:to], to-tau0/10)), r4(tailMean(trueJ[:to], to-tau0/10))
		phases = append(phases, ph)
	}
	return phases
}

// plots are Figs. 5 and 6 of r.
func (r *dynRun) plots(tau0 int) []plotSpec {
	var lamLines, qLines []series
	for i := range r.n {
		lamLines = append(lamLines, series{name: fmt.Sprintf("lambda_%d", i+1), xs: r.xs, ys: r.lam[i], style: i % 7, dash: 0})
		lamLines = append(lamLines, series{xs: r.xs, ys: r.lamHat[i], style: i % 7, dash: 1})
		qLines = append(qLines, series{name: fmt.Sprintf("q_%d", i+1), xs: r.xs, ys: r.q[i], style: i, dash: -1})
	}
	jx, je, jt := make([]float64, len(r.idx)), make([]float64, len(r.idx)), make([]float64, len(r.idx))
	for j, t := range r.idx {
		jx[j], je[j], jt[j] = float64(t+1), r.estJ[t], r.trueJ[t]
	}
	return []plotSpec{
		{"lambda.png", axes{title: fmt.Sprintf("Fig. 5: lambda_i(t) (solid) and estimates lambda-hat_i(t) (dashed), tau0 = %d", tau0), x: "update interval", y: "tokens/s"}, lamLines},
		{"q.png", axes{title: "Fig. 6 (top): indicators q_i(t) = lambda-hat_i - C_i", x: "update interval", y: "tokens/s"}, qLines},
		{"jfi.png", axes{title: "Fig. 6 (bottom): JFI(q(t))", x: "update interval", y: "JFI", yMin: 0, yMax: 1.02, legendBottom: true},
			[]series{{name: "JFI of the indicators (lambda-hat - C)", xs: jx, ys: je, style: 1, dash: 0},
				{name: "JFI of the true spare bandwidth (lambda - C)", xs: jx, ys: jt, style: 3, dash: 1}}},
	}
}

// writeDynReport writes report.md and report.json to ctx.Out and the
// summary on ctx.Stdout.
func writeDynReport(ctx experiment.Context, rep *dynReport, c *cluster, tau0 int, alpha, scale float64, total int, stable bool) error {
	var md strings.Builder
	fmt.Fprintf(&md, "# gdrl-dynamic: changing demand (seed 001 §III-B, Figs. 5-6)\n\n")
	fmt.Fprintf(&md, "Setup (the paper's): N = 10 on a ring, spare bandwidth (eq. (14)), eta = 1/4, load 90%% (C = sum lambda_i / 0.9; the sum is N/2 at every t), "+
		"lambda_i(t) piecewise linear in 4 segments of tau0 = %d update intervals (abrupt change at tau0, continuous linear shift back over [2 tau0, 3 tau0]; the printed formula swaps the shift's end points, see dynLambda); alpha = %g per interval. "+
		"Ours: gdrl nodes driven directly, one request per node per %v interval for a Poisson number of tokens (mean lambda_i(t) * interval, lambda in units of %g tokens/s), seed 1.\n\n",
		tau0, alpha, dt, scale)
	md.WriteString("| phase | intervals | JFI(indicators) >= 0.99 after | JFI(true) >= 0.99 after | min JFI(indicators) | min JFI(true) | mean JFI(indicators), last 10% | mean JFI(true), last 10% |\n|---|---|---|---|---|---|---|---|\n")
	for _, ph := range rep.Phases {
		fmt.Fprintf(&md, "| %s | %d-%d | %s | %s | %.4f | %.4f | %.4f | %.4f |\n", ph.Phase, ph.From, ph.To, intervals(ph.EstRecover, tau0), intervals(ph.TrueRecover, tau0),
			ph.EstMin, ph.TrueMin, ph.EstTail, ph.TrueTail)
	}
	fmt.Fprintf(&md, "\n## Beside the paper\n\nThe paper states no numbers; it claims that GDRL stabilises (q_i equal again, JFI back near 1) after the transients caused by the abrupt "+
		"change at tau0 and by the linear shift. Ours: the claim %s (the criterion: mean JFI of the indicators >= 0.99 and of the true spare bandwidth >= 0.95 over the last "+
		"10%% of each segment of constant demand, 1, 2 and 4; during the linear shift the true lambda moves away from the lagging estimates, so JFI(true) is low at its end by construction). The indicators the nodes equalise stay close to equal through the changes because GDRL's pace (tens of intervals) is much faster "+
		"than the demand filter's (1/alpha intervals); the true spare bandwidth lags by the filter's time constant, as the estimates in lambda.png (Fig. 5) do.\n\n"+
		"Messages %d, bytes %d over %d intervals.\n\nPlots: lambda.png (Fig. 5), q.png and jfi.png (Fig. 6).\n", holdsText(stable), c.messages, c.bytes, total)
	if err := writeMD(ctx.Out, md.String()); err != nil {
		return err
	}
	if err := writeJSON(ctx.Out, *rep); err != nil {
		return err
	}
	fmt.Fprintf(ctx.Stdout, "gdrl-dynamic (seed 001 Figs. 5-6): N=10 ring, eta=1/4, alpha=%g, tau0=%d intervals\n", alpha, tau0)
	for _, ph := range rep.Phases {
		fmt.Fprintf(ctx.Stdout, "  %-46s JFI(ind.) >= 0.99 after %s, JFI(true) after %s; last-10%% mean %.4f / %.4f\n", ph.Phase, intervals(ph.EstRecover, tau0), intervals(ph.TrueRecover, tau0), ph.EstTail, ph.TrueTail)
	}
	fmt.Fprintf(ctx.Stdout, "  paper: \"GDRL stabilizes after the transient periods\" (no number stated); %s\n  report: %s\n", holdsText(stable), filepath.Join(ctx.Out, "report.md"))
	return nil
}
