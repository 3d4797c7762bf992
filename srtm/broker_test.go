package srtm

import (
	"fmt"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
)

func simTopic(n, batch int, rate float64) Topic {
	t := Topic{Name: "t", Rate: rate, Burst: 1000}
	for i := range n {
		t.Publishers = append(t.Publishers, Publisher{Name: fmt.Sprint("p", i), Rate: 10, Batch: batch})
	}
	return t
}

func TestSimulateP99GrowsWithLoad(t *testing.T) {
	var prev time.Duration
	for _, load := range []float64{0, 20000, 35000, 45000} {
		b := []Broker{{Name: "b", MCap: 50000, Load: load}}
		top := simTopic(100, 1, 1e6) // a bucket that never delays
		p, err := Plan([]Broker{{Name: "b", MCap: 2e6}}, top, Concentration)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Simulate(p, b, SimOptions{Duration: 500 * time.Millisecond, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if res.Overall.P99 < prev {
			t.Errorf("load %v: p99 %v below the lighter load's %v", load, res.Overall.P99, prev)
		}
		if res.Overall.P99 < 20*time.Microsecond {
			t.Errorf("load %v: p99 %v below the service time", load, res.Overall.P99)
		}
		prev = res.Overall.P99
	}
}

func TestTopicArrivalsMatchSimulate(t *testing.T) {
	top := simTopic(50, 5, 1e6)
	for i := range top.Publishers {
		top.Publishers[i].Group = fmt.Sprint("g", i%7)
	}
	p, err := Plan([]Broker{{Name: "a", MCap: 2e6}, {Name: "b", MCap: 2e6}}, top, LoadBalance)
	if err != nil {
		t.Fatal(err)
	}
	o := SimOptions{Duration: 200 * time.Millisecond, Seed: 5, Noise: time.Millisecond}
	res, err := Simulate(p, []Broker{{Name: "a", MCap: 2e6}, {Name: "b", MCap: 2e6}}, o)
	if err != nil {
		t.Fatal(err)
	}
	arr := TopicArrivals(top, Poisson, o.Noise, o.Duration+o.Duration/10, o.Seed)
	var inWindow int
	for _, a := range arr {
		if a >= o.Duration/10 && a < o.Duration+o.Duration/10 {
			inWindow++
		}
	}
	if inWindow != res.Overall.Messages {
		t.Errorf("TopicArrivals has %d messages after the warm-up, Simulate counted %d", inWindow, res.Overall.Messages)
	}
}

func TestSimulateDeterministic(t *testing.T) {
	top := simTopic(200, 10, 2200)
	top.Burst = 200
	brokers := []Broker{{Name: "a", MCap: 50000}, {Name: "b", MCap: 50000}}
	p, err := Plan(brokers, top, LoadBalance)
	if err != nil {
		t.Fatal(err)
	}
	o := SimOptions{Duration: 300 * time.Millisecond, Seed: 7, Arrival: Periodic}
	a, err := Simulate(p, brokers, o)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Simulate(p, brokers, o)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("same seed, different results:\n%v\n%v", a, b)
	}
	if len(a.PerBroker) != 2 || a.Overall.Messages == 0 {
		t.Errorf("unexpected result %+v", a)
	}
}

// Proposition 1 in the model: splitting a Poisson topic's bucket k ways
// never lowers the p99 token delay (here: the sum of delays, and the p99).
func TestSplitTokenDelayNotBelowOneBucket(t *testing.T) {
	top := simTopic(1000, 1, 11000)
	arr := TopicArrivals(top, Poisson, 0, time.Second, 3)
	r, _ := bucket.PerSecond(11000)
	b, err := SizeBurst(arr, r, 0.99)
	if err != nil {
		t.Fatal(err)
	}
	one := Delays(arr, r, b)
	var sumOne time.Duration
	for _, d := range one {
		sumOne += d
	}
	for _, k := range []int{2, 3, 6} {
		var brokers []Broker
		for i := range k {
			brokers = append(brokers, Broker{Name: fmt.Sprint("b", i), MCap: 1e9})
		}
		tk := top
		tk.Burst = b
		p, err := Plan(brokers, tk, LoadBalance)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Simulate(p, brokers, SimOptions{Duration: time.Second, Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		if res.Overall.TokenP99 == 0 {
			t.Errorf("k=%d: split p99 token delay is 0; the 1-bucket one is 0 by construction (b=%d)", k, b)
		}
		// Exact Proposition 1 on the same trace with a random assignment.
		rates := make([]bucket.Rate, k)
		bursts := make([]int64, k)
		for l, sh := range p.Shares {
			rates[l], bursts[l] = sh.Rate, sh.Burst
		}
		assign := make([]int, len(arr))
		for i := range assign {
			assign[i] = (i * 7919) % k
		}
		ds, err := SplitDelays(arr, assign, rates, bursts)
		if err != nil {
			t.Fatal(err)
		}
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		if sum+time.Duration(len(arr)) < sumOne {
			t.Errorf("k=%d: split delay sum %v below the one-bucket %v", k, sum, sumOne)
		}
	}
}

func TestModelP99Fit(t *testing.T) {
	top := simTopic(300, 1, 3300)
	top.Burst = 300
	top.SLO = time.Millisecond
	brokers := []Broker{{Name: "a", MCap: 20000}, {Name: "b", MCap: 20000}, {Name: "c", MCap: 20000}}
	res, err := Fit(brokers, top, MaxMin, ModelP99(top, SimOptions{Duration: 200 * time.Millisecond, Seed: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Plan.Shares) == 0 || len(res.Steps) == 0 {
		t.Fatalf("empty plan or no measurements %+v", res)
	}
	for _, st := range res.Steps {
		if st.P99 <= 0 {
			t.Errorf("step %+v: p99 not measured", st)
		}
	}
}

func TestConcentrationEqual(t *testing.T) {
	brokers := []Broker{{Name: "b1", MCap: 68000, Load: 10000}, {Name: "b2", MCap: 68000, Load: 40000}, {Name: "b3", MCap: 68000, Load: 50000}, {Name: "b4", MCap: 68000, Load: 60000}}
	top := simTopic(8000, 1, 88000)
	p, err := Plan(brokers, top, ConcentrationEqual)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Shares) != 3 {
		t.Fatalf("want 3 brokers, got %d", len(p.Shares))
	}
	var sum float64
	for _, sh := range p.Shares {
		sum += sh.Rate.PerSec()
	}
	if d := sum - 88000; d > 1e-6 || d < -1e-6 {
		t.Errorf("rates sum to %v", sum)
	}
	// total loads equal: 188000/3 each.
	for _, sh := range p.Shares {
		var load float64
		for _, b := range brokers {
			if b.Name == sh.Broker {
				load = b.Load
			}
		}
		if tot := load + sh.Rate.PerSec(); tot < 188000.0/3-1 || tot > 188000.0/3+1 {
			t.Errorf("%s: total load %v, want %v", sh.Broker, tot, 188000.0/3)
		}
	}
	idleP, err := Plan([]Broker{{Name: "a", MCap: 50000}, {Name: "b", MCap: 50000}, {Name: "c", MCap: 50000}}, top, ConcentrationEqual)
	if err != nil {
		t.Fatal(err)
	}
	if len(idleP.Shares) != 2 || idleP.Shares[0].Rate.PerSec() != 44000 {
		t.Errorf("idle brokers: want an even split over 2, got %+v", idleP.Shares)
	}
}
