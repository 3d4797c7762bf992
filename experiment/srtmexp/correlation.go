package srtmexp

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/tokenmesh/tokenmesh/experiment"
	"github.com/tokenmesh/tokenmesh/srtm"
)

// corrMCap is the model broker's capacity in Figs. 9-11 (as in Figs. 7-8).
const corrMCap = concMCap

// Correlation reproduces correlation-aware assignment, SRTM 000 §6.4,
// Figs. 9-11: 1,000 publishers (batch 10, 10 msg/s)
// in perfectly synchronised correlation groups of growing size, placed by
// online fitting (srtm.Fit against the broker model, SLO 1 ms) with SRTM's
// correlation-aware assignment or with a correlation-oblivious Max-Min;
// Max-Min forced onto SRTM's number of brokers (Fig. 10); and groups of 25
// whose messages are spread over 0-16 ms of noise (Fig. 11). Its Run
// writes report.md, report.json and fig{9,11}_<arrival>_{p99,brokers}.png
// to ctx.Out; errors are srtm's (naming the figure, policy, group size and
// noise) and the files'.
func Correlation() experiment.Experiment {
	return experiment.Experiment{
		Name:    "srtm-correlation",
		Summary: "SRTM correlation-awareness: p99 and brokers used by SRTM vs correlation-oblivious Max-Min for correlation groups up to 30 and noise 0-16 ms (broker model, online fitting)",
		Source:  "seed 000 §6.4, Figs. 9-11",
		Run:     runCorrelation,
	}
}

type corrRow struct {
	Figure  string  `json:"figure"`
	Arrival string  `json:"arrival"`
	Group   int     `json:"group_size"`
	NoiseMs float64 `json:"noise_ms"`
	Policy  string  `json:"policy"` // srtm, maxmin, maxmin-same-k
	Brokers float64 `json:"brokers_mean"`
	P99ms   float64 `json:"p99_ms"`
	P99sd   float64 `json:"p99_sd_ms"`
	Fitted  int     `json:"fitted_runs"` // runs where Fit met the SLO (others: best k reported)
	Runs    int     `json:"runs"`
}

// corrRun places and simulates one configuration; oblivious strips the
// groups before placement (publishers stay in group order, so contiguous
// runs keep groups together) and restores them for the simulation.
func corrRun(t srtm.Topic, oblivious bool, forceK int, opts srtm.SimOptions) (k int, p99 time.Duration, fitted bool, err error) {
	brokers := idle(6, corrMCap)
	byName := map[string]srtm.Publisher{}
	for _, p := range t.Publishers {
		byName[p.Name] = p
	}
	restore := func(ps []srtm.Publisher) []srtm.Publisher {
		out := make([]srtm.Publisher, len(ps))
		for i, p := range ps {
			out[i] = byName[p.Name]
		}
		return out
	}
	pt := t
	if oblivious {
		pt.Publishers = make([]srtm.Publisher, len(t.Publishers))
		for i, p := range t.Publishers {
			p.Group = ""
			pt.Publishers[i] = p
		}
	}
	sim := func(pl srtm.PlanResult) (time.Duration, error) {
		for i := range pl.Shares {
			pl.Shares[i].Publishers = restore(pl.Shares[i].Publishers)
		}
		res, err := srtm.Simulate(pl, brokers, opts)
		return res.Overall.P99, err
	}
	evenK := func(k int) (time.Duration, error) {
		pl, err := srtm.Plan(idle(k, corrMCap), pt, srtm.LoadBalance)
		if err != nil {
			return 0, err
		}
		return sim(pl)
	}
	if forceK > 0 {
		d, err := evenK(forceK)
		return forceK, d, false, err
	}
	measure := srtm.ModelP99(t, opts)
	fr, ferr := srtm.Fit(brokers, pt, srtm.MaxMin, func(b srtm.Broker, ps []srtm.Publisher) (time.Duration, error) {
		return measure(b, restore(ps))
	})
	if ferr == nil {
		d, err := sim(fr.Plan)
		if err != nil {
			return 0, 0, false, err
		}
		if d <= t.SLO {
			return len(fr.Plan.Shares), d, true, nil
		}
	}
	// The paper: when a design cannot meet the SLO, report its best
	// configuration; we try an even split over k = 1..6 brokers.
	best, bestK := time.Duration(-1), 0
	for k := 1; k <= 6; k++ {
		d, err := evenK(k)
		if err != nil {
			continue
		}
		if best < 0 || d < best {
			best, bestK = d, k
		}
	}
	if best < 0 {
		return 0, 0, false, fmt.Errorf("no configuration of 1..6 brokers could be simulated")
	}
	return bestK, best, false, nil
}

