package srtm

import (
	"fmt"
	"math"
	"math/big"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"pgregory.net/rapid"
)

func ratOf(r bucket.Rate) *big.Rat {
	if r.Tokens == 0 {
		return new(big.Rat)
	}
	return big.NewRat(r.Tokens, int64(r.Per))
}

// checkPlan checks the invariants every plan keeps: exact sums, allocation
// within rcap, every publisher assigned once, bursts >= 1.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

func checkPlan(t fataler, brokers []Broker, topic Topic, p PlanResult) {
	t.Helper()
	sumR := new(big.Rat)
	var sumB int64
	seen := map[string]int{}
	rcap := map[string]float64{}
	for _, b := range brokers {
		rcap[b.Name] = b.RCap()
	}
	for _, sh := range p.Shares {
		sumR.Add(sumR, ratOf(sh.Rate))
		sumB += sh.Burst
		if sh.Burst < 1 || sh.Rate.Tokens < 1 {
			t.Fatalf("broker %s: empty sub-bucket %v, %d", sh.Broker, sh.Rate, sh.Burst)
		}
		if rl := sh.Rate.PerSec(); rl > rcap[sh.Broker]*(1+1e-9)+1e-9 {
			t.Fatalf("broker %s: allocated %v msg/s above rcap %v", sh.Broker, rl, rcap[sh.Broker])
		}
		for _, pub := range sh.Publishers {
			seen[pub.Name]++
		}
	}
	if sumR.Cmp(ratOf(p.Rate)) != 0 {
		t.Fatalf("sum r_l = %v, want r = %v", sumR.FloatString(9), ratOf(p.Rate).FloatString(9))
	}
	if want, _ := bucket.PerSecond(topic.Rate); ratOf(want).Cmp(ratOf(p.Rate)) != 0 {
		t.Fatalf("plan rate %v, topic rate %v", p.Rate, topic.Rate)
	}
	if sumB != topic.Burst {
		t.Fatalf("sum b_l = %d, want %d", sumB, topic.Burst)
	}
	for _, pub := range topic.Publishers {
		if seen[pub.Name] != 1 {
			t.Fatalf("publisher %s assigned %d times", pub.Name, seen[pub.Name])
		}
	}
}

func minShare(p PlanResult) *big.Rat {
	var m *big.Rat
	for _, sh := range p.Shares {
		if r := ratOf(sh.Rate); m == nil || r.Cmp(m) < 0 {
			m = r
		}
	}
	return m
}

func genBrokers(t *rapid.T) []Broker {
	n := rapid.IntRange(1, 8).Draw(t, "brokers")
	out := make([]Broker, n)
	for i := range out {
		mcap := float64(rapid.IntRange(0, 100000).Draw(t, "mcap")) / 10
		out[i] = Broker{Name: fmt.Sprintf("b%d", i), MCap: mcap, Load: mcap * rapid.Float64Range(0, 1.2).Draw(t, "load")}
	}
	return out
}

func genTopic(t *rapid.T, total float64, nb int) Topic {
	rate := math.Round(total*rapid.Float64Range(0.001, 1.3).Draw(t, "rate")*1000) / 1000
	if rate <= 0 {
		rate = 0.5
	}
	np := rapid.IntRange(1, 30).Draw(t, "publishers")
	tp := Topic{Name: "t", Rate: rate, Burst: rapid.Int64Range(int64(nb), 5000).Draw(t, "burst")}
	for j := 0; j < np; j++ {
		g := rapid.IntRange(0, 3).Draw(t, "group")
		tp.Publishers = append(tp.Publishers, Publisher{
			Name: fmt.Sprintf("p%d", j), Rate: rapid.Float64Range(0.1, 100).Draw(t, "prate"),
			Batch: 1, Group: []string{"", "a", "b", "c"}[g],
		})
	}
	return tp
}

