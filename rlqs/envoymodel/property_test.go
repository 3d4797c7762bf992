package envoymodel

import (
	"fmt"
	"math/big"
	"testing"
	"time"

	rlqfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"pgregory.net/rapid"
)

var ids = []BucketID{
	NewBucketID(map[string]string{"name": "a"}),
	NewBucketID(map[string]string{"name": "b"}),
	NewBucketID(map[string]string{"name": "c", "env": "x"}),
}

func drawTokenBucket(t *rapid.T, label string) *typev3.RateLimitStrategy {
	interval := rapid.SampledFrom([]time.Duration{300 * time.Millisecond, time.Second, 1500 * time.Millisecond, 2 * time.Second, 10 * time.Second}).Draw(t, label+"_interval")
	return tokenBucket(uint32(rapid.IntRange(0, 20).Draw(t, label+"_max")), uint32(rapid.IntRange(0, 10).Draw(t, label+"_fill")), interval)
}

func drawStrategy(t *rapid.T, label string, tokenBuckets bool) *typev3.RateLimitStrategy {
	kinds := []string{"allow", "deny", "rptu", "none"}
	if tokenBuckets {
		kinds = append(kinds, "tb", "tb", "tb")
	}
	switch rapid.SampledFrom(kinds).Draw(t, label) {
	case "allow":
		return allowAll
	case "deny":
		return denyAll
	case "rptu":
		return rptu(5)
	case "tb":
		return drawTokenBucket(t, label)
	}
	return nil
}

func drawTTL(t *rapid.T, label string) *durationpb.Duration {
	if rapid.IntRange(0, 9).Draw(t, label+"_unset") == 0 {
		return nil
	}
	return dur(time.Duration(rapid.IntRange(0, 30_000).Draw(t, label+"_ms")) * time.Millisecond)
}

func drawSettings(t *rapid.T) *rlqfilterv3.RateLimitQuotaBucketSettings {
	if !rapid.Bool().Draw(t, "settings") {
		return nil
	}
	var timeout *durationpb.Duration
	if rapid.Bool().Draw(t, "timeout_set") {
		timeout = dur(time.Duration(rapid.IntRange(1, 20_000).Draw(t, "timeout_ms")) * time.Millisecond)
	}
	return settings(drawStrategy(t, "default", false), drawStrategy(t, "fallback", true), timeout)
}

// step is one call on a Proxy.
type step struct {
	op     string
	at     time.Duration
	id     BucketID
	action *rlqsv3.RateLimitQuotaResponse_BucketAction
}

func drawSteps(t *rapid.T) []step {
	var steps []step
	var now time.Duration
	for i := range rapid.IntRange(1, 80).Draw(t, "steps") {
		now += time.Duration(rapid.IntRange(0, 3000).Draw(t, fmt.Sprintf("dt%d", i))) * time.Millisecond
		s := step{
			op: rapid.SampledFrom([]string{"request", "request", "request", "apply", "apply", "tick", "report", "reset"}).Draw(t, fmt.Sprintf("op%d", i)),
			at: now,
			id: rapid.SampledFrom(ids).Draw(t, fmt.Sprintf("bucket%d", i)),
		}
		if s.op == "apply" {
			s.action = abandon(s.id)
			if rapid.IntRange(0, 4).Draw(t, fmt.Sprintf("abandon%d", i)) > 0 {
				s.action = assignment(s.id, drawStrategy(t, fmt.Sprintf("rule%d", i), true), drawTTL(t, fmt.Sprintf("ttl%d", i)))
			}
		}
		steps = append(steps, s)
	}
	return steps
}

// checkInvariants: no bucket holds more than max_tokens, and a bucket's
// phase, action and token bucket agree.
func checkInvariants(t *rapid.T, p *Proxy) {
	for k, b := range p.buckets {
		if (b.lim != nil) != (b.action.GetTokenBucket() != nil) {
			t.Fatalf("%s: token bucket %v for action %v", k, b.lim, b.action)
		}
		if (b.phase == NoAssignment) != (b.action == nil) {
			t.Fatalf("%s: phase %v with action %v", k, b.phase, b.action)
		}
		if l := b.lim; l != nil && !l.unlimited {
			if l.capacity.less(l.level) || l.capacity.less(l.levelAt(p.now+time.Hour)) {
				t.Fatalf("%s: level %v above capacity %v", k, l.level, l.capacity)
			}
		}
	}
}

