package bucket

import (
	"cmp"
	"errors"
	"math/big"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// refBucket is the reference model: the token bucket of SRTM Appendix A in
// exact rational arithmetic, written as plainly as possible.
type refBucket struct {
	rate  *big.Rat // tokens per nanosecond
	burst *big.Rat
	level *big.Rat
	last  time.Duration
}

func newRef(r Rate, burst int64, now time.Duration) *refBucket {
	rate := new(big.Rat)
	if r.Tokens > 0 {
		rate.SetFrac64(r.Tokens, int64(r.Per))
	}
	b := new(big.Rat).SetInt64(burst)
	return &refBucket{rate: rate, burst: b, level: new(big.Rat).Set(b), last: now}
}

func (r *refBucket) advance(now time.Duration) {
	if now <= r.last {
		return
	}
	add := new(big.Rat).Mul(r.rate, new(big.Rat).SetInt64(int64(now-r.last)))
	r.level.Add(r.level, add)
	if r.level.Cmp(r.burst) > 0 {
		r.level.Set(r.burst)
	}
	r.last = now
}

func (r *refBucket) allow(now time.Duration, n int64) bool {
	r.advance(now)
	need := new(big.Rat).SetInt64(n)
	if need.Cmp(r.burst) > 0 || r.level.Cmp(need) < 0 {
		return false
	}
	r.level.Sub(r.level, need)
	return true
}

// reserve returns the exact (rational) delay in ns until n tokens are there.
func (r *refBucket) reserve(now time.Duration, n int64) (*big.Rat, bool) {
	r.advance(now)
	need := new(big.Rat).SetInt64(n)
	if need.Cmp(r.burst) > 0 {
		return nil, false
	}
	deficit := new(big.Rat).Sub(need, r.level)
	if deficit.Sign() <= 0 {
		r.level.Sub(r.level, need)
		return new(big.Rat), true
	}
	if r.rate.Sign() == 0 {
		return nil, false
	}
	exact := new(big.Rat).Quo(deficit, r.rate)
	// The request proceeds at the whole nanosecond after exact: a bucket
	// full before then loses the refill beyond the burst meanwhile
	// (ReserveN's cap; without it the next reservations would proceed up
	// to 1 ns early, above b + r*T).
	ceilNs := new(big.Int).Quo(new(big.Int).Add(exact.Num(), new(big.Int).Sub(exact.Denom(), big.NewInt(1))), exact.Denom())
	limit := new(big.Rat).Sub(r.burst, new(big.Rat).Mul(r.rate, new(big.Rat).SetInt(ceilNs)))
	if r.level.Cmp(limit) > 0 {
		r.level.Set(limit)
	}
	r.level.Sub(r.level, need)
	return exact, true
}

func genRate(t *rapid.T) Rate {
	return Rate{
		Tokens: rapid.Int64Range(0, 1000).Draw(t, "tokens"),
		Per:    time.Duration(rapid.Int64Range(1, 100_000).Draw(t, "per_ms")) * time.Millisecond,
	}
}

// TestAllowMatchesReference: AllowN takes exactly the decisions of the exact
// reference model, on random rates, bursts, request sizes and arrival times.
func TestAllowMatchesReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := genRate(t)
		burst := rapid.Int64Range(0, 200).Draw(t, "burst")
		b := MustNew(r, burst, 0)
		ref := newRef(r, burst, 0)
		now := time.Duration(0)
		steps := rapid.IntRange(1, 300).Draw(t, "steps")
		for i := 0; i < steps; i++ {
			now += time.Duration(rapid.Int64Range(0, int64(5*time.Second)).Draw(t, "dt"))
			n := rapid.Int64Range(1, 12).Draw(t, "n")
			got, want := b.AllowN(now, n), ref.allow(now, n)
			if got != want {
				t.Fatalf("step %d at %v, n=%d: AllowN=%v, reference=%v (rate %v burst %d)", i, now, n, got, want, r, burst)
			}
		}
	})
}

