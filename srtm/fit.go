package srtm

import (
	"fmt"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
)

// P99Func measures the p99 end-to-end latency of a topic at broker (as
// given to Fit: its Load is the other topics' load) when it serves the
// topic's publishers pubs (the ones placed there by earlier iterations
// followed by the new ones). It is the profiling phase of SRTM
// §4.2 Step (3); a broker model or a live broker supplies it.
type P99Func func(broker Broker, pubs []Publisher) (time.Duration, error)

// FitStep records one measurement decision of online fitting (SRTM 000
// §4.2 Step (3)): counts are publishers, P99 is simulated or measured
// end-to-end latency.
type FitStep struct {
	Iteration int
	Broker    string
	Offered   int           // publishers newly offered to the broker
	Kept      int           // of which it kept
	P99       time.Duration // measured with all Offered added
	Full      bool          // the broker violated the SLO and was marked full
}

// FitResult is the outcome of Fit (SRTM 000 §4.2): the final plan
// (sub-token buckets over the brokers that kept publishers), the
// measurement trail in measurement order, the number of iterations
// (<= len(brokers)) and the names of the brokers marked full, in the order
// they were marked.
type FitResult struct {
	Plan       PlanResult
	Steps      []FitStep
	Iterations int
	Full       []string
}

// Fit runs SRTM's iterative workload distribution with online fitting
// (§4.2): each iteration places the still unassigned publishers with Plan's
// Steps (1)-(2) over the brokers not marked full, then (Step (3)) measures
// every broker that received publishers with measure. A broker whose p99
// exceeds topic.SLO binary-searches (footnote 6) the largest number m of its
// new publishers it can keep (keeping the first m in the correlation-
// interleaved order, so the groups stay mixed), returns the rest and is
// marked full. The next iteration places the returned publishers (the
// paper's ua_rate) over the brokers left; it ends when no broker violates
// the SLO or the brokers run out.
//
// Ours: the rate placed in an iteration is the topic rate r times the
// unassigned publishers' share of the total publisher rate; a broker's
// allocated load grows by the same share of r for the publishers it keeps.
// The binary search assumes p99 grows with the number of publishers (the
// paper's assumption) and takes m = 0 as fitting without measuring it. The
// final sub-token buckets are split over the brokers that kept publishers in
// proportion to their publishers' rates, exactly as in Plan (sum r_l = r,
// sum b_l = b). Each iteration marks at least one broker full or ends, so
// there are at most len(brokers) iterations and O(len(brokers) * log(n))
// measurements per iteration.
//
// Errors: as Plan for invalid inputs; measure's error (wrapped, naming the
// broker); running out of brokers names the unplaced publishers' count and
// rate; topic.SLO = 0 is an error (there is nothing to fit against).
func Fit(brokers []Broker, topic Topic, policy Policy, measure P99Func) (FitResult, error) {
	if policy == "" {
		policy = Concentration
	}
	if err := validate(brokers, topic, policy); err != nil {
		return FitResult{}, err
	}
	if topic.SLO <= 0 {
		return FitResult{}, fmt.Errorf("topic.slo: must be positive to fit against it")
	}
	if measure == nil {
		return FitResult{}, fmt.Errorf("fit: no p99 measurement function")
	}
	f := newFitter(brokers, topic, policy, measure)
	unassigned := append([]Publisher(nil), topic.Publishers...)
	for iter := 1; len(unassigned) > 0; iter++ {
		f.res.Iterations = iter
		p, err := f.place(iter, unassigned)
		if err != nil {
			return f.res, err
		}
		unassigned = nil
		for _, sh := range p.Shares {
			if len(sh.Publishers) == 0 {
				continue
			}
			returned, err := f.fitShare(iter, sh)
			if err != nil {
				return f.res, err
			}
			unassigned = append(unassigned, returned...)
		}
	}
	final, err := finalPlan(brokers, topic, policy, f.placed)
	if err != nil {
		return f.res, err
	}
	f.res.Plan = final
	return f.res, nil
}

// fitter is the state of Fit's iterations.
type fitter struct {
	brokers []Broker // as given: Load is other topics' load
	topic   Topic
	policy  Policy
	measure P99Func
	lam     float64  // the topic's publishers' total rate
	state   []Broker // brokers with the topic's load allocated so far
	byName  map[string]int
	full    map[string]bool
	placed  map[string][]Publisher
	res     FitResult
}

// newFitter is the state before Fit's first iteration.
func newFitter(brokers []Broker, topic Topic, policy Policy, measure P99Func) *fitter {
	f := &fitter{brokers: brokers, topic: topic, policy: policy, measure: measure,
		state: append([]Broker(nil), brokers...), byName: map[string]int{},
		full: map[string]bool{}, placed: map[string][]Publisher{}}
	for _, p := range topic.Publishers {
		f.lam += p.Rate
	}
	for i, b := range f.state {
		f.byName[b.Name] = i
	}
	return f
}

// shareOf is the topic rate r times ps' share of the total publisher rate.
func (f *fitter) shareOf(ps []Publisher) float64 {
	var s float64
	for _, p := range ps {
		s += p.Rate
	}
	return f.topic.Rate * s / f.lam
}