// execute runs steps on a new Proxy and returns a transcript of everything
// it answered, checking the invariants after each step, and that every
// request is reported once or lost where Envoy loses it (an abandoned
// bucket's counts, an initial report while the stream is down).
func execute(t *rapid.T, s *rlqfilterv3.RateLimitQuotaBucketSettings, steps []step) string {
	p, err := New(Config{Domain: "d", Settings: s})
	if err != nil {
		t.Fatal(err)
	}
	var transcript []string
	var requests, reported, lost uint64
	count := func(r *rlqsv3.RateLimitQuotaUsageReports) {
		for _, u := range r.GetBucketQuotaUsages() {
			reported += u.GetNumRequestsAllowed() + u.GetNumRequestsDenied()
		}
		transcript = append(transcript, fmt.Sprint(r))
	}
	for _, s := range steps {
		switch s.op {
		case "request":
			p.Tick(s.at)
			_, existed := p.buckets[s.id.key]
			ok, initial := p.Request(s.at, s.id)
			requests++
			if !existed && initial == nil {
				lost++
			}
			count(initial)
			transcript = append(transcript, fmt.Sprint(ok))
		case "apply":
			p.Tick(s.at)
			if b, ok := p.buckets[s.id.key]; ok && s.action.GetAbandonAction() != nil {
				lost += b.allowed + b.denied
			}
			out, err := p.Apply(s.at, response(s.action))
			if err != nil {
				t.Fatal(err)
			}
			transcript = append(transcript, fmt.Sprint(out))
		case "tick":
			p.Tick(s.at)
		case "report":
			count(p.Report(s.at))
		case "reset":
			p.StreamReset(s.at)
		}
		checkInvariants(t, p)
	}
	pending := uint64(0)
	for _, b := range p.buckets {
		pending += b.allowed + b.denied
	}
	if requests != reported+lost+pending {
		t.Fatalf("%d requests: %d reported, %d lost, %d pending", requests, reported, lost, pending)
	}
	return fmt.Sprint(transcript, snapshot(p))
}

// Any sequence of calls keeps every token bucket within max_tokens and the
// phases consistent, counts every request once, and is deterministic.
func TestRandomOperationsProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := drawSettings(t)
		steps := drawSteps(t)
		if a, b := execute(t, s, steps), execute(t, s, steps); a != b {
			t.Fatalf("two runs differ:\n%s\n%s", a, b)
		}
	})
}

// ideal is an independent token bucket in exact rationals: tokens refill at
// rate per second up to max, a request takes one whole token.
type ideal struct {
	max, tokens, rate *big.Rat
	at                time.Duration
}

func (b *ideal) advance(now time.Duration) {
	dt := new(big.Rat).SetFrac64(int64(now-b.at), int64(time.Second))
	b.tokens.Add(b.tokens, dt.Mul(dt, b.rate))
	if b.tokens.Cmp(b.max) > 0 {
		b.tokens.Set(b.max)
	}
	b.at = now
}

func (b *ideal) take(now time.Duration) bool {
	b.advance(now)
	if b.tokens.Cmp(big.NewRat(1, 1)) < 0 {
		return false
	}
	b.tokens.Sub(b.tokens, big.NewRat(1, 1))
	return true
}

type tbParams struct {
	max, fill uint32
	seconds   int64
	nanos     int32
}

func drawParams(t *rapid.T, label string) tbParams {
	return tbParams{
		max:     uint32(rapid.IntRange(1, 30).Draw(t, label+"_max")),
		fill:    uint32(rapid.IntRange(1, 20).Draw(t, label+"_fill")),
		seconds: int64(rapid.IntRange(1, 5).Draw(t, label+"_seconds")),
		nanos:   int32(rapid.SampledFrom([]int{0, 0, 250_000_000, 999_999_999}).Draw(t, label+"_nanos")),
	}
}

func (tb tbParams) strategy() *typev3.RateLimitStrategy {
	return tokenBucket(tb.max, tb.fill, time.Duration(tb.seconds)*time.Second+time.Duration(tb.nanos))
}

func (tb tbParams) rate() *big.Rat { return big.NewRat(int64(tb.fill), tb.seconds) }

// An assignment held unchanged (renewed with identical ones) admits at most
// max_tokens + rate*T in any window of length T, and decides exactly as an
// ideal token bucket of rate tokens_per_fill / whole seconds does.
func TestUnchangedAssignmentEnvelopeProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tb := drawParams(t, "tb")
		p := newProxy(t, nil)
		p.Request(0, web)
		start := time.Duration(rapid.IntRange(0, 5000).Draw(t, "start_ms")) * time.Millisecond
		apply(t, p, start, assignment(web, tb.strategy(), dur(time.Hour)))
		ref := &ideal{max: big.NewRat(int64(tb.max), 1), tokens: big.NewRat(int64(tb.max), 1), rate: tb.rate(), at: start}
		var admitted []time.Duration
		now := start
		for i := range rapid.IntRange(1, 300).Draw(t, "requests") {
			now += time.Duration(rapid.IntRange(0, 700).Draw(t, fmt.Sprintf("dt%d", i))) * time.Millisecond
			if rapid.IntRange(0, 20).Draw(t, fmt.Sprintf("renew%d", i)) == 0 {
				if out := apply(t, p, now, assignment(web, tb.strategy(), dur(time.Hour))); out[0].Effect != RenewedTokenBucket {
					t.Fatalf("identical assignment: %v", out[0].Effect)
				}
			}
			ok, _ := p.Request(now, web)
			if want := ref.take(now); ok != want {
				t.Fatalf("request %d at %v: model %v, ideal bucket %v", i, now, ok, want)
			}
			if ok {
				admitted = append(admitted, now)
			}
		}
		perToken := tb.seconds * int64(time.Second) // ticks of a token, fill ticks a ns
		for i := range admitted {
			for j := i; j < len(admitted); j++ {
				n := int64(j - i + 1)
				if n*perToken > int64(tb.max)*perToken+int64(tb.fill)*int64(admitted[j]-admitted[i]) {
					t.Fatalf("%d admitted in [%v, %v]: above max_tokens %d + rate %d/%ds * T", n, admitted[i], admitted[j], tb.max, tb.fill, tb.seconds)
				}
			}
		}
	})
}

