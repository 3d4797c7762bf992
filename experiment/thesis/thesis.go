// Package thesis reproduces the evaluation of Henriksson & Bennhage,
// "Trading performance for precision in a CRDT-based rate-limiting system"
// (the CRDT thesis, §4.3 and ch. 5): the token-bucket counter (strategy gcounter)
// against the token-bucket queue (strategy tbqueue) with and without
// frequency analysis and LINF gossip, on analogs of the thesis' data sets A-D
// (datasets.go) with the defaults of Tables 4.1-4.3, and on two real public
// traces; and our best variants beside them. Run it with
// `tokenmesh experiment thesis`.
package thesis

import (
	"fmt"
	"path/filepath"
	"runtime"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/experiment"
	"github.com/tokenmesh/tokenmesh/workload"
)

// Experiment returns the reproduction of the CRDT thesis §4.3 and ch. 5: the
// token-bucket counter (G-Counter) against the token-bucket queue with
// frequency analysis and LINF, on data sets A-D and the real traces. Its
// Run writes report.md, the plots and report.json to Context.Out.
func Experiment() experiment.Experiment {
	return experiment.Experiment{
		Name:    "thesis",
		Summary: "token-bucket counter vs token-bucket queue (frequency analysis, LINF) on data sets A-D and real traces",
		Source:  "002 §4.3, ch. 5",
		Run:     run,
	}
}

// config is the size of a run.
type config struct {
	quick    bool
	seeds    int
	nodes    int // Table 4.1: 30
	capacity int // c
	a        ASpec
	c        CSpec
	cSeeds   int
	traceCap int // requests kept of each real trace (0: all)
}

func newConfig(ctx experiment.Context) config {
	seeds := max(1, ctx.Seeds)
	if ctx.Quick {
		c := 20
		a := DefaultA(c)
		a.Duration = time.Minute
		cs := DefaultC(c)
		cs.Users, cs.Duration, cs.MeanPerHour = 200, 10*time.Minute, 30
		return config{quick: true, seeds: 1, nodes: 10, capacity: c, a: a, c: cs, cSeeds: 1, traceCap: 2000}
	}
	c := DefaultCapacity
	// Data set C is scaled down from 5000 users over 1 h (the counter
	// encodes every key it ever saw on each of 30 nodes at every sample,
	// which took over 10 minutes per run): 1000 users over 15 min, at most
	// 2 seeds.
	cs := DefaultC(c)
	cs.Users, cs.Duration = 1000, 15*time.Minute
	return config{seeds: seeds, nodes: 30, capacity: c, a: DefaultA(c), c: cs, cSeeds: min(seeds, 2)}
}

func seedList(n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(i + 1)
	}
	return out
}

// Results is everything the experiment measured (written as JSON).
// Capacity is c in tokens; WallSec is the run's wall-clock time in seconds.
type Results struct {
	Quick     bool       `json:"quick"`
	Capacity  int        `json:"c"`
	A         *DataSet   `json:"data_set_a"`
	B         []*DataSet `json:"data_set_b"`
	C         *DataSet   `json:"data_set_c"`
	D         []*DataSet `json:"data_set_d"`
	Traces    []*DataSet `json:"real_traces"`
	Select    *DataSet   `json:"best_variant_selection"`
	TraceNote string     `json:"real_traces_note,omitempty"`
	WallSec   float64    `json:"wall_s"`
}

func run(ctx experiment.Context) error {
	start := time.Now()
	cfg := newConfig(ctx)
	res, err := measure(ctx, cfg)
	if err != nil {
		return err
	}
	res.WallSec = time.Since(start).Seconds()
	plots, err := writePlots(ctx.Out, res)
	if err != nil {
		return err
	}
	rows := compare(res)
	if err := writeReport(ctx.Out, res, rows, plots); err != nil {
		return err
	}
	if ctx.Stdout != nil {
		writeSummary(ctx.Stdout, res, rows, filepath.Join(ctx.Out, "report.md"))
	}
	return nil
}

