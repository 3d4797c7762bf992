package srtmexp

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/tokenmesh/tokenmesh/experiment"
	"github.com/tokenmesh/tokenmesh/srtm"
)

// concMCap is the model broker's capacity in Figs. 7-8: with the initial
// loads 10..80 kmsg/s it makes 8,000 publishers (r = 88 kmsg/s) need
// brokers 1, 2 and 3, as in the paper's §6.3 example.
const concMCap = 68000

// serviceScale: the model broker's saturation rate is serviceScale*mcap,
// mcap being the planner's benchmarked safe capacity (footnote 5); without
// headroom, max-min fills a broker to utilisation ~1 and queueing, not the
// DRL penalty, dominates (Figs. 7-11).
const serviceScale = 1.25

// initialLoads are Fig. 8's pre-existing Poisson loads on brokers 1-6.
var initialLoads = []float64{10000, 40000, 50000, 60000, 70000, 80000}

// Concentration reproduces the concentration and max-min principles of
// SRTM 000 §6.2-6.3, Figs. 7-8: the p99 end-to-end latency of LB vs Conc on
// 6 idle brokers (mcap 68,000 msg/s), and of Conc vs Max-Min on brokers
// with initial loads 10, 40, ..., 80 kmsg/s, by number of publishers
// (10 msg/s each). Its Run writes report.md, report.json and one
// fig{7,8}_<arrival>_b<batch>.png per figure and panel to ctx.Out; errors
// are srtm's (Plan naming the figure, policy and n; Simulate) and the
// files'.
func Concentration() experiment.Experiment {
	return experiment.Experiment{
		Name:    "srtm-concentration",
		Summary: "SRTM concentration and max-min: p99 latency of LB vs Conc (idle brokers) and Conc vs Max-Min (loaded brokers) by number of publishers (broker model)",
		Source:  "seed 000 §6.2-6.3, Figs. 7-8",
		Run:     runConcentration,
	}
}

type concRow struct {
	Figure     string  `json:"figure"`
	Arrival    string  `json:"arrival"`
	Batch      int     `json:"batch"`
	Policy     string  `json:"policy"`
	Publishers int     `json:"publishers"`
	Brokers    int     `json:"brokers"`
	P99ms      float64 `json:"p99_ms"`
	P99sd      float64 `json:"p99_sd_ms"`
	TokenP99ms float64 `json:"token_p99_ms"`
	Broker3ms  float64 `json:"broker3_p99_ms,omitempty"` // Fig. 8: p99 of broker3's topic messages (-1: unused)
	Broker3Tok float64 `json:"broker3_token_p99_ms,omitempty"`
	Broker3Msg float64 `json:"broker3_rate,omitempty"` // topic msg/s on broker3
}

func runConcentration(ctx experiment.Context) error {
	start := time.Now()
	p := newConcPlan(ctx)
	rows, err := p.measure(ctx)
	if err != nil {
		return err
	}
	claims := concFig7Claims(rows)
	ours3, ours3JSON, fig8 := concBroker3(rows)
	claims = append(claims, fig8...)
	claims = append(claims, concFig8Claims(rows)...)
	wall := time.Since(start)
	plots, err := p.plots(ctx.Out, rows)
	if err != nil {
		return err
	}
	return p.report(ctx, rows, claims, ours3, ours3JSON, plots, wall)
}

// concPlan is what runConcentration measures: Figs. 7 and 8 on each panel
// (arrival type and batch), for each number of publishers and seed.
type concPlan struct {
	dur    time.Duration
	ns     []int
	panels []concPanel
	seeds  int
}

// concPanel is one panel of a figure: an arrival type and a batch size.
type concPanel struct {
	a     srtm.Arrival
	batch int
}