// place plans the unassigned publishers over the brokers not full
// (iteration iter); an error when none is left or the plan fails.
func (f *fitter) place(iter int, unassigned []Publisher) (PlanResult, error) {
	var avail []Broker
	for _, b := range f.state {
		if !f.full[b.Name] {
			avail = append(avail, b)
		}
	}
	topic := f.topic
	sub := Topic{Name: topic.Name, Rate: f.shareOf(unassigned), Burst: topic.Burst, SLO: topic.SLO, Publishers: unassigned}
	var p PlanResult
	var err error
	if len(avail) > 0 {
		// The burst of an intermediate plan is irrelevant: give it enough
		// tokens for any number of brokers.
		sub.Burst = int64(len(avail))
		p, err = plan(avail, sub, f.policy)
	}
	if len(avail) == 0 || err != nil {
		msg := "no broker left that is not full"
		if err != nil {
			msg = err.Error()
		}
		return p, fmt.Errorf("topic %q: ran out of brokers in iteration %d with %d publishers (%.6g msg/s of the topic rate) unplaced: %s", topic.Name, iter, len(unassigned), sub.Rate, msg)
	}
	return p, nil
}

// fitShare measures share sh's broker with its new publishers; above the
// SLO, it keeps the most it can (binary search) and marks the broker full.
// It returns the publishers it did not keep.
func (f *fitter) fitShare(iter int, sh Share) (returned []Publisher, err error) {
	b := f.brokers[f.byName[sh.Broker]]
	have := f.placed[sh.Broker]
	with := func(m int) []Publisher {
		return append(append([]Publisher(nil), have...), sh.Publishers[:m]...)
	}
	p99, err := f.measure(b, with(len(sh.Publishers)))
	if err != nil {
		return nil, fmt.Errorf("topic %q: measuring broker %q: %w", f.topic.Name, sh.Broker, err)
	}
	step := FitStep{Iteration: iter, Broker: sh.Broker, Offered: len(sh.Publishers), Kept: len(sh.Publishers), P99: p99}
	if p99 > f.topic.SLO {
		lo, err := f.keepable(b, sh, with)
		if err != nil {
			return nil, err
		}
		step.Kept, step.Full = lo, true
		f.full[sh.Broker] = true
		f.res.Full = append(f.res.Full, sh.Broker)
		returned = sh.Publishers[lo:]
	}
	kept := sh.Publishers[:step.Kept]
	f.placed[sh.Broker] = append(have, kept...)
	f.state[f.byName[sh.Broker]].Load += f.shareOf(kept)
	f.res.Steps = append(f.res.Steps, step)
	return returned, nil
}

// keepable binary-searches the largest number of share sh's new publishers
// (with(m): the broker's publishers keeping m) broker b keeps within the
// SLO, taking all of them as violating it and none as fitting.
func (f *fitter) keepable(b Broker, sh Share, with func(m int) []Publisher) (int, error) {
	lo, hi := 0, len(sh.Publishers) // lo fits, hi violates
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		d, err := f.measure(b, with(mid))
		if err != nil {
			return 0, fmt.Errorf("topic %q: measuring broker %q: %w", f.topic.Name, sh.Broker, err)
		}
		if d <= f.topic.SLO {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// finalPlan splits (r, b) over the brokers holding publishers in proportion
// to their publishers' rates, at least one rate unit and one token each.
func finalPlan(brokers []Broker, topic Topic, policy Policy, placed map[string][]Publisher) (PlanResult, error) {
	r, units, unitPer, err := topicUnits(topic.Rate, topic.Burst)
	if err != nil {
		return PlanResult{}, err
	}
	res := PlanResult{Topic: topic.Name, Policy: policy, Rate: r, Burst: topic.Burst}
	var used []Broker
	var w []float64
	for _, b := range brokers {
		if ps := placed[b.Name]; len(ps) > 0 {
			used = append(used, b)
			var s float64
			for _, p := range ps {
				s += p.Rate
			}
			w = append(w, s)
		}
	}
	if int64(len(used)) > topic.Burst {
		return PlanResult{}, fmt.Errorf("topic %q: burst %d is smaller than the %d brokers fitting placed it on: every sub-token bucket needs at least one token", topic.Name, topic.Burst, len(used))
	}
	if units < int64(len(used)) {
		return PlanResult{}, fmt.Errorf("topic %q: rate %v msg/s is too fine to split over the %d brokers fitting placed it on", topic.Name, topic.Rate, len(used))
	}
	u := splitBurst(units, w) // at least one unit each, summing to units
	bursts := splitBurst(topic.Burst, w)
	for i, b := range used {
		rl := bucket.Rate{Tokens: u[i], Per: unitPer}.Reduced()
		if _, err := bucket.New(rl, bursts[i], 0); err != nil {
			return PlanResult{}, fmt.Errorf("topic %q: sub-token bucket for broker %q: %w", topic.Name, b.Name, err)
		}
		res.Shares = append(res.Shares, Share{Broker: b.Name, RCap: b.RCap(), Rate: rl, Burst: bursts[i], Publishers: placed[b.Name], PublisherRate: w[i]})
	}
	return res, nil
}
