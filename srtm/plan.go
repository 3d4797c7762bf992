package srtm

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
)

// Broker is a message broker as the Load Distributor sees it (SRTM §4.2
// Step (1)): its maximum message processing capacity MCap (msg/s, from a
// benchmarking phase, footnote 5) and the message rate Load (msg/s) already
// allocated to it by other topics. Its residual capacity is RCap.
type Broker struct {
	Name string
	MCap float64 // msg/s, >= 0
	Load float64 // msg/s already allocated, >= 0
}

// RCap is the residual capacity rcap = mcap - allocated (§4.2 Step (1)),
// in msg/s, never negative.
func (b Broker) RCap() float64 { return math.Max(0, b.MCap-b.Load) }

// Publisher is one publisher of a topic: its message rate (msg/s), the
// batch size it sends messages in (messages per batch, 1 when it sends them
// one at a time; kept for the broker model, Plan does not use it), and its
// correlation group key (§4.3): publishers with the same non-empty Group
// tend to send at the same time.
type Publisher struct {
	Name  string
	Rate  float64 // msg/s, > 0
	Batch int     // messages per batch, >= 1 (0 is read as 1)
	Group string  // correlation group key; "" for none
}

// Topic is a topic to place: its token bucket (Rate r in tokens/s, Burst b
// in tokens), its SLO on the p99 end-to-end latency, and its publishers.
type Topic struct {
	Name       string
	Rate       float64       // r, tokens (messages) per second, > 0
	Burst      int64         // b, tokens, >= 1
	SLO        time.Duration // p99 latency bound, >= 0 (0: none, only used by Fit)
	Publishers []Publisher
}

// Policy selects how Plan and Fit choose brokers and quotas (SRTM 000
// §4.2 Steps (1)-(2) and the baselines of §6); "" means MaxMin, the
// paper's Load Distributor.
type Policy string

const (
	// Concentration (ours): the fewest brokers of §4.2 Step (1), taken in
	// decreasing rcap order, each filled up to its rcap in that order; the
	// last one takes the remainder. It is neither the paper's Step (2) nor
	// its Conc baseline (ConcentrationEqual), and the small residual share
	// it can leave on the last broker is the weakness §6.3 says max-min
	// exists to avoid (higher DRL penalty, Fig. 8). Kept as a named option.
	Concentration Policy = "concentration"
	// MaxMin (the paper's §4.2 Steps (1)-(2)): the same fewest brokers, with
	// quotas min(rcap, rate/k), water-filled (see Plan). This is SRTM's
	// Load Distributor and the default.
	MaxMin Policy = "maxmin"
	// LoadBalance is the paper's LB baseline (§6): the topic is spread over
	// every broker with residual capacity, max-min fairly.
	LoadBalance Policy = "lb"
	// ConcentrationEqual is the paper's Conc baseline as §6.3 describes it:
	// the same fewest brokers as Concentration, with quotas that equalise
	// the brokers' total load (allocated + topic), water-filled under their
	// rcaps. On idle brokers it splits the topic evenly over k brokers.
	ConcentrationEqual Policy = "conc-equal"
)

// Share is one broker's part of a plan: its sub-token bucket (Rate, Burst)
// and the publishers assigned to it.
type Share struct {
	Broker        string
	RCap          float64     // the broker's residual capacity before this topic, msg/s
	Rate          bucket.Rate // r_l, the sub-token bucket rate (also the rate allocated on the broker)
	Burst         int64       // b_l, tokens, >= 1
	Publishers    []Publisher // assigned publishers, in correlation-interleaved order
	PublisherRate float64     // sum of the assigned publishers' rates, msg/s
}

// PlanResult is a topic's assignment (SRTM 000 §4.2-4.3): the exact token
// bucket (Rate r in tokens per Per, Burst b in tokens) and one Share per
// broker used, in decreasing rcap order, ties by name (Fit: in the order
// of the brokers given); the shares' rates sum to Rate and their bursts to Burst exactly.
type PlanResult struct {
	Topic  string
	Policy Policy
	Rate   bucket.Rate
	Burst  int64
	Shares []Share
}

// maxPer mirrors bucket's limit on a Rate's period.
const maxPer = 1e6 * time.Second