// newConcPlan is the plan of the paper's figures, or a smaller one with
// ctx.Quick.
func newConcPlan(ctx experiment.Context) *concPlan {
	p := &concPlan{
		dur:    time.Second,
		ns:     []int{1000, 2000, 4000, 6000, 8000, 10000},
		panels: []concPanel{{srtm.Poisson, 1}, {srtm.Poisson, 10}, {srtm.Periodic, 1}, {srtm.Periodic, 10}},
	}
	if ctx.Quick {
		p.dur = 200 * time.Millisecond
		p.ns = []int{2000, 8000}
		p.panels = p.panels[:2]
	}
	p.seeds = seeds(ctx)
	return p
}

// concFigure is the brokers, their background load's batch and the
// policies of figure fig: idle brokers for Fig. 7, loaded ones for Fig. 8.
func concFigure(fig string) (brokers []srtm.Broker, loadBatch int, pols []srtm.Policy) {
	brokers = idle(6, concMCap)
	pols = []srtm.Policy{srtm.LoadBalance, srtm.ConcentrationEqual}
	if fig == "8" {
		for i := range brokers {
			brokers[i].Load = initialLoads[i]
		}
		loadBatch = 10 // Fig. 8's caption: initial Poisson load w/ batch size of 10
		pols = []srtm.Policy{srtm.ConcentrationEqual, srtm.MaxMin, srtm.Concentration}
	}
	return brokers, loadBatch, pols
}

// measure runs both figures and returns one row per (figure, panel,
// policy, publishers), averaged over the seeds.
func (p *concPlan) measure(ctx experiment.Context) ([]concRow, error) {
	var rows []concRow
	// Fig. 7 runs 2 policies, Fig. 8 runs 3, each on every panel, n and seed.
	total, done := (2+3)*len(p.panels)*len(p.ns)*p.seeds, 0
	for _, fig := range []string{"7", "8"} {
		brokers, loadBatch, pols := concFigure(fig)
		for _, pn := range p.panels {
			for _, pol := range pols {
				for _, n := range p.ns {
					row, err := p.measureRow(ctx, concRun{fig: fig, brokers: brokers, loadBatch: loadBatch, pn: pn, pol: pol, n: n}, &done, total)
					if err != nil {
						return nil, err
					}
					rows = append(rows, row)
				}
			}
		}
	}
	return rows, nil
}

// concRun is one row's configuration.
type concRun struct {
	fig       string
	brokers   []srtm.Broker
	loadBatch int
	pn        concPanel
	pol       srtm.Policy
	n         int
}

// concSamples are one row's measures, one per seed.
type concSamples struct {
	p99, tok, b3, b3t, b3r []float64
}

// measureRow runs c for every seed (counting them in done, of total) and
// returns its row.
func (p *concPlan) measureRow(ctx experiment.Context, c concRun, done *int, total int) (concRow, error) {
	row := concRow{Figure: c.fig, Arrival: string(c.pn.a), Batch: c.pn.batch, Policy: string(c.pol), Publishers: c.n}
	var sm concSamples
	for s := range p.seeds {
		brokers, err := p.measureSeed(c, s, &sm)
		if err != nil {
			return row, err
		}
		row.Brokers = brokers
		*done++
		progress(ctx, fmt.Sprintf("fig %s %s n=%d", c.fig, c.pol, c.n), *done, total)
	}
	row.P99ms, row.P99sd = meanSD(sm.p99)
	row.TokenP99ms, _ = meanSD(sm.tok)
	if c.fig == "8" {
		row.Broker3ms, row.Broker3Tok, row.Broker3Msg = -1, -1, 0
		if len(sm.b3) > 0 {
			row.Broker3ms, _ = meanSD(sm.b3)
			row.Broker3Tok, _ = meanSD(sm.b3t)
			row.Broker3Msg, _ = meanSD(sm.b3r)
		}
	}
	for _, f := range []*float64{&row.P99ms, &row.P99sd, &row.TokenP99ms, &row.Broker3ms, &row.Broker3Tok} {
		*f = r4(*f)
	}
	return row, nil
}

