package thesis

import (
	"fmt"
	"sync"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/eval"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/registry"
	"github.com/tokenmesh/tokenmesh/workload"
)

// Variant is one strategy with its parameters, as compared in the CRDT thesis
// §4.3 and ch. 5 (the thesis' token-bucket counter and token-bucket queue
// with frequency analysis and LINF) or as ours.
type Variant struct {
	ID       string   `json:"id"`               // short name in tables and plots ("queue_freq_linf")
	Label    string   `json:"label"`            // one-line description for the report
	Strategy string   `json:"strategy"`         // registry name (strategy/registry): central, gcounter or tbqueue
	Params   []string `json:"params,omitempty"` // the strategy's own parameters, unprefixed name=value
}

// The variants compared. The thesis' queue is tbqueue with coalesce=false
// (one element per request, §4.2.1) and our other fixes off; delta_duplicates
// stays at its default (false, collapsing copies) since its listing-4.2
// behaviour multiplies copies without bound (see strategy/tbqueue).
var (
	VCentral       = Variant{"central", "central (ground truth)", "central", nil}
	VCounter       = Variant{"counter", "gcounter, gossip 300 ms (thesis' counter)", "gcounter", nil}
	VQueue         = Variant{"queue", "tbqueue plain (thesis)", "tbqueue", []string{"coalesce=false"}}
	VQueueFreq     = Variant{"queue_freq", "tbqueue + frequency analysis (thesis)", "tbqueue", []string{"coalesce=false", "frequency_analysis=true"}}
	VQueueLinf     = Variant{"queue_linf", "tbqueue + LINF (thesis)", "tbqueue", []string{"coalesce=false", "linf=true"}}
	VQueueFreqLinf = Variant{"queue_freq_linf", "tbqueue + frequency analysis + LINF (thesis)", "tbqueue", []string{"coalesce=false", "frequency_analysis=true", "linf=true"}}
	VBestQueue     = Variant{"best_queue", "ours: tbqueue unique_ids + safe_margin 2s + frequency analysis with window 1 (every admitted request is pushed to every neighbour at once)", "tbqueue", []string{"unique_ids=true", "safe_margin=2s", "frequency_analysis=true", "window=1"}}
	VBestCounter   = Variant{"best_counter", "ours: gcounter, gossip 100 ms", "gcounter", []string{"gossip=100ms"}}
)

// allVariants are run on data sets A, B and the real traces.
var allVariants = []Variant{VCentral, VCounter, VQueue, VQueueFreq, VQueueLinf, VQueueFreqLinf, VBestQueue, VBestCounter}

// selectVariants are the candidates for our best variants, run on data set
// A (the choice is explained with their numbers in the report).
var selectVariants = []Variant{VCentral, VCounter,
	{"gcounter_50ms", "gcounter, gossip 50 ms", "gcounter", []string{"gossip=50ms"}},
	VBestCounter,
	{"tbqueue_ours_window_c_over_n", "tbqueue unique_ids + safe_margin 2s + frequency analysis, window c/N (Table 4.2)", "tbqueue", []string{"unique_ids=true", "safe_margin=2s", "frequency_analysis=true"}},
	{"tbqueue_ours_window_2", "as above, window 2", "tbqueue", []string{"unique_ids=true", "safe_margin=2s", "frequency_analysis=true", "window=2"}},
	{"tbqueue_ours_gossip_100ms", "as above (window c/N), gossip 100 ms", "tbqueue", []string{"unique_ids=true", "safe_margin=2s", "frequency_analysis=true", "gossip=100ms"}},
	{"tbqueue_ours_linf", "as above (window c/N), LINF", "tbqueue", []string{"unique_ids=true", "safe_margin=2s", "frequency_analysis=true", "linf=true"}},
	VBestQueue,
}

// cVariants are run on the large data set C (the thesis' queue there is
// taken to be the one with both extensions, as in data set B).
var cVariants = []Variant{VCentral, VCounter, VQueueFreqLinf, VBestQueue, VBestCounter}

// dVariants are run on data set D for every gossip interval.
var dVariants = []Variant{VCentral, VCounter, VQueue, VQueueFreqLinf, VBestQueue}

// Cluster is the simulated setup of a run (the CRDT thesis §4.3, Tables 4.1-4.3).
type Cluster struct {
	Nodes  int           // cluster size, nodes
	Rate   bucket.Rate   // refill rate of every key's bucket, tokens per Rate.Per
	Burst  int64         // bucket capacity c, tokens
	Gossip time.Duration // gossip interval; 0: each variant's own (300 ms unless it sets one)
	// SampleEvery is how often node state sizes are sampled (0: 1 s).
	SampleEvery time.Duration
}