// Plan assigns topic's publishers to brokers and splits its token bucket
// (r, b) into one sub-token bucket per broker used (SRTM §4.2 Steps (1)-(2),
// §4.3).
//
// The paper's: residual capacity rcap = mcap - allocated; Step (1) sorts
// brokers by decreasing rcap and takes the smallest number k whose rcaps
// cover the topic's rate; Step (2) sets each quota to min(rcap, rate/k) (the
// max-min principle); §4.3 picks each broker's publishers from every
// correlation group in proportion to the group's size.
//
// Ours: (a) the paper's min(rcap, rate/k) leaves part of the rate unplaced
// when a broker's rcap is below rate/k; we repeat it on the remainder over
// the brokers not yet capped (water-filling), which is the max-min fair
// allocation the paper aims for and places all of r. (b) "concentration"
// fills the same k brokers greedily and "lb" water-fills over all brokers
// (see the Policy constants); "" means MaxMin. (c) Arithmetic is
// exact: r is converted with bucket.PerSecond into Tokens/Per and cut into
// Tokens*M integer units of one token per Per*M (M a power of ten, see
// topicUnits; typically a unit is 1e-6 of r or finer); rcaps are rounded
// down to whole units and quotas are whole units, so sum r_l = r exactly
// and r_l <= rcap_l (up to float rounding of the rcap itself). The burst is
// split in proportion to the quotas with at least one token per sub-bucket
// (largest remainder), so sum b_l = b exactly. (d) The correlation-aware
// assignment interleaves the groups (position n takes the next publisher of
// the group furthest behind its proportion, ungrouped publishers forming one
// group) and gives every broker the contiguous run of that order whose
// cumulative publisher rate falls in its quota's fraction of the topic; any
// broker thus receives each group in about the group's proportion.
// Publishers are not split, so a share's PublisherRate may differ from its
// token rate by up to a publisher's rate.
//
// Errors: invalid inputs name the field (brokers[i].mcap, topic.burst,
// topic.publishers[j].rate, ...); a topic whose rate exceeds the brokers'
// total rcap names the rate and the capacities; a burst smaller than the
// number of brokers needed (every sub-token bucket needs a token).
func Plan(brokers []Broker, topic Topic, policy Policy) (PlanResult, error) {
	if policy == "" {
		policy = MaxMin
	}
	if err := validate(brokers, topic, policy); err != nil {
		return PlanResult{}, err
	}
	return plan(brokers, topic, policy)
}

func plan(brokers []Broker, topic Topic, policy Policy) (PlanResult, error) {
	r, units, unitPer, err := topicUnits(topic.Rate, topic.Burst)
	if err != nil {
		return PlanResult{}, err
	}
	q, order, err := quotas(brokers, topic, policy, r, units)
	if err != nil {
		return PlanResult{}, err
	}
	res := PlanResult{Topic: topic.Name, Policy: policy, Rate: r, Burst: topic.Burst}
	idx := make([]int, 0, len(q))
	w := make([]float64, 0, len(q))
	for _, i := range order {
		if u := q[i]; u > 0 {
			idx = append(idx, i)
			w = append(w, float64(u))
		}
	}
	if int64(len(idx)) > topic.Burst {
		return PlanResult{}, fmt.Errorf("topic %q: burst %d is smaller than the %d brokers its rate %v msg/s needs: every sub-token bucket needs at least one token", topic.Name, topic.Burst, len(idx), topic.Rate)
	}
	bursts := splitBurst(topic.Burst, w)
	groups := assignPublishers(topic.Publishers, w)
	for n, i := range idx {
		rl := bucket.Rate{Tokens: q[i], Per: unitPer}.Reduced()
		if _, err := bucket.New(rl, bursts[n], 0); err != nil {
			return PlanResult{}, fmt.Errorf("topic %q: sub-token bucket for broker %q: %w", topic.Name, brokers[i].Name, err)
		}
		sh := Share{Broker: brokers[i].Name, RCap: brokers[i].RCap(), Rate: rl, Burst: bursts[n], Publishers: groups[n]}
		for _, p := range groups[n] {
			sh.PublisherRate += p.Rate
		}
		res.Shares = append(res.Shares, sh)
	}
	return res, nil
}