// measureSeed plans and simulates c with seed number s, adds its measures
// to sm and returns the number of brokers of the plan.
func (p *concPlan) measureSeed(c concRun, s int, sm *concSamples) (int, error) {
	seed := uint64(7*c.n + 100*s + c.pn.batch)
	t, err := scenario{n: c.n, batch: c.pn.batch, arrival: c.pn.a}.topic(p.dur, seed)
	if err != nil {
		return 0, err
	}
	pl, err := srtm.Plan(c.brokers, t, c.pol)
	if err != nil {
		return 0, fmt.Errorf("fig %s %s n=%d: %w", c.fig, c.pol, c.n, err)
	}
	res, err := srtm.Simulate(pl, c.brokers, srtm.SimOptions{Duration: p.dur, Seed: seed, Arrival: c.pn.a, LoadBatch: c.loadBatch, ServiceScale: serviceScale})
	if err != nil {
		return 0, err
	}
	sm.p99 = append(sm.p99, ms(res.Overall.P99))
	sm.tok = append(sm.tok, ms(res.Overall.TokenP99))
	for i, sh := range pl.Shares {
		if sh.Broker == "broker3" {
			sm.b3 = append(sm.b3, ms(res.PerBroker[i].P99))
			sm.b3t = append(sm.b3t, ms(res.PerBroker[i].TokenP99))
			sm.b3r = append(sm.b3r, sh.PublisherRate)
		}
	}
	return len(pl.Shares), nil
}

// concFind is the row of figure fig, arrival a, batch, policy pol and n
// publishers, if any.
func concFind(rows []concRow, fig string, a srtm.Arrival, batch int, pol srtm.Policy, n int) (concRow, bool) {
	return first(rows, func(r concRow) bool {
		return r.Figure == fig && r.Arrival == string(a) && r.Batch == batch && r.Policy == string(pol) && r.Publishers == n
	})
}

// concFig7Counts are the tallies of Fig. 7's claims.
type concFig7Counts struct {
	concOK, lbFail, lbN, concN, amp, ampN int
}

// concFig7Claims checks Fig. 7's claims: Conc meets the SLO, LB fails it,
// more so with batches.
func concFig7Claims(rows []concRow) []claim {
	var n concFig7Counts
	for _, r := range rows {
		if r.Figure != "7" {
			continue
		}
		if r.Policy == string(srtm.ConcentrationEqual) {
			n.concN++
			if r.P99ms <= ms(slo) {
				n.concOK++
			}
		} else {
			n.countLB(rows, r)
		}
	}
	claims := []claim{
		{"Fig. 7: Conc meets the 1 ms SLO in every configuration", n.concOK == n.concN, fmt.Sprintf("%d of %d Conc configurations have p99 <= 1 ms", n.concOK, n.concN)},
		{"Fig. 7: LB consistently fails the SLO", n.lbFail == n.lbN, fmt.Sprintf("%d of %d LB configurations have p99 > 1 ms", n.lbFail, n.lbN)},
	}
	if n.ampN > 0 {
		claims = append(claims, claim{"Fig. 7: burstiness (batch 10) amplifies LB's DRL penalty", n.amp == n.ampN, fmt.Sprintf("LB p99 higher with batch 10 than batch 1 in %d of %d cases", n.amp, n.ampN)})
	}
	return claims
}

// countLB counts LB's row r of Fig. 7 and, with batch 10, whether it is
// worse than with batch 1.
func (n *concFig7Counts) countLB(rows []concRow, r concRow) {
	n.lbN++
	if r.P99ms > ms(slo) {
		n.lbFail++
	}
	if r.Batch != 10 {
		return
	}
	if r1, ok := concFind(rows, "7", srtm.Arrival(r.Arrival), 1, srtm.LoadBalance, r.Publishers); ok {
		n.ampN++
		if r.P99ms > r1.P99ms {
			n.amp++
		}
	}
}

