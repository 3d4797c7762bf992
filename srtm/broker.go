package srtm

import (
	"fmt"
	"github.com/tokenmesh/tokenmesh/internal/quantile"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
)

// Arrival is a publisher's message generation process in the broker model
// (ours; the paper's event- and time-triggered traffic, SRTM 000 §6).
type Arrival string

const (
	// Poisson: a publisher of rate λ and batch size B emits batches of B
	// messages (all at the same instant) as a Poisson process of rate λ/B
	// (the paper's event-triggered traffic, §6).
	Poisson Arrival = "poisson"
	// Periodic: batches of B messages every B/λ seconds with a uniformly
	// random phase (the paper's time-triggered traffic, §6).
	Periodic Arrival = "periodic"
)

// SimOptions configures Simulate (ours, the broker model standing in for
// the paper's NSQ brokers of SRTM 000 §6). Durations are simulated time;
// every field but Duration may be left zero (see each field).
type SimOptions struct {
	Duration time.Duration // simulated time after the warm-up; > 0
	Warmup   time.Duration // discarded first part; 0 means Duration/10
	Seed     uint64        // the run is a deterministic function of the seed
	Arrival  Arrival       // "" means Poisson
	// Noise spreads a correlation group's messages (§6.4.2): every member's
	// copy of a group event arrives at the event time plus an independent
	// uniform offset in [0, Noise). 0: the group is perfectly synchronised.
	Noise time.Duration
	// LoadBatch is the batch size of the brokers' background load: batches
	// of LoadBatch messages arrive as a Poisson process of rate
	// Load/LoadBatch (Fig. 8's initial loads use 10). 0 means 1.
	LoadBatch int
	// ServiceScale: the model broker serves ServiceScale*MCap msg/s, i.e.
	// MCap is the planner's benchmarked capacity (§4.2 footnote 5), which
	// may sit below the saturation point. 0 means 1 (MCap is saturation).
	ServiceScale float64
}

// LatencyStats summarises the topic messages' end-to-end latencies (token
// wait + broker queueing + processing, the paper's metric of SRTM 000 §6)
// at one broker or overall. Percentiles are nearest-rank over the messages
// generated after the warm-up; all are zero when Messages is 0.
type LatencyStats struct {
	Broker   string        // the broker's name, or "overall"
	Messages int           // topic messages counted (after the warm-up)
	P50      time.Duration // median end-to-end latency
	P95      time.Duration // 95th percentile end-to-end latency
	P99      time.Duration // 99th percentile end-to-end latency (the SLO's metric)
	Mean     time.Duration // mean end-to-end latency
	TokenP99 time.Duration // p99 of the token-bucket wait alone (the DRL penalty)
	// Util is the offered utilisation (share's publisher rate + background
	// load, msg/s) / (MCap * SimOptions.ServiceScale); 0 for "overall".
	Util float64
}

// SimResult is the outcome of Simulate: PerBroker has one entry per share
// of the plan (len(plan.Shares), in plan order) and Overall the statistics
// over all the topic's messages.
type SimResult struct {
	PerBroker []LatencyStats
	Overall   LatencyStats
}