// topicUnits converts the topic rate into an exact Rate and cuts it into
// integer units of one token per unitPer (unitPer = Per*M). M is the largest
// power of ten that keeps unitPer within 1000 s, or, while there are fewer
// than 1e9 units, within bucket's 1e6 s limit as long as a sub-bucket of the
// whole burst still fits bucket.New's tick arithmetic (burst*unitPer <=
// MaxInt64/2).
func topicUnits(rate float64, burst int64) (r bucket.Rate, units int64, unitPer time.Duration, err error) {
	r, err = bucket.PerSecond(rate)
	if err != nil {
		return r, 0, 0, fmt.Errorf("topic.rate: %w", err)
	}
	burst = max(burst, 1)
	m := int64(1)
	for {
		next := int64(r.Per) * m * 10
		if next > int64(maxPer) || r.Tokens > math.MaxInt64/1024/(m*10) || burst > math.MaxInt64/2/next {
			break
		}
		if next > int64(1000*time.Second) && r.Tokens*m >= 1e9 {
			break
		}
		m *= 10
	}
	return r, r.Tokens * m, r.Per * time.Duration(m), nil
}

// quotas returns each broker's quota in units (indexed like brokers) and
// the brokers' indices in decreasing rcap order (ties by name).
func quotas(brokers []Broker, topic Topic, policy Policy, r bucket.Rate, units int64) (q []int64, order []int, err error) {
	unitVal := r.PerSec() / float64(units) // msg/s per unit
	caps, total := unitCaps(brokers, unitVal, units)
	if total < units {
		return nil, nil, capacityError(brokers, topic, unitVal)
	}
	order = rcapOrder(brokers, caps)
	k := 0
	var acc int64
	for acc < units {
		acc += caps[order[k]]
		k++
	}
	q = make([]int64, len(brokers))
	switch policy {
	case Concentration:
		left := units
		for _, i := range order[:k] {
			q[i] = min(caps[i], left)
			left -= q[i]
		}
	case MaxMin:
		waterFill(q, caps, order[:k], units)
	case ConcentrationEqual:
		levelFill(q, caps, brokers, order[:k], units, unitVal)
	case LoadBalance:
		n := 0
		for n < len(order) && caps[order[n]] > 0 {
			n++
		}
		waterFill(q, caps, order[:n], units)
	}
	return q, order, nil
}

// unitCaps are the brokers' rcaps in whole units of unitVal msg/s, at most
// units each, and their sum, at most units.
func unitCaps(brokers []Broker, unitVal float64, units int64) (caps []int64, total int64) {
	caps = make([]int64, len(brokers))
	for i, b := range brokers {
		// rcap in whole units, forgiving float rounding of one part in
		// 1e12 (1000 msg/s at 5e-6 msg/s per unit is 2e8 units, not
		// 199999999.99999997).
		rc := b.RCap() * (1 + 1e-12)
		c := math.Floor(rc / unitVal)
		if c >= float64(units) {
			caps[i] = units
		} else {
			caps[i] = int64(c)
			// Step down (in steps that change the float product) while
			// still above rcap.
			for caps[i] > 0 && float64(caps[i])*unitVal > rc {
				caps[i] -= max(1, caps[i]>>40)
			}
			caps[i] = max(caps[i], 0)
		}
		if total += caps[i]; total > units {
			total = units
		}
	}
	return caps, total
}

// capacityError is why the topic does not fit the brokers' rcaps in units
// of unitVal msg/s: the rounding, or the capacity itself.
func capacityError(brokers []Broker, topic Topic, unitVal float64) error {
	var sum, best float64
	for _, b := range brokers {
		sum += b.RCap()
		best = math.Max(best, b.RCap())
	}
	if sum >= topic.Rate {
		return fmt.Errorf("topic %q: rate %v msg/s does not fit the total residual capacity %v msg/s of %d brokers once each rcap is rounded down to the split resolution of %v msg/s", topic.Name, topic.Rate, sum, len(brokers), unitVal)
	}
	return fmt.Errorf("topic %q: rate %v msg/s exceeds the total residual capacity %v msg/s of %d brokers (largest rcap %v msg/s)", topic.Name, topic.Rate, sum, len(brokers), best)
}

// rcapOrder is the brokers' indices in decreasing caps order (ties by
// name).
func rcapOrder(brokers []Broker, caps []int64) []int {
	order := make([]int, len(brokers))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		ca, cb := caps[order[a]], caps[order[b]]
		if ca != cb {
			return ca > cb
		}
		return brokers[order[a]].Name < brokers[order[b]].Name
	})
	return order
}