// concBroker3 is Fig. 8's headline, broker 3 at 8,000 publishers, Poisson
// (caption), batch 1 and 10: as text, as JSON and as claims.
func concBroker3(rows []concRow) (ours3 []string, ours3JSON map[string]map[string]float64, claims []claim) {
	ours3JSON = map[string]map[string]float64{}
	for _, batch := range []int{1, 10} {
		c8, ok1 := concFind(rows, "8", srtm.Poisson, batch, srtm.ConcentrationEqual, 8000)
		m8, ok2 := concFind(rows, "8", srtm.Poisson, batch, srtm.MaxMin, 8000)
		if !ok1 || !ok2 {
			continue
		}
		o := fmt.Sprintf("Poisson batch %d: %.3f vs %.3f ms (broker3 topic rate %.0f vs %.0f msg/s; its token-wait p99 %.3f vs %.3f ms)", batch, c8.Broker3ms, m8.Broker3ms, c8.Broker3Msg, m8.Broker3Msg, c8.Broker3Tok, m8.Broker3Tok)
		ours3 = append(ours3, o)
		ours3JSON[fmt.Sprint("poisson_batch", batch)] = map[string]float64{"conc": c8.Broker3ms, "maxmin": m8.Broker3ms}
		claims = append(claims, claim{fmt.Sprintf("Fig. 8 (Poisson, batch %d): at 8k publishers broker 3's p99 is higher under Conc than under Max-Min, from a larger DRL penalty", batch),
			c8.Broker3ms > m8.Broker3ms && c8.Broker3Tok > m8.Broker3Tok, o})
	}
	return ours3, ours3JSON, claims
}

// concFig8Claims checks Fig. 8's claims on Conc and Max-Min: identical on
// one broker, Max-Min no worse once split.
func concFig8Claims(rows []concRow) []claim {
	same, sameN, better, betterN := 0, 0, 0, 0
	for _, r := range rows {
		if r.Figure != "8" || r.Policy != string(srtm.ConcentrationEqual) {
			continue
		}
		m, ok := concFind(rows, "8", srtm.Arrival(r.Arrival), r.Batch, srtm.MaxMin, r.Publishers)
		if !ok {
			continue
		}
		if r.Brokers == 1 {
			sameN++
			if r.P99ms == m.P99ms {
				same++
			}
		} else {
			betterN++
			if m.P99ms <= r.P99ms {
				better++
			}
		}
	}
	return []claim{
		{"Fig. 8: at low load (one broker) Conc and Max-Min perform identically", same == sameN && sameN > 0, fmt.Sprintf("identical p99 in %d of %d single-broker cases", same, sameN)},
		{"Fig. 8: once the topic is split, Max-Min's p99 is no worse than Conc's", better == betterN && betterN > 0, fmt.Sprintf("Max-Min <= Conc in %d of %d split cases", better, betterN)},
	}
}

// plots draws one plot per figure and panel into dir and returns the
// files' names.
func (p *concPlan) plots(dir string, rows []concRow) ([]string, error) {
	var plots []string
	for _, fig := range []string{"7", "8"} {
		for _, pn := range p.panels {
			f, err := p.plot(dir, rows, fig, pn)
			if err != nil {
				return nil, err
			}
			plots = append(plots, f)
		}
	}
	return plots, nil
}

// plot draws the p99 of each policy of figure fig on panel pn, with the
// SLO.
func (p *concPlan) plot(dir string, rows []concRow, fig string, pn concPanel) (string, error) {
	var ls []series
	for _, r := range rows {
		if r.Figure != fig || r.Arrival != string(pn.a) || r.Batch != pn.batch {
			continue
		}
		var j int
		ls, j = seriesIndex(ls, r.Policy)
		ls[j].xs = append(ls[j].xs, float64(r.Publishers))
		ls[j].ys = append(ls[j].ys, r.P99ms)
	}
	ls = append(ls, series{name: "SLO 1 ms", xs: []float64{float64(p.ns[0]), float64(p.ns[len(p.ns)-1])}, ys: []float64{1, 1}})
	f := fmt.Sprintf("fig%s_%s_b%d.png", fig, pn.a, pn.batch)
	title := fmt.Sprintf("Fig. %s model: %s publishers, batch %d, mcap %d msg/s", fig, pn.a, pn.batch, concMCap)
	if fig == "8" {
		title += ", initial loads 10-80k"
	}
	if err := linePlot(filepath.Join(dir, f), title, "publishers", "p99 latency (ms)", true, ls); err != nil {
		return "", err
	}
	return f, nil
}