// A changed assignment starts at the old bucket's fill ratio, rounded down to
// whole tokens, and then refills at its own rate.
func TestChangedAssignmentKeepsFillRatioProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		old := drawParams(t, "old")
		next := drawParams(t, "new")
		if sameTokenBucket(old.strategy().GetTokenBucket(), next.strategy().GetTokenBucket()) {
			t.Skip("identical")
		}
		p := newProxy(t, nil)
		p.Request(0, web)
		apply(t, p, 0, assignment(web, old.strategy(), dur(time.Hour)))
		ref := &ideal{max: big.NewRat(int64(old.max), 1), tokens: big.NewRat(int64(old.max), 1), rate: old.rate()}
		now := time.Duration(0)
		for i := range rapid.IntRange(0, 40).Draw(t, "requests") {
			now += time.Duration(rapid.IntRange(0, 500).Draw(t, fmt.Sprintf("dt%d", i))) * time.Millisecond
			if ok, _ := p.Request(now, web); ok != ref.take(now) {
				t.Fatalf("request %d diverged from the ideal bucket", i)
			}
		}
		now += time.Duration(rapid.IntRange(0, 3000).Draw(t, "change_ms")) * time.Millisecond
		ref.advance(now)
		ratio := new(big.Rat).Quo(ref.tokens, ref.max)
		scaled := ratio.Mul(ratio, big.NewRat(int64(next.max), 1))
		want := new(big.Int).Quo(scaled.Num(), scaled.Denom()).Int64() // rounded down
		out := apply(t, p, now, assignment(web, next.strategy(), dur(time.Hour)))
		if out[0].Effect != ChangedTokenBucket {
			t.Fatalf("effect %v", out[0].Effect)
		}
		l := p.buckets[web.key].lim
		if l.level != l.perToken.mul(uint64(want)) {
			t.Fatalf("new bucket holds %v tokens, want %d = floor(%d * %s)", l.tokens(now), want, next.max, new(big.Rat).Quo(ref.tokens, ref.max).RatString())
		}
		ref = &ideal{max: big.NewRat(int64(next.max), 1), tokens: big.NewRat(want, 1), rate: next.rate(), at: now}
		for i := range rapid.IntRange(0, 40).Draw(t, "after") {
			now += time.Duration(rapid.IntRange(0, 500).Draw(t, fmt.Sprintf("after_dt%d", i))) * time.Millisecond
			if ok, _ := p.Request(now, web); ok != ref.take(now) {
				t.Fatalf("request %d after the change diverged from the ideal bucket", i)
			}
		}
	})
}

// An identical assignment (same max_tokens, tokens_per_fill and interval
// nanos, whatever its seconds) only renews the TTL: the token bucket is the
// same object in the same state.
func TestIdenticalAssignmentRenewsOnlyTTLProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tb := drawParams(t, "tb")
		p := newProxy(t, nil)
		p.Request(0, web)
		apply(t, p, 0, assignment(web, tb.strategy(), dur(time.Hour)))
		now := time.Duration(0)
		for i := range rapid.IntRange(0, 30).Draw(t, "requests") {
			now += time.Duration(rapid.IntRange(0, 500).Draw(t, fmt.Sprintf("dt%d", i))) * time.Millisecond
			p.Request(now, web)
		}
		b := p.buckets[web.key]
		lim, before := b.lim, *b.lim
		same := tb
		same.seconds = int64(rapid.IntRange(1, 100).Draw(t, "other_seconds"))
		ttl := time.Duration(rapid.IntRange(1, 7200).Draw(t, "ttl_s")) * time.Second // 0 expires at once (TestTTLExpiry)
		out := apply(t, p, now, assignment(web, same.strategy(), dur(ttl+time.Duration(rapid.IntRange(0, 999).Draw(t, "ttl_ms"))*time.Millisecond)))
		if out[0].Effect != RenewedTokenBucket || b.lim != lim || *b.lim != before {
			t.Fatalf("identical assignment changed the bucket: %v", out[0].Effect)
		}
		if b.until != now+ttl || b.phase != Assigned {
			t.Fatalf("TTL: until %v phase %v, want %v assigned", b.until, b.phase, now+ttl)
		}
	})
}