// TestPlanProperties: for random brokers and topics, every policy's
// sub-buckets sum exactly to (r, b) and stay within rcap; concentration uses
// the fewest brokers possible; max-min's smallest share is at least
// concentration's; an impossible topic is an error naming its rate.
func TestPlanProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		brokers := genBrokers(t)
		var total float64
		rcaps := []float64{}
		for _, b := range brokers {
			total += b.RCap()
			rcaps = append(rcaps, b.RCap())
		}
		topic := genTopic(t, math.Max(total, 1), len(brokers))
		plans := map[Policy]PlanResult{}
		for _, pol := range []Policy{Concentration, MaxMin, LoadBalance} {
			p, err := Plan(brokers, topic, pol)
			if topic.Rate > total*(1+1e-9) { // rcap is read with 1e-12 float slack
				if err == nil || !strings.Contains(err.Error(), "exceeds the total residual capacity") {
					t.Fatalf("rate %v above total rcap %v: err %v", topic.Rate, total, err)
				}
				return
			}
			if err != nil && topic.Rate > total {
				return
			}
			if err != nil {
				// Only the unit flooring of rcap may refuse a topic that fits
				// by a hair (less than one unit per broker).
				r, units, _, _ := topicUnits(topic.Rate, topic.Burst)
				unit := r.PerSec() / float64(units)
				if topic.Rate > total-float64(len(brokers))*unit && strings.Contains(err.Error(), "split resolution") {
					return
				}
				t.Fatalf("%s: %v", pol, err)
			}
			checkPlan(t, brokers, topic, p)
			plans[pol] = p
		}
		// Fewest brokers: no k-1 brokers cover the rate (allowing the unit
		// flooring of one unit per broker).
		sort.Sort(sort.Reverse(sort.Float64Slice(rcaps)))
		k := len(plans[Concentration].Shares)
		var top float64
		for _, c := range rcaps[:k-1] {
			top += c
		}
		r, units, _, _ := topicUnits(topic.Rate, topic.Burst)
		unit := r.PerSec() / float64(units)
		if top >= topic.Rate+float64(k)*unit {
			t.Fatalf("concentration uses %d brokers but the top %d rcaps %v cover rate %v", k, k-1, rcaps[:k-1], topic.Rate)
		}
		if len(plans[MaxMin].Shares) != k {
			t.Fatalf("maxmin uses %d brokers, concentration %d", len(plans[MaxMin].Shares), k)
		}
		if minShare(plans[MaxMin]).Cmp(minShare(plans[Concentration])) < 0 {
			t.Fatalf("maxmin smallest share %v < concentration's %v", minShare(plans[MaxMin]), minShare(plans[Concentration]))
		}
		if len(plans[LoadBalance].Shares) < k {
			t.Fatalf("lb uses %d brokers < %d", len(plans[LoadBalance].Shares), k)
		}
	})
}

// TestCorrelationAware: with equal-rate publishers, each broker receives each
// correlation group in proportion to the group's size (less than 2
// publishers off), SRTM §4.3.
func TestCorrelationAware(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nb := rapid.IntRange(1, 6).Draw(t, "brokers")
		var brokers []Broker
		for i := 0; i < nb; i++ {
			brokers = append(brokers, Broker{Name: fmt.Sprintf("b%d", i), MCap: 1000})
		}
		sizes := rapid.SliceOfN(rapid.IntRange(1, 20), 1, 4).Draw(t, "sizes")
		topic := Topic{Name: "t", Rate: float64(rapid.IntRange(1, nb*1000).Draw(t, "rate")), Burst: 100}
		N := 0
		for g, s := range sizes {
			for i := 0; i < s; i++ {
				topic.Publishers = append(topic.Publishers, Publisher{Name: fmt.Sprintf("g%d-%d", g, i), Rate: 1, Group: fmt.Sprint("g", g)})
				N++
			}
		}
		p, err := Plan(brokers, topic, LoadBalance)
		if err != nil {
			t.Fatal(err)
		}
		checkPlan(t, brokers, topic, p)
		for _, sh := range p.Shares {
			count := map[string]int{}
			for _, pub := range sh.Publishers {
				count[pub.Group]++
			}
			for g, s := range sizes {
				want := float64(s) * float64(len(sh.Publishers)) / float64(N)
				if got := float64(count[fmt.Sprint("g", g)]); math.Abs(got-want) >= 2 {
					t.Fatalf("broker %s: %v of group g%d (size %d), want about %.2f of its %d publishers", sh.Broker, got, g, s, want, len(sh.Publishers))
				}
			}
		}
	})
}