// report writes report.md and report.json to ctx.Out and the headline and
// claims on ctx.Stdout.
func (p *concPlan) report(ctx experiment.Context, rows []concRow, claims []claim, ours3 []string, ours3JSON map[string]map[string]float64, plots []string, wall time.Duration) error {
	S, dur := p.seeds, p.dur
	var md strings.Builder
	fmt.Fprintf(&md, "# srtm-concentration: concentration and max-min (SRTM §6.2-6.3, Figs. 7-8)\n\n")
	fmt.Fprintf(&md, "Model, not NSQ: 6 brokers, FIFO single server with deterministic service 1/(1.25 mcap) (mcap is the planner's benchmarked capacity, the broker saturates 25%% above it), mcap = %d msg/s (chosen so that with Fig. 8's initial loads 8,000 publishers need brokers 1-3, as in the paper); background load is Poisson in batches of 10 (Fig. 8's caption). Publishers 10 msg/s; r = 1.1 x message rate; b = smallest with zero p99 access delay on the run's own trace (§6; the unsplit bucket delays at most 1%% of messages by construction). Policies are srtm.Plan's: lb (the paper's LB: water-fill over all brokers), conc-equal (the paper's Conc: fewest brokers, equal total load), maxmin (the paper's Max-Min: fewest brokers, quotas min(rcap, rate/k) water-filled); Fig. 8 also shows concentration (fewest brokers filled greedily in decreasing rcap order, the last taking the remainder) as an extra line. %d seed(s), %v simulated per run%s.\n\n", concMCap, S, dur, quickNote(ctx))
	fmt.Fprintf(&md, "| fig | arrival | batch | policy | publishers | brokers | p99 ms (sd) | token-wait p99 ms | broker3 p99 ms | broker3 token p99 ms | broker3 topic msg/s |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		b3 := "- | - | -"
		if r.Figure == "8" {
			b3 = fmt.Sprintf("%.3f | %.3f | %.0f", r.Broker3ms, r.Broker3Tok, r.Broker3Msg)
		}
		fmt.Fprintf(&md, "| %s | %s | %d | %s | %d | %d | %.3f (%.3f) | %.3f | %s |\n", r.Figure, r.Arrival, r.Batch, r.Policy, r.Publishers, r.Brokers, r.P99ms, r.P99sd, r.TokenP99ms, b3)
	}
	fmt.Fprintf(&md, "\n(broker3 p99 = -1: broker 3 holds none of the topic.)\n\nPaper (Fig. 8, 8k publishers): broker 3's p99 is 1.50 ms under Conc vs 0.87 ms under Max-Min. Ours: %s.\n\n## Claims\n\n", strings.Join(ours3, "; "))
	writeClaims(&md, claims)
	fmt.Fprintf(&md, "\nNot reproduced: the paper's Fig. 8c-d observation that batches help through fewer active NSQ IOLoop goroutines (our broker has no per-connection cost).\n\nPlots: %s. Wall time %v.\n", strings.Join(plots, ", "), wall.Round(time.Millisecond))
	if err := writeReport(ctx.Out, md.String(), map[string]any{
		"experiment": "srtm-concentration", "quick": ctx.Quick, "seeds": S, "duration_s": dur.Seconds(), "mcap": concMCap, "initial_loads": initialLoads,
		"rows": rows, "claims": claims, "paper_broker3_ms": map[string]float64{"conc": 1.50, "maxmin": 0.87},
		"ours_broker3_ms": ours3JSON, "wall_s": r4(wall.Seconds()),
	}); err != nil {
		return err
	}
	if ctx.Stdout != nil {
		fmt.Fprintf(ctx.Stdout, "srtm-concentration: broker 3 p99 at 8k publishers, Conc vs Max-Min: paper 1.50 vs 0.87 ms; ours %s\n", strings.Join(ours3, "; "))
		printClaims(ctx.Stdout, claims, ctx.Out, wall)
	}
	return nil
}