// Simulate runs the broker model on a plan. Model (ours; the paper measures
// NSQ brokers instead, §5-6):
//
//   - Publishers generate messages per opts.Arrival with their Batch size;
//     publishers sharing a non-empty Group are one correlated source: the
//     group's events are generated once (from its first member's rate and
//     batch) and every member emits a batch at each event, offset by
//     uniform [0, opts.Noise) noise.
//   - Each message waits at its broker's sub-token bucket (Share.Rate,
//     Share.Burst) in waiting mode, exactly (Delays' G/D/1 recursion; the
//     bucket is full at time 0).
//   - Each broker is a discrete-event single-server FIFO queue with
//     deterministic service time 1/(MCap*opts.ServiceScale). Besides the topic's messages (at
//     the time they leave the bucket) it serves a Poisson background stream
//     at rate Broker.Load (the other topics, §6.3; in batches of
//     opts.LoadBatch). A utilisation above 1 is
//     simulated as is: the queue grows for the whole run.
//   - A message's latency is its departure from the broker minus its
//     generation time. Messages generated during the warm-up are dropped
//     from the statistics. Percentiles are nearest-rank.
//
// brokers supplies MCap and Load for every broker named in the plan (MCap
// must be positive). The run is deterministic for a given seed.
func Simulate(plan PlanResult, brokers []Broker, opts SimOptions) (SimResult, error) {
	if err := checkSimOptions(&opts); err != nil {
		return SimResult{}, err
	}
	byName := map[string]Broker{}
	for _, b := range brokers {
		byName[b.Name] = b
	}
	end := opts.Warmup + opts.Duration
	msgs, err := generate(plan, byName, opts, end)
	if err != nil {
		return SimResult{}, err
	}
	res := SimResult{}
	var allLat, allTok []time.Duration
	for si, sh := range plan.Shares {
		b := byName[sh.Broker]
		if !(b.MCap > 0) || !finite(b.MCap) || b.Load < 0 || !finite(b.Load) {
			return SimResult{}, fmt.Errorf("sim: broker %q needs mcap > 0 and load >= 0 (got %v, %v)", b.Name, b.MCap, b.Load)
		}
		st, lat, tok, err := simulateShare(si, sh, b, msgs, opts, end)
		if err != nil {
			return SimResult{}, err
		}
		res.PerBroker = append(res.PerBroker, st)
		allLat = append(allLat, lat...)
		allTok = append(allTok, tok...)
	}
	res.Overall = stats("overall", allLat, allTok)
	return res, nil
}

// checkSimOptions checks opts and sets its defaults (warm-up, arrival).
func checkSimOptions(opts *SimOptions) error {
	if opts.Duration <= 0 {
		return fmt.Errorf("sim: duration %v must be positive", opts.Duration)
	}
	if opts.Warmup <= 0 {
		opts.Warmup = opts.Duration / 10
	}
	if opts.Arrival == "" {
		opts.Arrival = Poisson
	}
	if opts.Arrival != Poisson && opts.Arrival != Periodic {
		return fmt.Errorf("sim: unknown arrival process %q (want %q or %q)", opts.Arrival, Poisson, Periodic)
	}
	if opts.Noise < 0 {
		return fmt.Errorf("sim: noise %v must not be negative", opts.Noise)
	}
	return nil
}

// simMsg is one generated message: its time and its share's index.
type simMsg struct {
	t     time.Duration
	share int
}

// generate is every publisher's messages in [0, end), by time (byName:
// the brokers, to check the plan names them).
func generate(plan PlanResult, byName map[string]Broker, opts SimOptions, end time.Duration) ([]simMsg, error) {
	var msgs []simMsg
	gen := newArrivalGen(opts.Arrival, opts.Noise, end, opts.Seed)
	for si, sh := range plan.Shares {
		if _, ok := byName[sh.Broker]; !ok {
			return nil, fmt.Errorf("sim: plan uses broker %q not in brokers", sh.Broker)
		}
		for _, p := range sh.Publishers {
			if p.Rate <= 0 || !finite(p.Rate) {
				return nil, fmt.Errorf("sim: publisher %q rate %v must be positive", p.Name, p.Rate)
			}
			for _, t := range gen.times(p) {
				msgs = append(msgs, simMsg{t, si})
			}
		}
	}
	sort.SliceStable(msgs, func(i, j int) bool { return msgs[i].t < msgs[j].t })
	return msgs, nil
}

// simulateShare runs share si (sh, on broker b) of msgs through its
// sub-token bucket and the broker with its background load, and returns
// its stats and its measured messages' latencies and token waits.
func simulateShare(si int, sh Share, b Broker, msgs []simMsg, opts SimOptions, end time.Duration) (st LatencyStats, lat, tok []time.Duration, err error) {
	q, err := newGD1(sh.Rate, sh.Burst)
	if err != nil {
		return st, nil, nil, fmt.Errorf("sim: sub-token bucket of broker %q: %w", sh.Broker, err)
	}
	var gen, rel []time.Duration
	for _, m := range msgs {
		if m.share == si {
			gen = append(gen, m.t)
			rel = append(rel, m.t+q.arrive(m.t))
		}
	}
	bg := background(b, opts, end)
	scale := opts.ServiceScale
	if scale <= 0 || !finite(scale) {
		scale = 1
	}
	svc := time.Duration(math.Round(1e9 / (b.MCap * scale)))
	if svc < 1 {
		svc = 1
	}
	lat, tok = serve(gen, rel, bg, svc, opts.Warmup, end)
	st = stats(sh.Broker, lat, tok)
	st.Util = (sh.PublisherRate + b.Load) / (b.MCap * scale)
	return st, lat, tok, nil
}