// measure builds every data set and runs every variant on it.
func measure(ctx experiment.Context, cfg config) (*Results, error) {
	c := cfg.capacity
	rate, err := bucket.PerSecond(RefillFraction * float64(c))
	if err != nil {
		return nil, err
	}
	def := Cluster{Nodes: cfg.nodes, Rate: rate, Burst: int64(c)}
	seeds := seedList(cfg.seeds)
	perSeed := func(gen func(seed uint64) *workload.Trace, ss []uint64) []*workload.Trace {
		out := make([]*workload.Trace, len(ss))
		for i, s := range ss {
			out[i] = gen(s)
		}
		return out
	}
	var jobs []job
	jobs = append(jobs, job{id: "A", name: "data set A", seeds: seeds, variants: allVariants, cluster: def, bin: 5 * time.Second,
		traces: perSeed(func(s uint64) *workload.Trace { return GenerateA(cfg.a, s) }, seeds)})
	for _, b := range BSubsets {
		vs := allVariants
		jobs = append(jobs, job{id: "B/" + string(b), name: "data set B, " + string(b), seeds: seeds, variants: vs, cluster: def, bin: time.Second,
			traces: perSeed(func(s uint64) *workload.Trace { return GenerateB(b, c, s) }, seeds)})
	}
	cSeeds := seedList(cfg.cSeeds)
	cCluster := def
	cCluster.SampleEvery = 10 * time.Second
	jobs = append(jobs, job{id: "C", name: "data set C", seeds: cSeeds, variants: cVariants, cluster: cCluster, bin: time.Minute,
		traces: perSeed(func(s uint64) *workload.Trace { return GenerateC(cfg.c, s) }, cSeeds)})
	dRate, err := bucket.PerSecond(DRefill)
	if err != nil {
		return nil, err
	}
	for _, g := range DGossips {
		cl := Cluster{Nodes: cfg.nodes, Rate: dRate, Burst: DCapacity, Gossip: g}
		jobs = append(jobs, job{id: "D/" + g.String(), name: "data set D, gossip " + g.String(), seeds: seeds, variants: dVariants, cluster: cl, bin: time.Second,
			traces: perSeed(func(uint64) *workload.Trace { return GenerateD() }, seeds)})
	}
	selSeeds := seedList(min(cfg.seeds, 2))
	jobs = append(jobs, job{id: "select", name: "data set A, candidates for our best variants", seeds: selSeeds, variants: selectVariants, cluster: def, bin: 5 * time.Second,
		traces: perSeed(func(s uint64) *workload.Trace { return GenerateA(cfg.a, s) }, selSeeds)})
	res := &Results{Quick: cfg.quick, Capacity: c}
	nSynthetic := len(jobs)
	if ctx.Traces == "" {
		res.TraceNote = "skipped: no traces directory given"
	} else {
		tRate, err := bucket.PerSecond(1)
		if err != nil {
			return nil, err
		}
		cl := Cluster{Nodes: 10, Rate: tRate, Burst: 10}
		for _, name := range []string{"zanbil-2019-http.csv.gz", "wrccdc-2018-dns.csv.gz"} {
			tr, err := workload.ReadFile(filepath.Join(ctx.Traces, name), workload.ReadOptions{})
			if err != nil {
				return nil, fmt.Errorf("real trace: %w", err)
			}
			if cfg.traceCap > 0 && len(tr.Requests) > cfg.traceCap {
				tr.Requests = tr.Requests[:cfg.traceCap]
				res.TraceNote = fmt.Sprintf("quick run: only the first %d requests of each trace", cfg.traceCap)
			}
			jobs = append(jobs, job{id: "trace/" + name, name: name, seeds: []uint64{1}, variants: allVariants, cluster: cl, bin: 10 * time.Second,
				traces: []*workload.Trace{tr}})
		}
	}
	workers := min(2, runtime.NumCPU())
	ds, err := runJobs(jobs, workers, ctx.Progress)
	if err != nil {
		return nil, err
	}
	res.A = ds[0]
	res.B = ds[1 : 1+len(BSubsets)]
	res.C = ds[1+len(BSubsets)]
	res.D = ds[2+len(BSubsets) : nSynthetic-1]
	res.Select = ds[nSynthetic-1]
	res.Traces = ds[nSynthetic:]
	return res, nil
}
