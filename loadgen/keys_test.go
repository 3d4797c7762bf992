package loadgen

import (
	"context"
	"math"
	mrand "math/rand/v2"
	"slices"
	"testing"
	"time"
)

// WindowExcess on a hand-made log: r = 10/s, b = 5, T = 1s, so a key may
// be admitted 15 tokens per window.
func TestWindowExcess(t *testing.T) {
	var adm []Admission
	add := func(key string, at time.Duration, n int, tokens int64) {
		for range n {
			adm = append(adm, Admission{At: at, Key: key, Tokens: tokens})
		}
	}
	ms := time.Millisecond
	add("a", 500*ms, 15, 1)  // window 0: 15, exactly the bound
	add("a", 1500*ms, 18, 1) // window 1: 18, 3 above
	add("b", 200*ms, 5, 4)   // window 0: 20 tokens in 5 checks, 5 above
	add("c", 100*ms, 10, 1)  // within, every window
	add("c", 2100*ms, 15, 1)
	add("d", 2999*ms, 15, 1) // 15 at the end of window 2 and 15 at the start of window 3:
	add("d", 3000*ms, 15, 1) // within the fixed windows, 25 above b + r*T' over [2.999, 3.0]
	rev := slices.Clone(adm)
	slices.Reverse(rev) // the order does not matter
	for _, log := range [][]Admission{adm, rev} {
		before := slices.Clone(log)
		e := WindowExcess(log, 10, 5, time.Second)
		if e.Window != time.Second || e.Worst != 5 || e.Sum != 8 || e.Keys != 2 {
			t.Errorf("worst %v sum %v keys %d window %v: want worst 5 (b), sum 8 (3 + 5), 2 keys", e.Worst, e.Sum, e.Keys, e.Window)
		}
		// sliding: a over [0.5s, 1.5s] is 33 - 5 - 10 = 18; b 20 - 5 = 15;
		// d over [2.999s, 3s] 30 - 5 - 0.01 = 24.99
		if math.Abs(e.Sliding-24.99) > 1e-6 {
			t.Errorf("sliding %v, want 24.99", e.Sliding)
		}
		if !slices.Equal(log, before) {
			t.Error("the log was reordered")
		}
	}
	// within the bound: zero; the windows are floored (a time before the
	// start is window -1, not 0)
	if e := WindowExcess(adm[:15], 10, 5, time.Second); e.Worst != 0 || e.Sum != 0 || e.Keys != 0 || e.Sliding != 10 {
		t.Errorf("15 of a at one instant: %+v, want no excess in the window, 10 (15 - b) sliding", e)
	}
	var split []Admission
	add2 := func(at time.Duration, n int) {
		for range n {
			split = append(split, Admission{At: at, Key: "x", Tokens: 1})
		}
	}
	add2(-100*ms, 10)
	add2(100*ms, 10)
	if e := WindowExcess(split, 10, 5, time.Second); e.Worst != 0 {
		t.Errorf("10 at -0.1s and 10 at 0.1s in windows -1 and 0: worst %v, want 0", e.Worst)
	}
	if e := WindowExcess(adm, 10, 5, 0); e.Worst != 0 || e.Sum != 0 || e.Sliding != 0 {
		t.Errorf("window 0: %+v", e)
	}
	if e := WindowExcess(nil, 10, 5, time.Second); e != (Excess{Window: time.Second}) {
		t.Errorf("no admissions: %+v", e)
	}
}

func TestZipfCDF(t *testing.T) {
	cdf := ZipfCDF(5, 1)
	h := 1 + 1.0/2 + 1.0/3 + 1.0/4 + 1.0/5
	want := []float64{1 / h, 1.5 / h, (1.5 + 1.0/3) / h, (1.5 + 1.0/3 + 0.25) / h, 1}
	for i := range want {
		if math.Abs(cdf[i]-want[i]) > 1e-12 {
			t.Errorf("cdf %v, want %v", cdf, want)
			break
		}
	}
	if c := ZipfCDF(1, 1.1); len(c) != 1 || c[0] != 1 {
		t.Errorf("one key: %v", c)
	}
}

// The Zipf picker draws key 0 with probability 1/H(n, s), and keys in
// decreasing frequency; ZipfS 0 is uniform.
func TestKeyPickerZipf(t *testing.T) {
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9"}
	p := newKeyPicker(keys, 1.1)
	rng := mrand.New(mrand.NewPCG(7, 8))
	const draws = 200_000
	n := map[string]int{}
	for range draws {
		n[p.pick(rng)]++
	}
	h := 0.0
	for k := 1; k <= 10; k++ {
		h += math.Pow(float64(k), -1.1)
	}
	if got, want := float64(n["k0"])/draws, 1/h; math.Abs(got-want) > 0.01 {
		t.Errorf("key 0 drawn %.4f of the time, want %.4f", got, want)
	}
	if !(n["k0"] > n["k1"] && n["k1"] > n["k4"] && n["k4"] > n["k9"] && n["k9"] > 0) {
		t.Errorf("counts %v: not decreasing", n)
	}
	if u := newKeyPicker(keys, 0); u.cdf != nil {
		t.Error("ZipfS 0 built a cdf")
	}
	if (&Options{Targets: []string{"a:1"}, Rule: "r", Concurrency: 1, Batch: 1, Keys: 1, Duration: 1, ZipfS: -1}).Validate() == nil {
		t.Error("ZipfS -1 accepted")
	}
	if (&Options{Targets: []string{"a:1"}, Rule: "r", Concurrency: 1, Batch: 1, Keys: 1, Duration: 1, ZipfS: math.NaN()}).Validate() == nil {
		t.Error("ZipfS NaN accepted")
	}
}