// background is broker b's background Poisson stream in [0, end), in
// batches of opts.LoadBatch, to be merged with the topic's releases
// (which are non-decreasing: the bucket is FCFS).
func background(b Broker, opts SimOptions, end time.Duration) []time.Duration {
	var bg []time.Duration
	rng := rand.New(rand.NewPCG(opts.Seed, hash("background:"+b.Name)))
	if b.Load > 0 {
		lb := max(1, opts.LoadBatch)
		rate := b.Load / float64(lb)
		for t := expo(rng, rate); t < end; t += expo(rng, rate) {
			for range lb {
				bg = append(bg, t)
			}
		}
	}
	return bg
}

// serve runs the topic's messages (generated at gen, released by the
// bucket at rel) and the background bg through a FIFO server of service
// time svc, and returns the latencies and token waits of the messages
// generated in [warmup, end).
func serve(gen, rel, bg []time.Duration, svc, warmup, end time.Duration) (lat, tok []time.Duration) {
	var free time.Duration // when the server is next idle
	i, j := 0, 0
	for i < len(rel) || j < len(bg) {
		if j < len(bg) && (i >= len(rel) || bg[j] < rel[i]) {
			free = max(free, bg[j]) + svc
			j++
			continue
		}
		free = max(free, rel[i]) + svc
		if gen[i] >= warmup && gen[i] < end {
			lat = append(lat, free-gen[i])
			tok = append(tok, rel[i]-gen[i])
		}
		i++
	}
	return lat, tok
}

// events returns the event times in [0, end) of a Poisson or periodic
// (random phase) process of the given rate.
func events(rng *rand.Rand, a Arrival, rate float64, end time.Duration) []time.Duration {
	var out []time.Duration
	if a == Periodic {
		period := 1 / rate
		for t := rng.Float64() * period; t < end.Seconds(); t += period {
			out = append(out, time.Duration(t*1e9))
		}
		return out
	}
	for t := expo(rng, rate); t < end; t += expo(rng, rate) {
		out = append(out, t)
	}
	return out
}

func expo(rng *rand.Rand, rate float64) time.Duration {
	return time.Duration(rng.ExpFloat64() / rate * 1e9)
}