// TestEnvelope: over every interval [t, t+T] the admitted tokens stay within
// b + r*T (SRTM §1.1), whatever the arrival pattern, including calls whose
// time goes backwards (late decisions): each admission counted at its own
// time (AllowN's now; ReserveN's now + delay, when the request proceeds).
func TestEnvelope(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := genRate(t)
		burst := rapid.Int64Range(1, 50).Draw(t, "burst")
		reserve := rapid.Bool().Draw(t, "reserve")
		// A bucket made at created, full since forever: calls may come
		// from before it (a late request older than the key's bucket).
		created := time.Duration(rapid.Int64Range(0, int64(3*time.Second)).Draw(t, "created"))
		b := MustNew(r, burst, created)
		type adm struct {
			at time.Duration
			n  int64
		}
		var admitted []adm
		now := time.Duration(0)
		for i := 0; i < 400; i++ {
			now += time.Duration(rapid.Int64Range(-int64(time.Second), int64(2*time.Second)).Draw(t, "dt"))
			if now < 0 {
				now = 0
			}
			n := rapid.Int64Range(1, 5).Draw(t, "n")
			if reserve && rapid.Bool().Draw(t, "wait") {
				if d, ok := b.ReserveN(now, n); ok {
					admitted = append(admitted, adm{now + d, n})
				}
			} else if b.AllowN(now, n) {
				admitted = append(admitted, adm{now, n})
			}
		}
		slices.SortFunc(admitted, func(a, b adm) int { return cmp.Compare(a.at, b.at) })
		// In ticks of 1/Per token: sum*Per <= burst*Per + Tokens*T.
		per := int64(r.Per)
		for i := range admitted {
			sum := int64(0)
			for j := i; j < len(admitted); j++ {
				sum += admitted[j].n
				T := int64(admitted[j].at - admitted[i].at)
				if reserve {
					T++ // proceed times are rounded up to the ns: a difference may be short by < 1 ns
				}
				if sum*per > burst*per+r.Tokens*T {
					t.Fatalf("admitted %d tokens in [%v, %v], above b + r*T = %d + %v*%v", sum, admitted[i].at, admitted[j].at, burst, r, time.Duration(T))
				}
			}
		}
	})
}

// TestLateDecision: a decision whose time is before the bucket's last
// update uses only the tokens the bucket is sure to have held since then
// (level less the refill since: conservative when the bucket was full in
// between); DelayN and ReserveN count the wait from that time.
func TestLateDecision(t *testing.T) {
	b := MustNew(Rate{Tokens: 1, Per: time.Second}, 2, 0) // 1/s, burst 2
	if !b.AllowN(0, 2) {
		t.Fatal("full bucket refused its burst")
	}
	b.AllowN(1800*time.Millisecond, 0) // advance: 1.8 tokens at 1.8 s
	// At 1.5 s the bucket held 1.5 tokens: a late request for 2 at 1.5 s
	// must be refused, one for 1 admitted (counted at 1.5 s).
	if b.AllowN(1500*time.Millisecond, 2) {
		t.Fatal("late request used tokens refilled after its time")
	}
	if d, ok := b.DelayN(1500*time.Millisecond, 2); !ok || d != 500*time.Millisecond {
		t.Fatalf("DelayN late = %v, %v; want 500ms (the 2 tokens are there at 2 s)", d, ok)
	}
	if !b.AllowN(1500*time.Millisecond, 1) {
		t.Fatal("late request refused a token held since its time")
	}
	// Now 0.8 tokens at 1.8 s: a late reservation of 2 at 1.6 s waits
	// until the 2 tokens are there, 1.2 s after 1.8 s: 1.4 s from 1.6 s.
	if d, ok := b.ReserveN(1600*time.Millisecond, 2); !ok || d != 1400*time.Millisecond {
		t.Fatalf("ReserveN late = %v, %v; want 1.4s", d, ok)
	}

	// A new bucket is full since forever: a late request older than the
	// bucket takes its burst. A lower merged copy's history is unknown.
	nb := MustNew(Rate{Tokens: 1, Per: time.Second}, 2, 10*time.Second)
	if !nb.AllowN(9*time.Second, 2) {
		t.Fatal("a request older than a new (full) bucket was refused its burst")
	}
	mb := MustNew(Rate{Tokens: 1, Per: time.Second}, 2, 10*time.Second)
	if err := mb.MergeLevel(1*int64(time.Second), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if mb.AllowN(9500*time.Millisecond, 1) {
		t.Fatal("after merging a copy at 1 token, a request 0.5 s late took a token (0.5 spared)")
	}
}

// TestReserveDelayExact: ReserveN's delay is the reference's exact delay
// rounded up to the nanosecond, and queued reservations stack FCFS.
func TestReserveDelayExact(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := genRate(t)
		burst := rapid.Int64Range(0, 30).Draw(t, "burst")
		b := MustNew(r, burst, 0)
		ref := newRef(r, burst, 0)
		now := time.Duration(0)
		for i := 0; i < 200; i++ {
			now += time.Duration(rapid.Int64Range(0, int64(time.Second)).Draw(t, "dt"))
			n := rapid.Int64Range(1, 6).Draw(t, "n")
			delay, ok := b.ReserveN(now, n)
			want, wantOK := ref.reserve(now, n)
			if ok != wantOK {
				t.Fatalf("step %d: ok=%v, reference %v", i, ok, wantOK)
			}
			if !ok {
				continue
			}
			ceil := new(big.Int).Quo(new(big.Int).Add(want.Num(), new(big.Int).Sub(want.Denom(), big.NewInt(1))), want.Denom())
			if ceil.Int64() != int64(delay) {
				t.Fatalf("step %d: delay %d ns, reference %s ns (exact %s)", i, delay, ceil, want.FloatString(3))
			}
		}
	})
}