// RecordAdmissions lists every admitted check, of the keys drawn, within
// the measured time, for each API; an exact single node keeps b + r*T.
func TestRecordAdmissions(t *testing.T) {
	tokens := func(adm []Admission) (n int64) {
		for _, a := range adm {
			n += a.Tokens
		}
		return n
	}
	addr := serve(t, 100, 10)
	res, err := Run(context.Background(), Options{Targets: []string{addr}, Rule: "api", Concurrency: 4, Batch: 2,
		Keys: 3, ZipfS: 1.1, Duration: 400 * time.Millisecond, Warmup: 50 * time.Millisecond, RecordAdmissions: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Refused == 0 || tokens(res.Admissions) != res.Allowed || int64(len(res.Admissions)) != res.Allowed {
		t.Fatalf("%d admissions (%d tokens) for %d allowed, %d refused", len(res.Admissions), tokens(res.Admissions), res.Allowed, res.Refused)
	}
	for _, a := range res.Admissions {
		if a.At < 0 || a.At > res.Elapsed+time.Second || (a.Key != "k0" && a.Key != "k1" && a.Key != "k2") {
			t.Fatalf("admission %+v (elapsed %v)", a, res.Elapsed)
		}
	}
	// one bucket per key, decided by one node: within b + r*T, but for a
	// token the answer's latency moves across a window's edge
	if e := WindowExcess(res.Admissions, 100, 10, 100*time.Millisecond); e.Worst > 1 {
		t.Errorf("one exact node: %+v", e)
	}
	// Answered: every decided check, admitted or refused, the warmup's
	// with At < 0; the measured ones match the counts
	var measured, admitted int64
	for _, a := range res.Answered {
		if a.At >= 0 {
			measured++
			if a.Admitted {
				admitted++
			}
		}
	}
	if measured != res.Allowed+res.Refused || admitted != res.Allowed || int64(len(res.Answered)) <= measured {
		t.Errorf("answered: %d (%d measured, %d admitted) for %d allowed, %d refused, and the warmup's", len(res.Answered), measured, admitted, res.Allowed, res.Refused)
	}
	// one exact node against the exact replay on the load generator's
	// clock: a few tokens of timing (what moves across a refill while an
	// answer travels; generous for a loaded machine), no more
	s, err := Shortfall(res.Answered, 100, 10)
	t.Logf("one exact node against the exact replay: %+v", s)
	if err != nil || s.Exact == 0 || float64(s.Missed+s.Extra) > 3+0.25*float64(s.Exact) {
		t.Errorf("one exact node: %+v, %v", s, err)
	}
	if r, err := Run(context.Background(), Options{Targets: []string{addr}, Rule: "api", Concurrency: 2, Batch: 1,
		Keys: 3, Duration: 100 * time.Millisecond}); err != nil || r.Admissions != nil {
		t.Errorf("without RecordAdmissions: %d admissions, %v", len(r.Admissions), err)
	}

	_, gaddr := serveGubernator(t)
	g, err := Run(context.Background(), Options{Targets: []string{gaddr}, API: APIGubernator, Rule: "g",
		Gubernator: &GubernatorRule{Limit: 20, Duration: time.Hour}, Concurrency: 2, Batch: 5, HotKey: true,
		Duration: 5 * time.Second, MaxRPCs: 10, RecordAdmissions: true})
	if err != nil {
		t.Fatal(err)
	}
	if g.Allowed != 20 || len(g.Admissions) != 20 || g.Admissions[0].Key != "k0" {
		t.Errorf("gubernator: %d allowed, admissions %v", g.Allowed, g.Admissions)
	}

	raddr := serveRLS(t, 20)
	r, err := Run(context.Background(), Options{Targets: []string{raddr}, API: APIRLS, Domain: "d", DescriptorKey: "ip",
		Concurrency: 2, Batch: 5, HotKey: true, Duration: 5 * time.Second, MaxRPCs: 10, RecordAdmissions: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Allowed != 20 || len(r.Admissions) != 20 || r.Admissions[0].Key != "k0" {
		t.Errorf("rls: %d allowed, admissions %v", r.Allowed, r.Admissions)
	}
}