// waterFill sets q[i] for i in set to the max-min fair split of total units
// under caps (sum q = total when sum caps >= total).
func waterFill(q, caps []int64, set []int, total int64) {
	s := append([]int(nil), set...)
	sort.SliceStable(s, func(a, b int) bool { return caps[s[a]] < caps[s[b]] })
	left := total
	for j, i := range s {
		m := int64(len(s) - j)
		if caps[i] <= left/m {
			q[i] = caps[i]
			left -= caps[i]
			continue
		}
		// Everyone from here on has cap > left/m: give left/m each and the
		// remainder one unit at a time to the largest caps.
		rest := s[j:]
		for _, x := range rest {
			q[x] = left / m
		}
		extra := left % m
		for e := int64(0); e < extra; e++ {
			q[rest[len(rest)-1-int(e)]]++
		}
		return
	}
}

// levelFill sets q[i] for i in set so that the brokers' total loads
// (Load + q[i] units) are as equal as the caps allow, sum q = total (when
// sum caps >= total): a water level L is found by bisection, each broker
// gets min(cap, max(0, L - load)) rounded down, and the units left over go
// one at a time to the brokers with the lowest total load that have room.
func levelFill(q, caps []int64, brokers []Broker, set []int, total int64, unitVal float64) {
	load := func(i int) float64 { return brokers[i].Load / unitVal }
	fill := func(L float64) int64 {
		var s int64
		for _, i := range set {
			s += min(caps[i], int64(max(0, math.Floor(L-load(i)))))
		}
		return s
	}
	lo, hi := 0.0, 0.0
	for _, i := range set {
		hi = max(hi, load(i)+float64(caps[i])+1)
	}
	for range 200 {
		mid := (lo + hi) / 2
		if fill(mid) >= total {
			hi = mid
		} else {
			lo = mid
		}
	}
	var s int64
	for _, i := range set {
		q[i] = min(caps[i], int64(max(0, math.Floor(lo-load(i)))))
		s += q[i]
	}
	for s < total {
		best := -1
		for _, i := range set {
			if q[i] < caps[i] && (best < 0 || load(i)+float64(q[i]) < load(best)+float64(q[best])) {
				best = i
			}
		}
		if best < 0 {
			return
		}
		q[best]++
		s++
	}
}

// splitBurst splits b tokens over len(w) sub-buckets in proportion to w,
// at least one each (b >= len(w)), summing to b exactly.
func splitBurst(b int64, w []float64) []int64 {
	out := apportion(b-int64(len(w)), w)
	for i := range out {
		out[i]++
	}
	return out
}

// apportion splits total >= 0 in proportion to the weights w (>= 0, not all
// zero) by largest remainder; the parts sum to total exactly.
func apportion(total int64, w []float64) []int64 {
	out := make([]int64, len(w))
	var sw float64
	for _, x := range w {
		sw += x
	}
	if len(w) == 0 {
		return out
	}
	if sw <= 0 {
		w = make([]float64, len(w))
		for i := range w {
			w[i] = 1
		}
		sw = float64(len(w))
	}
	frac := make([]float64, len(w))
	var used int64
	for i, x := range w {
		exact := float64(total) * (x / sw)
		f := math.Floor(exact)
		// Compare before converting: near 2^63 the float may not fit.
		if left := total - used; f >= float64(left) {
			out[i] = left
		} else if f > 0 {
			out[i] = int64(f)
		}
		used += out[i]
		frac[i] = exact - f
	}
	// Float rounding leaves a remainder: spread it evenly, then one unit at
	// a time by largest fractional part.
	rem := total - used
	for i := range out {
		out[i] += rem / int64(len(w))
	}
	ord := make([]int, len(w))
	for i := range ord {
		ord[i] = i
	}
	sort.SliceStable(ord, func(a, b int) bool { return frac[ord[a]] > frac[ord[b]] })
	for j := int64(0); j < rem%int64(len(w)); j++ {
		out[ord[j]]++
	}
	return out
}