func TestPlanExample(t *testing.T) {
	brokers, err := LoadBrokers("testdata/brokers.yaml")
	if err != nil {
		t.Fatal(err)
	}
	topic, err := LoadTopic("testdata/topic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	wantK := map[Policy]int{Concentration: 2, MaxMin: 2, LoadBalance: 4}
	for _, pol := range []Policy{Concentration, MaxMin, LoadBalance} {
		p, err := Plan(brokers, topic, pol)
		if err != nil {
			t.Fatal(err)
		}
		checkPlan(t, brokers, topic, p)
		if len(p.Shares) != wantK[pol] {
			t.Errorf("%s: %d brokers, want %d", pol, len(p.Shares), wantK[pol])
		}
		for _, sh := range p.Shares {
			var names []string
			for _, pub := range sh.Publishers {
				names = append(names, pub.Name)
			}
			t.Logf("%-13s %s rcap=%v r_l=%v b_l=%d publishers(%v msg/s)=%v", pol, sh.Broker, sh.RCap, sh.Rate, sh.Burst, sh.PublisherRate, names)
		}
	}
	// Concentration fills broker-4 (rcap 10000) then broker-2 (8000) with
	// the remaining 2000; max-min gives both 6000.
	c, _ := Plan(brokers, topic, Concentration)
	m, _ := Plan(brokers, topic, MaxMin)
	if c.Shares[0].Rate.PerSec() != 10000 || c.Shares[1].Rate.PerSec() != 2000 {
		t.Errorf("concentration shares %v, %v", c.Shares[0].Rate, c.Shares[1].Rate)
	}
	if m.Shares[0].Rate.PerSec() != 6000 || m.Shares[1].Rate.PerSec() != 6000 {
		t.Errorf("maxmin shares %v, %v", m.Shares[0].Rate, m.Shares[1].Rate)
	}
}

func TestPlanErrors(t *testing.T) {
	ok := []Broker{{Name: "a", MCap: 100}, {Name: "b", MCap: 50, Load: 20}}
	pubs := []Publisher{{Name: "p", Rate: 10}}
	for _, tc := range []struct {
		brokers []Broker
		topic   Topic
		policy  Policy
		want    string
	}{
		{ok, Topic{Rate: 200, Burst: 10, Publishers: pubs}, "", "rate 200 msg/s exceeds the total residual capacity 130 msg/s of 2 brokers (largest rcap 100 msg/s)"},
		{ok, Topic{Rate: 10, Burst: 10, Publishers: pubs}, "fair", "policy \"fair\""},
		{nil, Topic{Rate: 10, Burst: 10, Publishers: pubs}, "", "brokers: none"},
		{[]Broker{{Name: "a", MCap: -1}}, Topic{Rate: 10, Burst: 10, Publishers: pubs}, "", "brokers[0].mcap"},
		{[]Broker{{Name: "a", MCap: 1, Load: math.NaN()}}, Topic{Rate: 10, Burst: 10, Publishers: pubs}, "", "brokers[0].load"},
		{[]Broker{{Name: "a", MCap: 1}, {Name: "a", MCap: 1}}, Topic{Rate: 1, Burst: 10, Publishers: pubs}, "", "brokers[1].name"},
		{ok, Topic{Rate: 0, Burst: 10, Publishers: pubs}, "", "topic.rate"},
		{ok, Topic{Rate: 10, Burst: 0, Publishers: pubs}, "", "topic.burst"},
		{ok, Topic{Rate: 10, Burst: 10}, "", "topic.publishers: none"},
		{ok, Topic{Rate: 10, Burst: 10, Publishers: []Publisher{{Name: "p", Rate: -1}}}, "", "topic.publishers[0].rate"},
		{ok, Topic{Rate: 10, Burst: 10, Publishers: []Publisher{{Name: "p", Rate: 1}, {Name: "p", Rate: 1}}}, "", "topic.publishers[1].name"},
		{ok, Topic{Rate: 120, Burst: 1, Publishers: pubs}, "", "burst 1 is smaller than the 2 brokers"},
	} {
		_, err := Plan(tc.brokers, tc.topic, tc.policy)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err %v, want it to contain %q", err, tc.want)
		}
	}
}

// utilModel is a stand-in broker model for Fit: p99 = 1 ms / (1 - u), u the
// broker's utilization with the topic's publishers added at their rates.
func utilModel(calls *int) P99Func {
	return func(b Broker, pubs []Publisher) (time.Duration, error) {
		*calls++
		load := b.Load
		for _, p := range pubs {
			load += p.Rate
		}
		u := load / b.MCap
		if u >= 1 {
			return time.Hour, nil
		}
		return time.Duration(float64(time.Millisecond) / (1 - u)), nil
	}
}