func runCorrelation(ctx experiment.Context) error {
	start := time.Now()
	// Groups of 25 with batch 10 make ~40 bursts of 250 messages a second:
	// the p99 rests on a handful of bursts, so runs are longer than in
	// Figs. 6-8.
	dur := 3 * time.Second
	groups := []int{1, 5, 10, 15, 20, 25, 30}
	noises := []time.Duration{0, time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond, 8 * time.Millisecond, 16 * time.Millisecond}
	arrivals := []srtm.Arrival{srtm.Poisson, srtm.Periodic}
	if ctx.Quick {
		dur = 200 * time.Millisecond
		groups = []int{1, 25}
		noises = []time.Duration{0, 8 * time.Millisecond}
		arrivals = arrivals[:1]
	}
	S := seeds(ctx)
	const n = 1000
	var rows []corrRow
	type cfg struct {
		fig   string
		group int
		noise time.Duration
	}
	var cfgs []cfg
	for _, g := range groups {
		cfgs = append(cfgs, cfg{"9", g, 0})
	}
	for _, z := range noises {
		cfgs = append(cfgs, cfg{"11", 25, z})
	}
	total, done := len(arrivals)*len(cfgs)*S, 0
	for _, a := range arrivals {
		for _, c := range cfgs {
			pols := []string{"srtm", "maxmin", "maxmin-same-k"}
			if c.fig == "11" {
				pols = pols[:2]
			}
			acc := map[string]*corrRow{}
			p99s := map[string][]float64{}
			for _, p := range pols {
				acc[p] = &corrRow{Figure: c.fig, Arrival: string(a), Group: c.group, NoiseMs: ms(c.noise), Policy: p}
			}
			for s := range S {
				seed := uint64(31*c.group + 1000*s + int(c.noise/time.Millisecond))
				t, err := scenario{n: n, batch: 10, arrival: a, group: c.group, noise: c.noise}.topic(dur, seed)
				if err != nil {
					return err
				}
				opts := srtm.SimOptions{Duration: dur, Seed: seed, Arrival: a, Noise: c.noise, ServiceScale: serviceScale}
				srtmK := 0
				for _, p := range pols {
					var k int
					var d time.Duration
					var fitted bool
					switch p {
					case "srtm":
						k, d, fitted, err = corrRun(t, false, 0, opts)
						srtmK = k
					case "maxmin":
						k, d, fitted, err = corrRun(t, true, 0, opts)
					default:
						k, d, fitted, err = corrRun(t, true, srtmK, opts)
					}
					if err != nil {
						return fmt.Errorf("fig %s %s group %d noise %v: %w", c.fig, p, c.group, c.noise, err)
					}
					r := acc[p]
					r.Brokers += float64(k) / float64(S)
					r.Runs++
					if fitted {
						r.Fitted++
					}
					p99s[p] = append(p99s[p], ms(d))
				}
				done++
				progress(ctx, fmt.Sprintf("fig %s %s group %d noise %v", c.fig, a, c.group, c.noise), done, total)
			}
			for _, p := range pols {
				r := acc[p]
				r.P99ms, r.P99sd = meanSD(p99s[p])
				r.P99ms, r.P99sd, r.Brokers = r4(r.P99ms), r4(r.P99sd), r4(r.Brokers)
				rows = append(rows, *r)
			}
		}
	}
	find := func(fig string, a srtm.Arrival, g int, z float64, pol string) (corrRow, bool) {
		return first(rows, func(r corrRow) bool {
			return r.Figure == fig && r.Arrival == string(a) && r.Group == g && r.NoiseMs == z && r.Policy == pol
		})
	}
	var claims []claim
	// Fig. 9: SRTM meets the SLO for groups up to 30; Max-Min does not for large groups, and uses fewer brokers.
	sOK, sN, mFail, mN, fewer, fewerN, worse, worseN := 0, 0, 0, 0, 0, 0, 0, 0
	for _, r := range rows {
		if r.Figure != "9" {
			continue
		}
		switch r.Policy {
		case "srtm":
			sN++
			if r.P99ms <= ms(slo) {
				sOK++
			}
			if m, ok := find("9", srtm.Arrival(r.Arrival), r.Group, 0, "maxmin"); ok && r.Group >= 10 {
				mN++
				if m.P99ms > ms(slo) {
					mFail++
				}
				fewerN++
				if m.Brokers < r.Brokers {
					fewer++
				}
			}
		case "maxmin-same-k":
			if m, ok := find("9", srtm.Arrival(r.Arrival), r.Group, 0, "maxmin"); ok && r.Group >= 10 {
				worseN++
				if r.P99ms >= m.P99ms {
					worse++
				}
			}
		}
	}
	claims = append(claims,
		claim{"Fig. 9: SRTM meets the 1 ms SLO for all group sizes (up to 30)", sOK == sN, fmt.Sprintf("%d of %d SRTM configurations with p99 <= 1 ms", sOK, sN)},
		claim{"Fig. 9: correlation-oblivious Max-Min misses the SLO for large groups (>= 10)", mN > 0 && mFail == mN, fmt.Sprintf("%d of %d Max-Min configurations with groups >= 10 have p99 > 1 ms", mFail, mN)},
		claim{"Fig. 9: Max-Min is forced onto fewer brokers than SRTM (large groups)", fewerN > 0 && fewer == fewerN, fmt.Sprintf("fewer brokers in %d of %d", fewer, fewerN)},
		claim{"Fig. 10: Max-Min on SRTM's number of brokers is even worse", worseN > 0 && worse == worseN, fmt.Sprintf("p99 no lower than Max-Min's own choice in %d of %d", worse, worseN)},
	)
	// Fig. 11: SRTM beats Max-Min at small noise; p99 and brokers fall as noise grows.
	var small, smallN, fall, fallN int
	for _, a := range arrivals {
		s0, ok1 := find("11", a, 25, 0, "srtm")
		m0, ok2 := find("11", a, 25, 0, "maxmin")
		if ok1 && ok2 {
			smallN++
			if s0.P99ms < m0.P99ms {
				small++
			}
		}
		last := ms(noises[len(noises)-1])
		for _, p := range []string{"srtm", "maxmin"} {
			x0, ok1 := find("11", a, 25, 0, p)
			x1, ok2 := find("11", a, 25, last, p)
			if ok1 && ok2 {
				fallN++
				if x1.P99ms <= x0.P99ms && x1.Brokers <= x0.Brokers {
					fall++
				}
			}
		}
	}
	claims = append(claims,
		claim{"Fig. 11: with little noise, correlation information still lowers the p99 (SRTM < Max-Min at 0 ms noise)", smallN > 0 && small == smallN, fmt.Sprintf("%d of %d arrival types", small, smallN)},
		claim{"Fig. 11: more noise lowers both the tail latency and the number of brokers", fallN > 0 && fall == fallN, fmt.Sprintf("p99 and brokers at the largest noise no higher than at 0 ms in %d of %d (policy, arrival) pairs", fall, fallN)},
	)
	wall := time.Since(start)

	var plots []string
	for _, a := range arrivals {
		for _, fig := range []string{"9", "11"} {
			var lat, brk []series
			for _, r := range rows {
				if r.Figure != fig || r.Arrival != string(a) {
					continue
				}
				x := float64(r.Group)
				if fig == "11" {
					x = r.NoiseMs
				}
				// lat and brk hold the same policies in the same order.
				var j int
				lat, j = seriesIndex(lat, r.Policy)
				brk, _ = seriesIndex(brk, r.Policy)
				lat[j].xs, lat[j].ys = append(lat[j].xs, x), append(lat[j].ys, r.P99ms)
				brk[j].xs, brk[j].ys = append(brk[j].xs, x), append(brk[j].ys, r.Brokers)
			}
			xl := "correlation group size"
			if fig == "11" {
				xl = "noise interval (ms), group size 25"
			}
			f1 := fmt.Sprintf("fig%s_%s_p99.png", fig, a)
			f2 := fmt.Sprintf("fig%s_%s_brokers.png", fig, a)
			if err := linePlot(filepath.Join(ctx.Out, f1), fmt.Sprintf("Fig. %s model: %s, 1,000 publishers, batch 10: p99", fig, a), xl, "p99 latency (ms)", true, lat); err != nil {
				return err
			}
			if err := linePlot(filepath.Join(ctx.Out, f2), fmt.Sprintf("Fig. %s model: %s: brokers used", fig, a), xl, "brokers", false, brk); err != nil {
				return err
			}
			plots = append(plots, f1, f2)
		}
	}

	var md strings.Builder
	fmt.Fprintf(&md, "# srtm-correlation: correlation-aware assignment (SRTM §6.4, Figs. 9-11)\n\n")
	fmt.Fprintf(&md, "Model, not NSQ: 6 idle brokers, FIFO single server with deterministic service 1/(1.25 mcap) (as in srtm-concentration), mcap = %d msg/s. 1,000 publishers, 10 msg/s, batch 10; a correlation group's members emit their batches at the same group events (plus uniform noise in Fig. 11). r = 1.1 x message rate, b = smallest with zero p99 access delay on the run's own trace (§6). Placement: srtm.Fit (max-min quotas, online fitting against srtm.ModelP99, SLO 1 ms); srtm = correlation-aware assignment; maxmin = the same with groups hidden from the planner (publishers in group order, so groups stay together); maxmin-same-k = an even split over SRTM's number of brokers (Fig. 10). When fitting ends above the SLO (or fails), the best even split over 1..6 brokers is reported (the paper's 'best configuration'). %d seed(s), %v simulated per run%s.\n\n", corrMCap, S, dur, quickNote(ctx))
	fmt.Fprintf(&md, "| fig | arrival | group | noise ms | policy | brokers | p99 ms (sd) | fitted within SLO |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&md, "| %s | %s | %d | %g | %s | %.2f | %.3f (%.3f) | %d/%d |\n", r.Figure, r.Arrival, r.Group, r.NoiseMs, r.Policy, r.Brokers, r.P99ms, r.P99sd, r.Fitted, r.Runs)
	}
	fmt.Fprintf(&md, "\n## Claims\n\n")
	writeClaims(&md, claims)
	fmt.Fprintf(&md, "\nThe paper gives no single headline number for Figs. 9-11; absolute latencies differ (model broker).\n\nPlots: %s. Wall time %v.\n", strings.Join(plots, ", "), wall.Round(time.Millisecond))
	if err := writeReport(ctx.Out, md.String(), map[string]any{
		"experiment": "srtm-correlation", "quick": ctx.Quick, "seeds": S, "duration_s": dur.Seconds(), "mcap": corrMCap,
		"rows": rows, "claims": claims, "wall_s": r4(wall.Seconds()),
	}); err != nil {
		return err
	}
	if ctx.Stdout != nil {
		fmt.Fprintf(ctx.Stdout, "srtm-correlation: (the paper gives no headline number for Figs. 9-11)\n")
		printClaims(ctx.Stdout, claims, ctx.Out, wall)
	}
	return nil
}
