package srtm

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// countModel is a stand-in broker model for Fit: p99 = per * (the number of
// publishers at the broker), whatever the broker's capacity.
func countModel(per time.Duration, calls *int) P99Func {
	return func(b Broker, pubs []Publisher) (time.Duration, error) {
		*calls++
		return per * time.Duration(len(pubs)), nil
	}
}

func countTopic(n int, group func(i int) string) Topic {
	t := Topic{Name: "t", Rate: float64(n), Burst: int64(n), SLO: 6500 * time.Microsecond}
	for i := range n {
		t.Publishers = append(t.Publishers, Publisher{Name: fmt.Sprint("p", i), Rate: 1, Group: group(i)})
	}
	return t
}

// Footnote 11 (SRTM 000 §6.5): the search stops at the first measurement
// within 20% below the SLO; StopWithin = 0 searches to the boundary.
func TestFitStopRule(t *testing.T) {
	brokers := []Broker{{Name: "a", MCap: 1e6}, {Name: "b", MCap: 1e5}}
	topic := countTopic(100, func(int) string { return "" })
	// 0.1 ms per publisher, SLO 6.5 ms: the boundary is 65 publishers.
	// The search measures 50 (5.0 ms, below 5.2 ms: go on), 75 (7.5 ms:
	// violates), 62 (6.2 ms: within 20% below the SLO, stop).
	calls := 0
	res, err := Fit(brokers, topic, MaxMin, countModel(100*time.Microsecond, &calls))
	if err != nil {
		t.Fatal(err)
	}
	st := res.Steps[0]
	if st.Broker != "a" || st.Kept != 62 || st.KeptP99 != 6200*time.Microsecond || st.Rounds != 4 || !st.Full {
		t.Errorf("footnote 11: first step %+v, want broker a keeping 62 at 6.2ms after 4 rounds", st)
	}
	if got := res.Rounds(); len(got) != 2 || got[0] != 4 || got[1] != 1 {
		t.Errorf("rounds per iteration %v, want [4 1]", got)
	}
	exact, err := FitWith(brokers, topic, MaxMin, countModel(100*time.Microsecond, new(int)), FitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st := exact.Steps[0]; st.Kept != 65 || st.KeptP99 != topic.SLO || st.Rounds <= 4 {
		t.Errorf("exact search: first step %+v, want 65 kept at the SLO in more than 4 rounds", st)
	}
	for _, w := range []float64{-0.1, 1, 2} {
		if _, err := FitWith(brokers, topic, MaxMin, countModel(time.Microsecond, new(int)), FitOptions{StopWithin: w}); err == nil || !strings.Contains(err.Error(), "stop-within") {
			t.Errorf("StopWithin %v: err %v", w, err)
		}
	}
}

// The shed search keeps every correlation group in the same proportion.
func TestFitKeepsGroupsInProportion(t *testing.T) {
	brokers := []Broker{{Name: "a", MCap: 1e6}, {Name: "b", MCap: 1e5}, {Name: "c", MCap: 1e5}}
	// 3 groups of 4: 1 ms per publisher, SLO 6.5 ms: level 2 (6 publishers,
	// two of each group) is the most the first broker keeps.
	topic := countTopic(12, func(i int) string { return fmt.Sprint("g", i%3) })
	topic.SLO = 6500 * time.Microsecond
	res, err := FitWith(brokers, topic, "", countModel(time.Millisecond, new(int)), FitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Plan.Policy != MaxMin {
		t.Errorf("default policy %q, want %q", res.Plan.Policy, MaxMin)
	}
	for _, sh := range res.Plan.Shares {
		per := map[string]int{}
		for _, p := range sh.Publishers {
			per[p.Group]++
		}
		if len(per) != 3 || per["g0"] != per["g1"] || per["g1"] != per["g2"] {
			t.Errorf("broker %s keeps groups unevenly: %v", sh.Broker, per)
		}
	}
	if st := res.Steps[0]; st.Kept != 6 {
		t.Errorf("first step %+v, want 6 kept", st)
	}
}