// interleave orders publishers so that correlation groups are spread evenly
// (§4.3, see Plan): position n takes the next publisher of the group with
// the largest deficit n*size/N - taken (ties by first appearance), so every
// prefix, hence every contiguous run, holds each group in about its
// proportion. Ungrouped publishers form one group.
func interleave(pubs []Publisher) []Publisher {
	var order []string
	members := map[string][]Publisher{}
	for _, p := range pubs {
		if _, ok := members[p.Group]; !ok {
			order = append(order, p.Group)
		}
		members[p.Group] = append(members[p.Group], p)
	}
	taken := make([]int, len(order))
	out := make([]Publisher, 0, len(pubs))
	N := float64(len(pubs))
	for n := 1; n <= len(pubs); n++ {
		best, bestDef := -1, math.Inf(-1)
		for g, name := range order {
			size := len(members[name])
			if taken[g] == size {
				continue
			}
			if def := float64(n)*float64(size)/N - float64(taken[g]); def > bestDef {
				best, bestDef = g, def
			}
		}
		out = append(out, members[order[best]][taken[best]])
		taken[best]++
	}
	return out
}

// assignPublishers cuts the interleaved publishers into len(w) runs whose
// cumulative rate midpoints fall in each weight's fraction of the total.
func assignPublishers(pubs []Publisher, w []float64) [][]Publisher {
	out := make([][]Publisher, len(w))
	if len(w) == 0 {
		return out
	}
	var sw, lam float64
	for _, x := range w {
		sw += x
	}
	for _, p := range pubs {
		lam += p.Rate
	}
	bounds := make([]float64, len(w))
	var acc float64
	for i, x := range w {
		acc += x
		bounds[i] = acc / sw
	}
	var cum float64
	l := 0
	for _, p := range interleave(pubs) {
		mid := (cum + p.Rate/2) / lam
		cum += p.Rate
		for l < len(w)-1 && mid >= bounds[l] {
			l++
		}
		out[l] = append(out[l], p)
	}
	return out
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

func validate(brokers []Broker, topic Topic, policy Policy) error {
	switch policy {
	case Concentration, MaxMin, LoadBalance, ConcentrationEqual:
	default:
		return fmt.Errorf("policy %q is not one of concentration, maxmin, lb, conc-equal", policy)
	}
	if len(brokers) == 0 {
		return fmt.Errorf("brokers: none given")
	}
	names := map[string]bool{}
	for i, b := range brokers {
		switch {
		case strings.TrimSpace(b.Name) == "":
			return fmt.Errorf("brokers[%d].name: empty", i)
		case names[b.Name]:
			return fmt.Errorf("brokers[%d].name: %q is a duplicate", i, b.Name)
		case !finite(b.MCap) || b.MCap < 0:
			return fmt.Errorf("brokers[%d].mcap: %v must be a finite number >= 0 (msg/s)", i, b.MCap)
		case !finite(b.Load) || b.Load < 0:
			return fmt.Errorf("brokers[%d].load: %v must be a finite number >= 0 (msg/s)", i, b.Load)
		}
		names[b.Name] = true
	}
	return validateTopic(topic)
}

func validateTopic(topic Topic) error {
	switch {
	case !finite(topic.Rate) || topic.Rate <= 0:
		return fmt.Errorf("topic.rate: %v must be a finite number > 0 (msg/s)", topic.Rate)
	case topic.Burst < 1:
		return fmt.Errorf("topic.burst: %d must be at least 1 token", topic.Burst)
	case topic.SLO < 0:
		return fmt.Errorf("topic.slo: %v is negative", topic.SLO)
	case len(topic.Publishers) == 0:
		return fmt.Errorf("topic.publishers: none given")
	}
	if _, err := bucket.PerSecond(topic.Rate); err != nil {
		return fmt.Errorf("topic.rate: %w", err)
	}
	names := map[string]bool{}
	for j, p := range topic.Publishers {
		switch {
		case strings.TrimSpace(p.Name) == "":
			return fmt.Errorf("topic.publishers[%d].name: empty", j)
		case names[p.Name]:
			return fmt.Errorf("topic.publishers[%d].name: %q is a duplicate", j, p.Name)
		case !finite(p.Rate) || p.Rate <= 0 || p.Rate > 1e12:
			return fmt.Errorf("topic.publishers[%d].rate: %v must be a finite number in (0, 1e12] (msg/s)", j, p.Rate)
		case p.Batch < 0:
			return fmt.Errorf("topic.publishers[%d].batch: %d is negative", j, p.Batch)
		}
		names[p.Name] = true
	}
	return nil
}