func TestFit(t *testing.T) {
	// rcap says 3 brokers fit 12000 msg/s, but the SLO (5 ms = 80%
	// utilization) does not: fitting sheds publishers to a fourth broker.
	brokers := []Broker{{Name: "a", MCap: 10000, Load: 4000}, {Name: "b", MCap: 10000, Load: 4000}, {Name: "c", MCap: 10000}, {Name: "d", MCap: 10000, Load: 5000}}
	topic := Topic{Name: "t", Rate: 12000, Burst: 100, SLO: 5 * time.Millisecond}
	for i := 0; i < 24; i++ {
		topic.Publishers = append(topic.Publishers, Publisher{Name: fmt.Sprint("p", i), Rate: 500, Group: fmt.Sprint("g", i%3)})
	}
	calls := 0
	res, err := Fit(brokers, topic, MaxMin, utilModel(&calls))
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, []Broker{{Name: "a", MCap: 1e9}, {Name: "b", MCap: 1e9}, {Name: "c", MCap: 1e9}, {Name: "d", MCap: 1e9}}, topic, res.Plan)
	m := utilModel(new(int))
	byName := map[string]Broker{}
	for _, b := range brokers {
		byName[b.Name] = b
	}
	for _, sh := range res.Plan.Shares {
		d, _ := m(byName[sh.Broker], sh.Publishers)
		if d > topic.SLO {
			t.Errorf("broker %s: p99 %v above the SLO with %d publishers", sh.Broker, d, len(sh.Publishers))
		}
	}
	if res.Iterations < 2 || len(res.Full) == 0 {
		t.Errorf("expected shedding: %d iterations, full %v", res.Iterations, res.Full)
	}
	t.Logf("fit: %d iterations, %d measurements, full %v, steps %+v", res.Iterations, calls, res.Full, res.Steps)

	// Brokers a and b cover 12000 msg/s by rcap but not under the SLO:
	// fitting sheds, then runs out of brokers.
	_, err = Fit(brokers[:2], topic, MaxMin, utilModel(new(int)))
	if err == nil {
		t.Fatal("want an error when the brokers run out")
	}
	if !strings.Contains(err.Error(), "ran out of brokers") {
		t.Errorf("err %v", err)
	}
	if _, err := Fit(brokers, Topic{Name: "t", Rate: 1, Burst: 1, Publishers: topic.Publishers[:1]}, "", utilModel(new(int))); err == nil || !strings.Contains(err.Error(), "topic.slo") {
		t.Errorf("no SLO: err %v", err)
	}
}

// TestFitProperties: on random brokers under the utilization model, Fit
// either places every publisher on brokers that meet the SLO, with exact
// sub-bucket sums, or reports running out of brokers.
func TestFitProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		brokers := genBrokers(t)
		for i := range brokers {
			brokers[i].MCap += 1 // the model divides by it
		}
		var total float64
		for _, b := range brokers {
			total += b.RCap()
		}
		topic := genTopic(t, math.Max(total, 1), len(brokers))
		topic.SLO = time.Duration(rapid.Int64Range(int64(1500*time.Microsecond), int64(20*time.Millisecond)).Draw(t, "slo"))
		calls := 0
		res, err := Fit(brokers, topic, MaxMin, utilModel(&calls))
		if err != nil {
			if !strings.Contains(err.Error(), "ran out of brokers") {
				t.Fatal(err)
			}
			return
		}
		big := make([]Broker, len(brokers))
		byName := map[string]Broker{}
		for i, b := range brokers {
			big[i] = Broker{Name: b.Name, MCap: 1e12}
			byName[b.Name] = b
		}
		checkPlan(t, big, topic, res.Plan)
		m := utilModel(new(int))
		for _, sh := range res.Plan.Shares {
			if d, _ := m(byName[sh.Broker], sh.Publishers); d > topic.SLO {
				t.Fatalf("broker %s: p99 %v above the SLO %v", sh.Broker, d, topic.SLO)
			}
		}
		if res.Iterations > len(brokers) {
			t.Fatalf("%d iterations for %d brokers", res.Iterations, len(brokers))
		}
	})
}