func TestNoDriftOverLongRun(t *testing.T) {
	// 1 token per 3 s for ten years of one-request-per-3s traffic: every
	// request conforms, with no drift from a rounded emission interval.
	b := MustNew(Rate{Tokens: 1, Per: 3 * time.Second}, 1, 0)
	now := time.Duration(0)
	for i := 0; i < 10*365*24*1200; i++ {
		if !b.Allow(now) {
			t.Fatalf("request %d at %v refused", i, now)
		}
		now += 3 * time.Second
	}
	if b.Allow(now - time.Nanosecond) {
		t.Fatal("a request one nanosecond early conformed")
	}
}

func TestPerSecond(t *testing.T) {
	cases := []struct {
		in   float64
		want Rate
	}{
		{1, Rate{1, time.Second}},
		{100, Rate{100, time.Second}},
		{0.001, Rate{1, 1000 * time.Second}},
		{2.5, Rate{5, 2 * time.Second}},
		{0.1, Rate{1, 10 * time.Second}},
		{0, Rate{}},
	}
	for _, c := range cases {
		got, err := PerSecond(c.in)
		same := got.Tokens*int64(c.want.Per) == c.want.Tokens*int64(got.Per)
		if err != nil || !same || got.Validate() != nil {
			t.Errorf("PerSecond(%v) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []float64{-1, 1e13, 1e-9} {
		if _, err := PerSecond(bad); err == nil {
			t.Errorf("PerSecond(%v) gave no error", bad)
		}
	}
}

func TestDivAndSplitBurstSum(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := Rate{Tokens: rapid.Int64Range(1, 1000).Draw(t, "tok"), Per: time.Duration(rapid.Int64Range(1, 1000).Draw(t, "per")) * time.Millisecond}
		n := rapid.Int64Range(1, 64).Draw(t, "n")
		d, err := r.Div(n)
		if err != nil {
			t.Fatal(err)
		}
		// n * d == r exactly: Tokens_d * n / Per_d == Tokens_r / Per_r.
		lhs := new(big.Rat).SetFrac64(d.Tokens*n, int64(d.Per))
		rhs := new(big.Rat).SetFrac64(r.Tokens, int64(r.Per))
		if lhs.Cmp(rhs) != 0 {
			t.Fatalf("%v split %d ways is %v: sum %s != %s", r, n, d, lhs, rhs)
		}
		b := rapid.Int64Range(0, 1000).Draw(t, "b")
		sum := int64(0)
		for i := 0; i < int(n); i++ {
			s, err := SplitBurst(b, int(n), i)
			if err != nil {
				t.Fatal(err)
			}
			sum += s
		}
		if sum != b {
			t.Fatalf("burst %d split %d ways sums to %d", b, n, sum)
		}
	})
}

func TestSetRateKeepsTokensAndNeverCreates(t *testing.T) {
	b := MustNew(Rate{10, time.Second}, 10, 0)
	for i := 0; i < 7; i++ {
		b.Allow(0)
	}
	if err := b.SetRate(0, Rate{1, 3 * time.Second}, 20); err != nil {
		t.Fatal(err)
	}
	if got := b.Tokens(0); got != 3 {
		t.Fatalf("after SetRate the bucket holds %v tokens, want 3", got)
	}
	if err := b.SetRate(0, Rate{1, time.Second}, 2); err != nil {
		t.Fatal(err)
	}
	if got := b.Tokens(0); got != 2 {
		t.Fatalf("SetRate to burst 2 left %v tokens, want 2 (capped)", got)
	}
	if err := b.SetRate(0, Rate{-1, time.Second}, 2); err == nil {
		t.Fatal("negative rate accepted")
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New(Rate{1, time.Second}, -1, 0); err == nil {
		t.Error("negative burst accepted")
	}
	if _, err := New(Rate{1, 0}, 1, 0); err == nil {
		t.Error("zero period accepted")
	}
	if _, err := New(Rate{1, time.Second}, 1<<40, 0); !errors.Is(err, ErrBurstTooLarge) {
		t.Errorf("huge burst: %v, want ErrBurstTooLarge", err)
	}
}

func TestRequestAboveBurstNeverConforms(t *testing.T) {
	b := MustNew(Rate{1000, time.Second}, 5, 0)
	if b.AllowN(time.Hour, 6) {
		t.Fatal("6 tokens from a burst of 5")
	}
	if _, ok := b.ReserveN(time.Hour, 6); ok {
		t.Fatal("reserved 6 tokens from a burst of 5")
	}
	if !b.AllowN(time.Hour, 5) {
		t.Fatal("5 tokens from a full burst of 5 refused")
	}
}

func BenchmarkAllow(b *testing.B) {
	bk := MustNew(Rate{Tokens: 1000, Per: time.Second}, 100, 0)
	now := time.Duration(0)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		now += 700 * time.Microsecond
		bk.Allow(now)
	}
}

