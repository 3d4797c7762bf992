package eval

import (
	"strings"
	"testing"

	"github.com/tokenmesh/tokenmesh/strategy"
)

func TestRecommend(t *testing.T) {
	rep := &Report{Results: []Result{
		{Strategy: "central", Admitted: 1000, Precision: ptr(1)},
		{Strategy: "owner", Admitted: 1000, Precision: ptr(1), FalseRejections: 2, BytesPerRequest: 40, DecisionLatencyP99Ms: 60},
		{Strategy: "lease", Admitted: 1000, Precision: ptr(1), FalseRejections: 4, BytesPerRequest: 30, DecisionLatencyP99Ms: 61},
		{Strategy: "static", Admitted: 400, Precision: ptr(3), FalseRejections: 600, BytesPerRequest: 0},
		{Strategy: "gcounter", Admitted: 1050, Precision: ptr(0.9), ExcessAdmittedPct: 5, EnvelopeViolationTokens: 9, BytesPerRequest: 100},
	}}
	params, err := strategy.ParseParams([]string{"lease.min_lease=2", "owner.hold=1ms"})
	if err != nil {
		t.Fatal(err)
	}
	b := Bounds{MaxExcessPct: 0.5, MaxFalseRejectionsPct: 0.5, MaxEnvelopeTokens: 1}
	rec := Recommend(rep, b, params)
	if rec.Strategy != "lease" || rec.Params != "min_lease=2" || !strings.Contains(rec.Line, "lease (min_lease=2) meets") {
		t.Fatalf("got %+v, want lease (cheapest within bounds)", rec)
	}
	// Bytes within bytesTie of the fewest are the same cost: the latency
	// decides (regionlease at 29.5 B/req and p99 62 ms loses to lease at
	// 30 and 61 ms; at 27 B/req, more than 5% fewer, it wins).
	rep.Results = append(rep.Results, Result{Strategy: "regionlease", Admitted: 1000, Precision: ptr(1), FalseRejections: 4,
		BytesPerRequest: 29.5, DecisionLatencyP99Ms: 62})
	if rec := Recommend(rep, b, params); rec.Strategy != "lease" {
		t.Fatalf("got %+v, want lease (bytes tied within 5%%, lower p99)", rec)
	}
	rep.Results[len(rep.Results)-1].BytesPerRequest = 27
	if rec := Recommend(rep, b, params); rec.Strategy != "regionlease" {
		t.Fatalf("got %+v, want regionlease (fewer bytes beyond the tie)", rec)
	}
	rep.Results = rep.Results[:len(rep.Results)-1]
	// A tighter false-rejection bound leaves owner (0.2%) only.
	b.MaxFalseRejectionsPct = 0.3
	if rec := Recommend(rep, b, params); rec.Strategy != "owner" || rec.Params != "hold=1ms" {
		t.Fatalf("got %+v, want owner", rec)
	}
	// Nothing meets a bound of 0.1%: owner (0.2%, twice the bound) is closest.
	b.MaxFalseRejectionsPct = 0.1
	rec = Recommend(rep, b, params)
	if rec.Strategy != "" || rec.Closest != "owner" || !strings.HasPrefix(rec.Line, "recommendation: none of owner, lease, static, gcounter meets") {
		t.Fatalf("got %+v, want none, closest owner", rec)
	}
	// A concurrency limit (permits, with its semaphore beside it) is not
	// measured against central's bucket: left out, and alone it is named.
	conc := Result{Strategy: "concurrency", Admitted: 5000, ExcessAdmittedPct: 400, Holds: &HoldStats{Permits: 900, Limit: 10}}
	rep.Results = append(rep.Results, conc)
	if rec := Recommend(rep, b, params); strings.Contains(rec.Line, "concurrency") {
		t.Errorf("a concurrency limit in the rate recommendation: %+v", rec)
	}
	rep.Results = []Result{rep.Results[0], conc}
	if rec := Recommend(rep, b, params); rec.Strategy != "" || !strings.Contains(rec.Line, "exact semaphore") {
		t.Errorf("concurrency alone: %+v, want no pick and the semaphore named", rec)
	}
}

