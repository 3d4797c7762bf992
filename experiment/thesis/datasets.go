package thesis

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/tokenmesh/tokenmesh/workload"
)

// The thesis' data sets (the CRDT thesis §4.3.4) are Spotify traffic that is not
// public; these generators build analogs from their descriptions. Where the
// text is vague the choice made here is stated at the generator and in the
// report (assumptions). Every generator is deterministic per seed.
//
// Common assumptions:
//   - c, the capacity, is confidential in the thesis (Table 4.1); we take
//     c = 100 tokens (DefaultCapacity), so the refill rate 0.001c/s is
//     0.1 token/s. Data set D has its own (capacity 5, refill 1/s, Table 4.3).
//   - Timestamps have 1 ms resolution, as the thesis' UNIX-ms timestamps.
//   - Every request asks for 1 token.

// DefaultCapacity is our value of the thesis' confidential capacity c, in
// tokens (the CRDT thesis Table 4.1).
const DefaultCapacity = 100

// RefillFraction is the refill rate as a fraction of c per second (the CRDT thesis
// Table 4.1): the refill rate is RefillFraction*c tokens/s.
const RefillFraction = 0.001

// A data set A: 10 users, 5 minutes, 68.3c requests in total, every user
// rate limited at least once (§4.3.4, Fig. 4.6).
type ASpec struct {
	Users    int           // 10
	Capacity int           // c
	Duration time.Duration // 5 min
	TotalC   float64       // total requests in units of c: 68.3
}

// DefaultA is the thesis' data set A with our c.
func DefaultA(c int) ASpec {
	return ASpec{Users: 10, Capacity: c, Duration: 5 * time.Minute, TotalC: 68.3}
}

// GenerateA builds data set A. Assumptions (the thesis only shows the
// per-user counts as a bar chart, Fig. 4.6, without numbers):
//   - per-user shares of the total follow Zipf weights 1/(i+1)^0.8, so the
//     largest user sends about 6 times the smallest; with 68.3c over 10
//     users the smallest still sends about 3c in 5 minutes, far above the
//     c + 0.3c a central bucket admits, so every user is limited;
//   - each user's requests come in 1 to 4 bursts (sessions) starting
//     uniformly in the 5 minutes, each 10 s to 60 s long, with requests
//     uniform within the burst (a Poisson process conditioned on its
//     count);
//   - keys are "a-u00".."a-u09"; the total is exactly round(68.3c).
func GenerateA(s ASpec, seed uint64) *workload.Trace {
	r := rand.New(rand.NewPCG(seed, 0xA))
	total := int(math.Round(s.TotalC * float64(s.Capacity)))
	w := make([]float64, s.Users)
	sum := 0.0
	for i := range w {
		w[i] = 1 / math.Pow(float64(i+1), 0.8)
		sum += w[i]
	}
	counts := make([]int, s.Users)
	left := total
	for i := range counts {
		counts[i] = int(float64(total) * w[i] / sum)
		left -= counts[i]
	}
	for i := 0; left > 0; i = (i + 1) % s.Users {
		counts[i]++
		left--
	}
	// Which user gets which share changes with the seed.
	r.Shuffle(len(counts), func(i, j int) { counts[i], counts[j] = counts[j], counts[i] })
	var reqs []workload.Request
	for u, n := range counts {
		key := fmt.Sprintf("a-u%02d", u)
		bursts := 1 + r.IntN(4)
		for b := 0; b < bursts; b++ {
			nb := n / bursts
			if b < n%bursts {
				nb++
			}
			length := time.Duration(10+r.IntN(51)) * time.Second
			if length > s.Duration {
				length = s.Duration
			}
			start := time.Duration(r.Int64N(int64(s.Duration - length + 1)))
			for k := 0; k < nb; k++ {
				at := start + time.Duration(r.Int64N(int64(length)))
				reqs = append(reqs, workload.Request{Arrival: at.Truncate(time.Millisecond), Key: key, Tokens: 1})
			}
		}
	}
	return finish("data set A", reqs)
}

// BSubset names the four subsets of data set B.
type BSubset string

// The subsets of data set B (§4.3.4, ch. 5.2).
const (
	Extreme     BSubset = "extreme"
	Substantial BSubset = "substantial"
	Barely      BSubset = "barely rate-limited"
	NotLimited  BSubset = "not rate-limited"
)

// BSubsets is the order the thesis presents them in (§5.2.1-5.2.4).
var BSubsets = []BSubset{Extreme, Substantial, Barely, NotLimited}

// BRequestsC is each rate-limited subset's request count in units of c
// (the CRDT thesis §5.2.1-5.2.3); NotLimited has none (see GenerateB).
var BRequestsC = map[BSubset]float64{Extreme: 21.5, Substantial: 3.2, Barely: 1.1}

// BDuration is the span of each subset: one minute, two for not rate-limited.
func BDuration(s BSubset) time.Duration {
	if s == NotLimited {
		return 2 * time.Minute
	}
	return time.Minute
}