// runOut is what one simulation of one variant gave.
type runOut struct {
	allowed   []bool
	messages  int64
	bytes     int64
	stateMean float64
	statePeak int
}

// runOne simulates v over tr on cl with seed (a 1 ms fixed latency, no loss,
// the thesis' injector hash assignment).
func runOne(tr *workload.Trace, v Variant, cl Cluster, seed uint64) (*runOut, error) {
	info, err := registry.Lookup(v.Strategy)
	if err != nil {
		return nil, err
	}
	pairs := append([]string(nil), v.Params...)
	if cl.Gossip > 0 && v.Strategy != "central" {
		pairs = append(pairs, "gossip="+cl.Gossip.String())
	}
	params, err := strategy.ParseParams(pairs)
	if err != nil {
		return nil, err
	}
	assign, err := workload.NewAssigner("hash", seed)
	if err != nil {
		return nil, err
	}
	cfg := sim.Config{
		Name: v.ID, New: info.New, Nodes: cl.Nodes, Rate: cl.Rate, Burst: cl.Burst, Params: params,
		Network: sim.Network{Latency: sim.Latency{Kind: "fixed", Min: time.Millisecond, Max: time.Millisecond, Mean: time.Millisecond}},
		Assign:  assign, Seed: seed, SampleEvery: cl.SampleEvery,
	}
	if info.Centralized {
		cfg.Nodes = 1
	}
	res, err := sim.Run(tr, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s on %s: %w", v.ID, tr.Name, err)
	}
	out := &runOut{allowed: make([]bool, len(tr.Requests)), messages: res.Messages, bytes: res.Bytes,
		stateMean: res.StateBytesMean, statePeak: res.StateBytesPeak}
	for i, o := range res.Outcomes {
		out.allowed[i] = o.Decided && o.Allowed
	}
	return out, nil
}

// Row is one variant's numbers on one data set, each averaged over seeds
// (precision as the CRDT thesis §4.3.3 defines it: rejections relative to a central
// bucket's).
type Row struct {
	Variant           string   `json:"variant"`                   // Variant.ID
	Label             string   `json:"label"`                     // Variant.Label
	Requests          float64  `json:"requests"`                  // requests in the trace
	Rejected          float64  `json:"rejected"`                  // requests this variant rejected
	CentralRejected   float64  `json:"central_rejected"`          // requests central rejected on the same trace
	Precision         *float64 `json:"precision"`                 // sum of rejections / sum of central's, over seeds; 1 when neither rejected, nil when only central rejected none
	ExcessAdmittedPct float64  `json:"excess_admitted_pct"`       // tokens admitted beyond central's, per key, % of central's admitted tokens (eval.Comparison.ExcessPct)
	FalseRejections   float64  `json:"false_rejections"`          // requests rejected that central admitted
	EnvelopeViolation float64  `json:"envelope_violation_tokens"` // tokens, largest excess over the token-bucket envelope (eval.EnvelopeViolation)
	Messages          float64  `json:"messages"`                  // peer messages sent
	Bytes             float64  `json:"bytes"`                     // peer message payload, bytes (protobuf, no transport framing)
	StateBytesMean    float64  `json:"state_bytes_mean"`          // per-node state size, bytes, mean over samples
	StateBytesPeak    float64  `json:"state_bytes_peak"`          // per-node state size, bytes, peak
}

// DataSet is the outcome of one data set of the CRDT thesis §4.3.4 (or real trace,
// or data set D at one gossip interval).
type DataSet struct {
	ID         string  `json:"id"`           // "A", "B/<subset>", "C", "D/<gossip>", "select" or "trace/<file>"
	Name       string  `json:"name"`         // human-readable name
	Requests   float64 `json:"requests"`     // requests, mean over seeds
	Keys       int     `json:"keys"`         // distinct keys
	SpanSec    float64 `json:"span_s"`       // trace span, seconds
	Seeds      int     `json:"seeds"`        // seeds run
	Nodes      int     `json:"nodes"`        // cluster size
	Burst      int64   `json:"capacity"`     // bucket capacity c, tokens
	RatePerSec float64 `json:"refill_per_s"` // refill rate, tokens per second
	Gossip     string  `json:"gossip"`       // gossip interval forced on every variant, or its default
	Rows       []Row   `json:"rows"`         // one per variant, in the order run

	series *series
}

// Row returns the row of the variant whose ID is id, or nil if none.
func (d *DataSet) Row(id string) *Row {
	for i := range d.Rows {
		if d.Rows[i].Variant == id {
			return &d.Rows[i]
		}
	}
	return nil
}

// series holds per-bin counts averaged over seeds, for plots.
type series struct {
	bin      time.Duration
	requests []float64
	rejected map[string][]float64
}