func BenchmarkReserve(b *testing.B) {
	bk := MustNew(Rate{Tokens: 1000, Per: time.Second}, 100, 0)
	now := time.Duration(0)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		now += time.Millisecond
		bk.ReserveN(now, 1)
	}
}

// SetRateKeepingDue: a reservation due in 1 s at 1 token/s is still due
// in 1 s after the rate doubles (the debt doubles; SetRate would repay it
// in 0.5 s), and after the rate halves the debt stays one token (2 s).
func TestSetRateKeepingDue(t *testing.T) {
	one := Rate{Tokens: 1, Per: time.Second}
	b := MustNew(one, 1, 0)
	b.AllowN(0, 1)
	if d, ok := b.ReserveN(0, 1); !ok || d != time.Second {
		t.Fatalf("reserve: %v %v, want 1s", d, ok)
	}
	up := b
	if err := up.SetRateKeepingDue(0, Rate{Tokens: 2, Per: time.Second}, 1); err != nil {
		t.Fatal(err)
	}
	if got := up.Tokens(0); got != -2 {
		t.Fatalf("doubled rate: level %v, want -2 (due at 1 s still)", got)
	}
	if d, _ := up.DelayN(0, 1); d != 1500*time.Millisecond {
		t.Fatalf("doubled rate: next token after %v, want 1.5s", d)
	}
	down := b
	if err := down.SetRateKeepingDue(0, Rate{Tokens: 1, Per: 2 * time.Second}, 1); err != nil {
		t.Fatal(err)
	}
	if got := down.Tokens(0); got != -1 {
		t.Fatalf("halved rate: level %v, want -1 (the debt in tokens)", got)
	}
	full := MustNew(one, 3, 0)
	if err := full.SetRateKeepingDue(0, Rate{Tokens: 5, Per: time.Second}, 2); err != nil || full.Tokens(0) != 2 {
		t.Fatalf("no debt: level %v (%v), want SetRate's 2", full.Tokens(0), err)
	}
}

// TestReserveEnvelopeExact: the reservations' proceed times (now + delay)
// keep b + r*T exactly, in integers, in every window: a reservation that
// takes the whole burst and proceeds at the nanosecond after the bucket
// held it loses the refill beyond the burst in that fraction of a
// nanosecond (ReserveN's cap). Without the cap, 1 token/333,333.3 ns with
// burst 1 proceeded 1 ns early at the third reservation (an excess of
// 3e-6 tokens).
func TestReserveEnvelopeExact(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := genRate(t)
		if r.Tokens == 0 {
			r.Tokens = 1
		}
		burst := rapid.Int64Range(1, 10).Draw(t, "burst")
		b := MustNew(r, burst, 0)
		type adm struct {
			at time.Duration
			n  int64
		}
		var adms []adm
		now := time.Duration(0)
		for range 60 {
			now += time.Duration(rapid.Int64Range(0, int64(r.Per)/int64(max(r.Tokens, 1))*3).Draw(t, "dt"))
			n := rapid.Int64Range(1, burst).Draw(t, "n")
			if d, ok := b.ReserveN(now, n); ok {
				adms = append(adms, adm{now + d, n})
			}
		}
		slices.SortStableFunc(adms, func(x, y adm) int { return int(x.at - y.at) })
		for i := range adms {
			var sum int64
			for j := i; j < len(adms); j++ {
				sum += adms[j].n
				// sum <= burst + Tokens*(T)/Per, in units of 1/Per tokens
				if lhs, rhs := sum*int64(r.Per), burst*int64(r.Per)+r.Tokens*int64(adms[j].at-adms[i].at); lhs > rhs {
					t.Fatalf("%d tokens proceeded in [%v, %v]: %d/%d tokens above b + r*T", sum, adms[i].at, adms[j].at, lhs-rhs, int64(r.Per))
				}
			}
		}
	})
}
