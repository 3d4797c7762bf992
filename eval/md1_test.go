package eval

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/workload"
)

// The M/D/1 work distribution (Erlang's formula) against a Lindley
// recursion of an M/D/1 queue, and eq. (1) of SRTM §2.1 against Poisson
// arrivals into a shaping bucket (bucket.ReserveN with no bound on the
// wait): for b = 1 eq. (1) is the M/D/1 mean wait rho/(2r(1 - rho)).
func TestMD1(t *testing.T) {
	if got := MD1WorkAbove(0.3, 0); math.Abs(got-0.3) > 1e-12 {
		t.Fatalf("P(U > 0) at rho 0.3 = %v, want rho", got)
	}
	if w, ok := MD1TokenBucketWait(0.5, 1, 1); !ok || math.Abs(w-0.5) > 1e-12 {
		t.Fatalf("E[T] at lambda 0.5, (1, 1) = %v %v, want 0.5 s", w, ok)
	}
	if _, ok := MD1TokenBucketWait(1, 1, 3); ok {
		t.Fatal("a mean wait at lambda = r")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const rho, n = 0.7, 400_000
	var u float64 // unfinished work found by an arrival, in service times
	above := map[float64]int{0: 0, 1.5: 0, 3: 0}
	for range n {
		u = max(u-rng.ExpFloat64()/rho, 0) // drains at 1 between arrivals
		for x := range above {
			if u > x {
				above[x]++
			}
		}
		u++ // the arrival's own service time
	}
	for x, c := range above {
		if got, want := float64(c)/n, MD1WorkAbove(rho, x); math.Abs(got-want) > 0.01 {
			t.Errorf("P(U > %v) at rho %v: simulated %.4f, formula %.4f", x, rho, got, want)
		}
	}
	// Poisson arrivals at 0.6/s into (1/s, 1): mean delay 0.6/(2*0.4) = 0.75 s.
	b := bucket.MustNew(bucket.Rate{Tokens: 1, Per: time.Second}, 1, 0)
	var at, sum time.Duration
	for range n {
		at += time.Duration(rng.ExpFloat64() / 0.6 * float64(time.Second))
		d, ok := b.ReserveN(at, 1)
		if !ok {
			t.Fatal("refused")
		}
		sum += d
	}
	want, _ := MD1TokenBucketWait(0.6, 1, 1)
	if got := (sum / n).Seconds(); math.Abs(got-want)/want > 0.03 {
		t.Fatalf("shaping bucket (1/s, 1) at 0.6/s: mean delay %.4f s, eq. (1) %.4f s", got, want)
	}
}

// md1Compare predicts each key offered below r on the rule's buckets: one
// (r, b) for central, the N shares (r/N, b_i) for static, and leaves keys
// at or above r out; the measured mean is over the admitted requests.
// (The requests are listed key by key; the first and the last are the
// earliest and the latest, which is all the span reads.)
func TestMD1Compare(t *testing.T) {
	rate := bucket.Rate{Tokens: 10, Per: time.Second}
	var reqs []workload.Request
	var outs []sim.Outcome
	for i := range 300 { // key "fast": 300 in 20 s (15/s, above r)
		reqs = append(reqs, workload.Request{Arrival: time.Duration(i) * 66 * time.Millisecond, Key: "fast", Tokens: 1})
		outs = append(outs, sim.Outcome{Decided: true, Allowed: true})
	}
	for i := range 100 { // key "slow": 100 requests over 20 s (5/s, below r)
		reqs = append(reqs, workload.Request{Arrival: time.Duration(i) * 200 * time.Millisecond, Key: "slow", Tokens: 1})
		outs = append(outs, sim.Outcome{Decided: true, Allowed: i%2 == 0, Delay: time.Duration(i%4) * time.Millisecond})
	}
	span := (reqs[len(reqs)-1].Arrival - reqs[0].Arrival).Seconds()
	c := md1Compare("central", reqs, outs, rate, 4, 1)
	want, _ := MD1TokenBucketWait(100/span, 10, 4)
	if c == nil || c.Buckets != "(r, b)" || c.Keys != 1 || c.UnstableKeys != 1 || c.Requests != 100 || c.Admitted != 50 ||
		math.Abs(c.PredictedMeanMs-round(1000*want, 3)) > 1e-9 || c.MeasuredMeanMs != 1 {
		t.Fatalf("central: %+v, want slow predicted at %.3f ms, measured 1 ms over 50 admitted", c, 1000*want)
	}
	c = md1Compare("static", reqs, outs, rate, 4, 2)
	w0, _ := MD1TokenBucketWait(50/span, 5, 2) // b = 4 split 2 ways: 2 and 2
	if c == nil || c.Buckets != "(r/N, b_i)" || c.Keys != 1 || math.Abs(c.PredictedMeanMs-round(1000*w0, 3)) > 1e-9 {
		t.Fatalf("static on 2 nodes: %+v, want %.3f ms", c, 1000*w0)
	}
	if md1Compare("owner", reqs, outs, rate, 4, 1) != nil {
		t.Error("a comparison for owner, which the prediction is not about")
	}
}