func stats(name string, lat, tok []time.Duration) LatencyStats {
	st := LatencyStats{Broker: name, Messages: len(lat)}
	if len(lat) == 0 {
		return st
	}
	var sum float64
	for _, x := range lat {
		sum += float64(x)
	}
	st.Mean = time.Duration(sum / float64(len(lat)))
	s := append([]time.Duration(nil), lat...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	st.P50, st.P95, st.P99 = Quantile(s, 0.50), Quantile(s, 0.95), Quantile(s, 0.99)
	t := append([]time.Duration(nil), tok...)
	sort.Slice(t, func(i, j int) bool { return t[i] < t[j] })
	st.TokenP99 = Quantile(t, 0.99)
	return st
}

// Quantile returns the nearest-rank q-quantile (q in [0, 1]; values outside
// clamp to the ends) of sorted, which must be in increasing order; 0 if
// sorted is empty (internal/quantile.NearestRank). Ours, the percentile
// definition of Simulate.
func Quantile(sorted []time.Duration, q float64) time.Duration {
	return quantile.NearestRank(sorted, q)
}

// SizeBurst returns the smallest bucket size b such that the q-quantile of
// the token-bucket delays of arrivals at rate r is zero (the paper's
// profiling of §6: r is 10% above the message rate and b the smallest size
// with a zero p99 access delay), found by binary search on Delays.
// arrivals are as for Delays; q is in [0, 1]; b is in tokens, in
// [1, max(1, len(arrivals))]. The error reports an r that cannot drive a
// bucket (see Delays).
func SizeBurst(arrivals []time.Duration, r bucket.Rate, q float64) (int64, error) {
	ok := func(b int64) (bool, error) {
		d := Delays(arrivals, r, b)
		if d == nil {
			return false, fmt.Errorf("size burst: rate %v with burst %d cannot drive a bucket", r, b)
		}
		// The nearest-rank q-quantile is 0 iff at least ceil(q*n) delays are 0.
		zeros := 0
		for _, x := range d {
			if x == 0 {
				zeros++
			}
		}
		return zeros >= int(math.Ceil(q*float64(len(d)))), nil
	}
	lo, hi := int64(0), int64(max(1, len(arrivals))) // lo fails (or is 0), hi succeeds
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		good, err := ok(mid)
		if err != nil {
			return 0, err
		}
		if good {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, nil
}

// TopicArrivals generates the merged message times in [0, end) of all of a
// topic's publishers with the same process and seed as Simulate (each
// publisher's and group's times depend only on the seed and its name), so
// SizeBurst can profile exactly the trace a simulation will see; pass
// end = Warmup + Duration. A different seed gives an independent trace.
// The result is sorted, in simulated time since 0 (batch copies included);
// publishers with a non-positive or non-finite Rate are skipped. Ours
// (SRTM 000 §6 profiles b on measured traces).
func TopicArrivals(topic Topic, a Arrival, noise, end time.Duration, seed uint64) []time.Duration {
	if a == "" {
		a = Poisson
	}
	gen := newArrivalGen(a, noise, end, seed)
	var out []time.Duration
	for _, p := range topic.Publishers {
		if p.Rate <= 0 || !finite(p.Rate) {
			continue
		}
		out = append(out, gen.times(p)...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// arrivalGen generates publishers' message times; every publisher and group
// has its own random stream keyed by (seed, name), so the times do not
// depend on the order publishers are visited in.
type arrivalGen struct {
	a      Arrival
	noise  time.Duration
	end    time.Duration
	seed   uint64
	groups map[string][]time.Duration
}

func newArrivalGen(a Arrival, noise, end time.Duration, seed uint64) *arrivalGen {
	return &arrivalGen{a: a, noise: noise, end: end, seed: seed, groups: map[string][]time.Duration{}}
}

// times returns p's message times (batch copies included), unsorted only
// when noise reorders them. A group's events come from the first member
// asked for (its rate and batch); members are expected to share them.
func (g *arrivalGen) times(p Publisher) []time.Duration {
	batch := max(1, p.Batch)
	rng := rand.New(rand.NewPCG(g.seed, hash("publisher:"+p.Name)))
	var ev []time.Duration
	if p.Group != "" {
		var ok bool
		if ev, ok = g.groups[p.Group]; !ok {
			grng := rand.New(rand.NewPCG(g.seed, hash("group:"+p.Group)))
			ev = events(grng, g.a, p.Rate/float64(batch), g.end)
			g.groups[p.Group] = ev
		}
	} else {
		ev = events(rng, g.a, p.Rate/float64(batch), g.end)
	}
	out := make([]time.Duration, 0, len(ev)*batch)
	for _, t := range ev {
		if p.Group != "" && g.noise > 0 {
			t += time.Duration(rng.Int64N(int64(g.noise)))
		}
		for range batch {
			out = append(out, t)
		}
	}
	return out
}

// hash is FNV-1a, to key random streams by name.
func hash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// ModelP99 returns a P99Func for Fit built on Simulate: the broker gets the
// sub-token bucket of the topic proportional to the publishers' share of
// the topic's publisher rate (rate topic.Rate*share, burst
// max(1, round(topic.Burst*share))), and the overall p99 of a single-broker
// simulation with opts is returned. Ours: the profiling phase of SRTM 000
// §4.2 Step (3) on the broker model. Simulate's errors are returned as
// they are; a nil or empty pubs measures 0.
func ModelP99(topic Topic, opts SimOptions) P99Func {
	var lam float64
	for _, p := range topic.Publishers {
		lam += p.Rate
	}
	return func(b Broker, pubs []Publisher) (time.Duration, error) {
		if len(pubs) == 0 {
			return 0, nil
		}
		var s float64
		for _, p := range pubs {
			s += p.Rate
		}
		share := s / lam
		r, err := bucket.PerSecond(topic.Rate * share)
		if err != nil {
			return 0, err
		}
		burst := max(1, int64(math.Round(float64(topic.Burst)*share)))
		p := PlanResult{Topic: topic.Name, Rate: r, Burst: burst, Shares: []Share{{Broker: b.Name, RCap: b.RCap(), Rate: r, Burst: burst, Publishers: pubs, PublisherRate: s}}}
		res, err := Simulate(p, []Broker{b}, opts)
		if err != nil {
			return 0, err
		}
		return res.Overall.P99, nil
	}
}