// job is one data set to run: trace per seed and variants.
type job struct {
	id, name string
	traces   []*workload.Trace // one per seed
	seeds    []uint64
	variants []Variant
	cluster  Cluster
	bin      time.Duration
}

// runJobs runs every (job, seed, variant) simulation on up to workers
// goroutines and aggregates per job. progress may be nil.
func runJobs(jobs []job, workers int, progress func(string, int, int)) ([]*DataSet, error) {
	type task struct{ j, s, v int }
	var tasks []task
	outs := make([][][]*runOut, len(jobs))
	for j, jb := range jobs {
		outs[j] = make([][]*runOut, len(jb.seeds))
		for s := range jb.seeds {
			outs[j][s] = make([]*runOut, len(jb.variants))
			for v := range jb.variants {
				tasks = append(tasks, task{j, s, v})
			}
		}
	}
	var (
		mu       sync.Mutex
		done     int
		firstErr error
		wg       sync.WaitGroup
	)
	ch := make(chan task)
	for w := 0; w < max(1, workers); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range ch {
				jb := jobs[t.j]
				o, err := runOne(jb.traces[t.s], jb.variants[t.v], jb.cluster, jb.seeds[t.s])
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				outs[t.j][t.s][t.v] = o
				done++
				if progress != nil {
					progress(jb.name+" / "+jb.variants[t.v].ID, done, len(tasks))
				}
				mu.Unlock()
			}
		}()
	}
	for _, t := range tasks {
		ch <- t
	}
	close(ch)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	var res []*DataSet
	for j, jb := range jobs {
		res = append(res, aggregate(jb, outs[j]))
	}
	return res, nil
}

// aggregate averages one job's runs over its seeds. The variants' first
// entry must be central.
func aggregate(jb job, outs [][]*runOut) *DataSet {
	n := float64(len(jb.seeds))
	ds := &DataSet{ID: jb.id, Name: jb.name, Seeds: len(jb.seeds), Nodes: jb.cluster.Nodes, Burst: jb.cluster.Burst,
		RatePerSec: jb.cluster.Rate.PerSec(), Gossip: "300ms (default)"}
	if jb.cluster.Gossip > 0 {
		ds.Gossip = jb.cluster.Gossip.String()
	}
	keys := map[string]bool{}
	for _, tr := range jb.traces {
		ds.Requests += float64(len(tr.Requests)) / n
		ds.SpanSec = max(ds.SpanSec, tr.Span().Seconds())
		for _, r := range tr.Requests {
			keys[r.Key] = true
		}
	}
	ds.Keys = len(keys)
	se := &series{bin: jb.bin, rejected: map[string][]float64{}}
	nb := int(time.Duration(ds.SpanSec*float64(time.Second))/jb.bin) + 1
	se.requests = make([]float64, nb)
	for _, tr := range jb.traces {
		origin := tr.Requests[0].Arrival
		for _, r := range tr.Requests {
			se.requests[int((r.Arrival-origin)/jb.bin)] += 1 / n
		}
	}
	for v, va := range jb.variants {
		row := Row{Variant: va.ID, Label: va.Label}
		rej := make([]float64, nb)
		var sumRej, sumCentral float64
		for s, tr := range jb.traces {
			o, central := outs[s][v], outs[s][0]
			c := eval.Compare(tr.Requests, o.allowed, central.allowed)
			sumRej += float64(c.Rejected)
			for i := range central.allowed {
				if !central.allowed[i] {
					sumCentral++
				}
			}
			row.Requests += float64(c.Requests) / n
			row.ExcessAdmittedPct += c.ExcessPct / n
			row.FalseRejections += float64(c.FalseRejections) / n
			row.EnvelopeViolation += eval.EnvelopeViolation(tr.Requests, o.allowed, jb.cluster.Rate.PerSec(), jb.cluster.Burst) / n
			row.Messages += float64(o.messages) / n
			row.Bytes += float64(o.bytes) / n
			row.StateBytesMean += o.stateMean / n
			row.StateBytesPeak += float64(o.statePeak) / n
			origin := tr.Requests[0].Arrival
			for i, r := range tr.Requests {
				if !o.allowed[i] {
					rej[int((r.Arrival-origin)/jb.bin)] += 1 / n
				}
			}
		}
		row.Rejected, row.CentralRejected = sumRej/n, sumCentral/n
		switch {
		case sumCentral > 0:
			p := sumRej / sumCentral
			row.Precision = &p
		case sumRej == 0:
			p := 1.0
			row.Precision = &p
		}
		se.rejected[va.ID] = rej
		ds.Rows = append(ds.Rows, row)
	}
	ds.series = se
	return ds
}
