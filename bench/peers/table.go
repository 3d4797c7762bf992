package main

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"

	"github.com/tokenmesh/tokenmesh/loadgen"
)

// This file prints the harness's table: the medians over rounds of each
// system's runs.

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func med(runs []run, f func(run) float64) float64 {
	xs := make([]float64, len(runs))
	for i, r := range runs {
		xs[i] = f(r)
	}
	return median(xs)
}

// keptSlack is the excess per key a system may show, in a window and over
// any interval, and still count as keeping the limit: one token, what one
// call's latency can move across a window's edge on the load generator's
// clock (the b + r*T + 1).
const keptSlack = 1

// worstExcess is the largest of each excess figure over runs (rounds).
func worstExcess(runs []run) loadgen.Excess {
	var e loadgen.Excess
	for _, r := range runs {
		e.Worst = max(e.Worst, r.excess.Worst)
		e.Sum = max(e.Sum, r.excess.Sum)
		e.Keys = max(e.Keys, r.excess.Keys)
		e.Sliding = max(e.Sliding, r.excess.Sliding)
	}
	return e
}

func printTable(w io.Writer, f *flags, rows []row) {
	printHead(w, f)
	// The floor's checks/s per node count: the most any system answering
	// through grpc-go reaches on this load generator.
	floor := map[int]float64{}
	for _, r := range rows {
		if r.sys == floorName && len(r.runs) > 0 {
			floor[r.n] = rowChecksPerS(r)
		}
	}
	var ref float64
	group := 0
	for _, r := range rows {
		if r.n != group {
			group, ref = r.n, 0
		}
		if len(r.runs) == 0 {
			continue
		}
		if r.ref {
			ref = rowChecksPerS(r)
		}
		printRow(w, f, r, ref, floor[r.n])
	}
	if f.limit.set {
		fmt.Fprintf(w, "\nexcess: tokens one key was admitted above b + r*T (b %d, r %d/s, T %v: %.0f) in one fixed window of T from the measured run's start, counted on the load generator's clock at each answer; "+
			"worst window excess: max over keys and windows; excess sum: over keys and windows; keys over: keys with a window above; sliding excess: the same over any interval T' against b + r*T' (loadgen.WindowExcess; workload.EnvelopeExcess); "+
			"each the largest over rounds. limit kept: worst window and sliding excess both at most %d token (a call's latency moves an admission across a window's edge).\n",
			f.limit.burst, f.limit.perS, f.window, float64(f.limit.burst)+float64(f.limit.perS)*f.window.Seconds(), keptSlack)
		fmt.Fprintf(w, "missed %% / extra %%: the same checks (the warmup's and the run's, at their answers' times) replayed per key through one exact token bucket (b %d, r %d/s, full at the key's first check): "+
			"tokens it admitted that the system refused (refusals below the limit), and tokens the system admitted that it refused, summed over keys, as a share of what the exact bucket admitted in the measured run (loadgen.Shortfall); medians over rounds. "+
			"An exact system shows a little of both: the answers' times are the load generator's, not the decisions'.\n",
			f.limit.burst, f.limit.perS)
	}
	if len(floor) > 0 {
		fmt.Fprintln(w, "\nfloor: tokenmesh.v1 answered by grpc-go with no limiter (bench/peers/floor); \"floor / this\" is the most any limiter served through grpc-go could show against that system on this load generator and machine.")
	}
}

// printHead prints the setup line and the table's header.
func printHead(w io.Writer, f *flags) {
	keys := fmt.Sprintf("%d uniform keys", f.keys)
	if f.dist.Kind != loadgen.DistUniform {
		keys = fmt.Sprintf("keys %s", f.dist)
	}
	lim := "limit 10^9/s"
	if f.limit.set {
		lim = fmt.Sprintf("limit %d/s burst %d per key, open loop at %.0f checks/s (%gx the limit on the hottest key), admissions counted per key and %v window",
			f.limit.perS, f.limit.burst, f.offeredPerS, f.overload, f.window)
	}
	fmt.Fprintf(w, "\n%d workers, %d check(s) per call, %s, %s; %d round(s) A-B-A-B of %v (+%v warmup); GOMAXPROCS %d; medians\n\n",
		f.workers, f.batch, keys, lim, f.rounds, f.duration, f.warmup, runtime.GOMAXPROCS(0))
	head := "| nodes | system | checks/s | p50 ms | p99 ms | server CPU us/check | loadgen CPU us/check | admitted % | tokenmesh / this (checks/s) | floor / this (checks/s) |"
	sep := "|---|---|---|---|---|---|---|---|---|---|"
	if f.limit.set {
		head += " worst window excess | excess sum | keys over | sliding excess | limit kept | missed % | extra % |"
		sep += "---|---|---|---|---|---|---|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, sep)
}

// rowChecksPerS is the median checks/s of r's runs.
func rowChecksPerS(r row) float64 { return med(r.runs, func(x run) float64 { return x.checksPerS }) }

// ratioText is num/den as "1.23x", "-" unless both are positive.
func ratioText(num, den float64) string {
	if num <= 0 || den <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", num/den)
}

// printRow prints r's line, against the reference's checks/s ref and the
// floor's of its node count.
func printRow(w io.Writer, f *flags, r row, ref, floor float64) {
	c := rowChecksPerS(r)
	ours := "-"
	if !strings.HasPrefix(r.sys, "tokenmesh") {
		ours = ratioText(ref, c)
	}
	ceiling := "-"
	if r.sys != floorName {
		ceiling = ratioText(floor, c)
	}
	fmt.Fprintf(w, "| %d | %s | %.0f | %.2f | %.2f | %.1f | %.1f | %.2f | %s | %s |", r.n, r.sys, c,
		med(r.runs, func(x run) float64 { return x.p50ms }), med(r.runs, func(x run) float64 { return x.p99ms }),
		med(r.runs, func(x run) float64 { return x.serverCPUus }), med(r.runs, func(x run) float64 { return x.clientCPUus }),
		med(r.runs, func(x run) float64 { return x.allowedPct }), ours, ceiling)
	if f.limit.set {
		e := worstExcess(r.runs)
		kept := "yes"
		if e.Worst > keptSlack || e.Sliding > keptSlack {
			kept = "no"
		}
		fmt.Fprintf(w, " %.1f | %.0f | %d | %.1f | %s | %.2f | %.2f |", e.Worst, e.Sum, e.Keys, e.Sliding, kept,
			med(r.runs, func(x run) float64 { return x.shortfall.MissedPct() }),
			med(r.runs, func(x run) float64 { return x.shortfall.ExtraPct() }))
	}
	fmt.Fprintln(w)
}