// GenerateB builds one subset of data set B for capacity c: a single user
// ("b-user"). Assumptions:
//   - the three rate-limited users send round(21.5c), round(3.2c) and
//     round(1.1c) requests at times uniform over the minute (a Poisson
//     process conditioned on its count); the thesis hand-picked real users
//     and shows their per-second counts only as plots (Figs. 5.5-5.9);
//   - not rate-limited: §4.3.4 says the fabricated user's "request rate was
//     lower than the refill rate" with "a fixed interval slightly faster
//     than the refill rate"; we follow the first (it is never limited, as
//     the section's title says): one request every 1/(0.9 * refill) s, i.e.
//     at 90% of the refill rate, for two minutes, starting at 0.
func GenerateB(s BSubset, c int, seed uint64) *workload.Trace {
	dur := BDuration(s)
	var reqs []workload.Request
	if s == NotLimited {
		interval := time.Duration(float64(time.Second) / (0.9 * RefillFraction * float64(c)))
		for at := time.Duration(0); at < dur; at += interval {
			reqs = append(reqs, workload.Request{Arrival: at.Truncate(time.Millisecond), Key: "b-user", Tokens: 1})
		}
		return finish("data set B, "+string(s), reqs)
	}
	r := rand.New(rand.NewPCG(seed, 0xB))
	n := int(math.Round(BRequestsC[s] * float64(c)))
	for k := 0; k < n; k++ {
		at := time.Duration(r.Int64N(int64(dur)))
		reqs = append(reqs, workload.Request{Arrival: at.Truncate(time.Millisecond), Key: "b-user", Tokens: 1})
	}
	return finish("data set B, "+string(s), reqs)
}

// CSpec is data set C: many users over an hour with the production share of
// rate-limited users (§4.3.4).
type CSpec struct {
	Users         int           // 5000
	Capacity      int           // c
	Duration      time.Duration // 1 h
	LimitedShare  float64       // share of users that are rate limited
	MeanPerHour   float64       // mean requests per hour of a user that is not limited
	LimitedBurstC [2]float64    // a limited user's requests, uniform in [lo, hi] c
}

// DefaultC is data set C with our assumptions (see GenerateC).
func DefaultC(c int) CSpec {
	return CSpec{Users: 5000, Capacity: c, Duration: time.Hour, LimitedShare: 0.01, MeanPerHour: 8, LimitedBurstC: [2]float64{1.1, 4}}
}

// GenerateC builds data set C. The thesis gives neither the share of
// rate-limited users nor per-user volumes; assumptions:
//   - 1% of the users are rate limited (LimitedShare): each sends
//     U(1.1c, 4c) requests in one burst of 1 to 5 minutes at a uniform
//     start, requests uniform within it (like data set A's users);
//   - the other 99% are not: each sends a Poisson number of requests with
//     mean drawn from an exponential with mean 8 per hour (MeanPerHour),
//     capped at c/2, at uniform times over the hour; with c = 100 and a
//     refill of 0.1 token/s none of them is ever limited;
//   - users are "c-u0000".. .
func GenerateC(s CSpec, seed uint64) *workload.Trace {
	r := rand.New(rand.NewPCG(seed, 0xC))
	limited := int(math.Round(s.LimitedShare * float64(s.Users)))
	var reqs []workload.Request
	for u := 0; u < s.Users; u++ {
		key := fmt.Sprintf("c-u%04d", u)
		if u < limited {
			n := int(float64(s.Capacity) * (s.LimitedBurstC[0] + r.Float64()*(s.LimitedBurstC[1]-s.LimitedBurstC[0])))
			length := time.Duration(60+r.IntN(241)) * time.Second
			start := time.Duration(r.Int64N(int64(s.Duration - length)))
			for k := 0; k < n; k++ {
				at := start + time.Duration(r.Int64N(int64(length)))
				reqs = append(reqs, workload.Request{Arrival: at.Truncate(time.Millisecond), Key: key, Tokens: 1})
			}
			continue
		}
		mean := r.ExpFloat64() * s.MeanPerHour * s.Duration.Hours()
		n := min(poisson(r, mean), s.Capacity/2)
		for k := 0; k < n; k++ {
			at := time.Duration(r.Int64N(int64(s.Duration)))
			reqs = append(reqs, workload.Request{Arrival: at.Truncate(time.Millisecond), Key: key, Tokens: 1})
		}
	}
	return finish("data set C", reqs)
}

// poisson draws a Poisson variate (Knuth for small means, normal
// approximation above 30).
func poisson(r *rand.Rand, mean float64) int {
	if mean <= 0 {
		return 0
	}
	if mean > 30 {
		return max(0, int(math.Round(mean+math.Sqrt(mean)*r.NormFloat64())))
	}
	l, k, p := math.Exp(-mean), 0, 1.0
	for {
		p *= r.Float64()
		if p <= l {
			return k
		}
		k++
	}
}

// Data set D (§4.3.4, Table 4.3): one user sending one request every 0.9 s
// for 100 s, capacity 5, refill 1 token/s, gossip 300, 450 or 900 ms.
const (
	DCapacity = 5
	DRefill   = 1.0 // tokens per second
	DInterval = 900 * time.Millisecond
	DDuration = 100 * time.Second
)

// DGossips are the gossip intervals of Table 4.3.
var DGossips = []time.Duration{300 * time.Millisecond, 450 * time.Millisecond, 900 * time.Millisecond}

// GenerateD builds data set D: requests at 0, 0.9 s, 1.8 s, ... below 100 s
// (112 requests). It has no randomness; the seeds of a D run only change the
// injector's node assignment and the gossip partners.
func GenerateD() *workload.Trace {
	var reqs []workload.Request
	for at := time.Duration(0); at < DDuration; at += DInterval {
		reqs = append(reqs, workload.Request{Arrival: at, Key: "d-user", Tokens: 1})
	}
	return finish("data set D", reqs)
}

// finish sorts requests by arrival (stable, then by key for equal times so
// the order does not depend on generation order) and names the trace.
func finish(name string, reqs []workload.Request) *workload.Trace {
	slices.SortStableFunc(reqs, func(a, b workload.Request) int {
		if a.Arrival != b.Arrival {
			if a.Arrival < b.Arrival {
				return -1
			}
			return 1
		}
		if a.Key < b.Key {
			return -1
		}
		if a.Key > b.Key {
			return 1
		}
		return 0
	})
	return &workload.Trace{Name: name, Requests: reqs}
}