// With a shortfall window the recommendation bounds the shortfall, not
// the false rejections, where both bounds are set: on an overloaded key a
// distributed scheme's false rejections are mostly requests that lost a
// race to the ones admitted in their stead.
func TestRecommendShortfall(t *testing.T) {
	short := func(v float64) *float64 { return &v }
	rep := &Report{Results: []Result{
		{Strategy: "central", Admitted: 1000, Precision: ptr(1), ShortfallPct: short(0)},
		{Strategy: "owner", Admitted: 1000, Precision: ptr(1), FalseRejections: 2, ShortfallPct: short(0.01), BytesPerRequest: 54},
		{Strategy: "regionlease", Admitted: 990, Precision: ptr(1), FalseRejections: 400, ShortfallPct: short(0.43), BytesPerRequest: 43},
	}}
	b := Bounds{MaxExcessPct: 0.5, MaxFalseRejectionsPct: 0.5, MaxEnvelopeTokens: 1}
	if rec := Recommend(rep, b, strategy.Params{}); rec.Strategy != "owner" || !strings.Contains(rec.Line, "false rejections <= 0.5% of central's admitted,") {
		t.Fatalf("no shortfall bound: %+v, want owner by false rejections", rec)
	}
	b.MaxShortfallPct = short(0.5)
	rec := Recommend(rep, b, strategy.Params{})
	if rec.Strategy != "regionlease" || !strings.Contains(rec.Line, "shortfall <= 0.5% of central's admitted tokens") ||
		!strings.Contains(rec.Line, "false rej. 40%, shortfall 0.43%") {
		t.Fatalf("shortfall bound 0.5%%: %+v, want regionlease (fewer bytes, within it)", rec)
	}
	b.MaxShortfallPct = short(0.3)
	rec = Recommend(rep, b, strategy.Params{})
	if rec.Strategy != "owner" {
		t.Fatalf("shortfall bound 0.3%%: %+v, want owner", rec)
	}
	b.MaxShortfallPct = short(0.001)
	rec = Recommend(rep, b, strategy.Params{})
	if rec.Strategy != "" || rec.Closest != "owner" {
		t.Fatalf("shortfall bound 0.001%%: %+v, want none, closest owner", rec)
	}
	if step := NoneMeetsStep(rec.Closest, b); !strings.Contains(step.Why, "--max-shortfall") || strings.Contains(step.Why, "--max-false-rejections") {
		t.Errorf("none meets, with a shortfall bound: %q, want --max-shortfall named", step.Why)
	}
	if step := NoneMeetsStep("owner", Bounds{}); !strings.Contains(step.Why, "--max-false-rejections") {
		t.Errorf("none meets, without: %q, want --max-false-rejections named", step.Why)
	}
}

func TestNotes(t *testing.T) {
	ran := []string{"central", "owner", "static", "gcounter"}
	if n := AssignNote("hash", 81.2, ran); !strings.Contains(n, "81.2% of the requests") || !strings.Contains(n, "FLATTERS") ||
		!strings.Contains(n, "(static, gcounter)") {
		t.Errorf("hash note %q, want it to flatter static and gcounter, the ones that ran", n)
	}
	if n := AssignNote("hash", 81.2, []string{"central", "owner", "lease"}); strings.Contains(n, "FLATTERS") || strings.Contains(n, "gcounter") {
		t.Errorf("hash note %q names strategies that did not run", n)
	}
	if n := AssignNote("roundrobin", 81.2, ran); strings.Contains(n, "FLATTERS") {
		t.Errorf("roundrobin note %q", n)
	}
	notes := PrecisionNotes(testReport())
	want := []string{"local rejects 0.25x what central rejects", "static rejects 30 requests where central rejects none"}
	if len(notes) != len(want) {
		t.Fatalf("notes %q", notes)
	}
	for i, w := range want {
		if !strings.HasPrefix(notes[i], w) {
			t.Errorf("note %q, want prefix %q", notes[i], w)
		}
	}
}
