package gdrl

import (
	"slices"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/strattest"
)

// fastTestNode is a started gdrl node of (10,000 tokens/s, 100) among
// members.
func fastTestNode(t *testing.T, self string, members []string, params ...string) *GDRL {
	t.Helper()
	g, err := New(strattest.Config(t, self, members, bucket.Rate{Tokens: 10_000, Per: time.Second}, 100, params...))
	if err != nil {
		t.Fatal(err)
	}
	g.Start(0, &strategy.Effects{})
	return g
}

// TestAllowanceCountsAsRequests: the tokens used of an allowance reach
// the key's demand estimate (and the discard indicator's filters) as the
// same tokens requested one by one would, and the requests the driver
// refused in a window reach them as the same requests refused by
// Request: two nodes, one driven through Grant, Return and Refused, the
// other through Request alone, end with the same demand, indicator and
// remaining tokens. Fails when Return or Refused does not count (or
// Return gives back the used tokens).
func TestAllowanceCountsAsRequests(t *testing.T) {
	fast := fastTestNode(t, "a", []string{"a"}, "indicator=discard")
	slow := fastTestNode(t, "a", []string{"a"}, "indicator=discard")
	fx := &strategy.Effects{}
	req := func(g *GDRL, at time.Duration, tokens int64) bool {
		d, _ := g.Request(at, strategy.Request{Key: "k", Tokens: tokens, Arrival: at}, fx)
		return d.Allowed
	}
	for _, g := range []*GDRL{fast, slow} {
		if !req(g, 0, 100) { // the whole burst: empty at 0
			t.Fatal("the first request of the whole burst was refused")
		}
	}
	if req(fast, 0, 1) {
		t.Fatal("a request at an empty bucket was admitted")
	}
	if until := fast.RefusedUntil(0, "k"); until <= 0 {
		t.Fatalf("RefusedUntil at an empty bucket = %v, want a window", until)
	}
	fast.Refused(0, "k", 3, 3, fx) // three more the driver refused
	for range 4 {
		if req(slow, 0, 1) {
			t.Fatal("a request at an empty bucket was admitted")
		}
	}
	g, until := fast.Grant(50*time.Millisecond, "k", 10, fx)
	if g != 10 || until != 50*time.Millisecond+strategy.AllowanceValidity {
		t.Fatalf("Grant = %d until %v, want 10 until %v", g, until, 50*time.Millisecond+strategy.AllowanceValidity)
	}
	fast.Return(60*time.Millisecond, "k", 5, fx) // 5 used
	for range 5 {
		if !req(slow, 60*time.Millisecond, 1) {
			t.Fatal("a request at a full bucket was refused")
		}
	}
	rf, _ := fast.Remaining(60*time.Millisecond, "k")
	rs, _ := slow.Remaining(60*time.Millisecond, "k")
	if rf != rs || rf != 95 {
		t.Errorf("remaining with an allowance %d, one by one %d: want 95 both", rf, rs)
	}
	for _, g := range []*GDRL{fast, slow} {
		for at := 100 * time.Millisecond; at <= 300*time.Millisecond; at += 50 * time.Millisecond {
			g.Tick(at, fx)
		}
	}
	if fast.Demand("k") != slow.Demand("k") || fast.Demand("k") == 0 {
		t.Errorf("demand with allowances %v, one by one %v: want equal, positive", fast.Demand("k"), slow.Demand("k"))
	}
	if fast.Indicator("k") != slow.Indicator("k") || fast.Indicator("k") == 0 {
		t.Errorf("discard indicator with allowances and windows %v, one by one %v: want equal, positive", fast.Indicator("k"), slow.Indicator("k"))
	}
}

// TestTransferOutWithTokensHeld: a node holding 12 tokens of its bucket in
// an allowance pays most of its burst share away (pay, as a flow does):
// the transfer carries the tokens the bucket holds (38 of its 50, less the
// unit level() keeps back), never those held, although the bucket would
// have refilled to 50 without them; the bucket is left in debt by exactly
// what the held tokens exceed the new burst (5 - 12 = -7 tokens, below
// minus the burst: no floor), the unused tokens returned into the debt
// are dropped, a refused request's window runs until the debt is repaid,
// and a transfer in ends it (Effects.EndRefusal). Fails with no clamp in
// pay's path, with shrink sending a debt's tokens, with the ledger's
// floor at minus the burst, and with a raise that does not end the window.
func TestTransferOutWithTokensHeld(t *testing.T) {
	g := fastTestNode(t, "a", []string{"a", "b"})
	fx := &strategy.Effects{}
	const per = UnitsPerToken // bucket units: a unit per micro-token here
	if g.unit != 1 {
		t.Fatalf("unit %d, the test assumes 1", g.unit)
	}
	g.Request(0, strategy.Request{Key: "k", Tokens: 1, Arrival: 0}, fx)
	at := time.Second // full again: 50 tokens (C/2 = 5,000 tokens/s, B/2 = 50)
	n, _ := g.Grant(at, "k", 16, fx)
	if n != 12 { // AllowanceCap: min(5 ms of 5,000/s, 50/4)
		t.Fatalf("Grant = %d tokens, want 12", n)
	}
	if got, _ := g.Remaining(at+time.Second, "k"); got != 38 {
		t.Fatalf("Remaining a second after the grant = %d, want 38 (the bucket refills to its burst less the tokens held)", got)
	}
	at += 500 * time.Millisecond
	c0 := g.CapacityShare("k")
	if q := g.PayForTest(at, "b", "k", c0-1000*per, 45*per); q != 1 {
		t.Fatalf("pay queued %d transfers, want 1", q)
	}
	it, ok := g.outbox[len(g.outbox)-1].itemFor("k")
	if !ok || it.b != 45*per {
		t.Fatalf("the transfer moves %+v, want the burst 45 tokens of k", it)
	}
	if it.t != 38*per-1 {
		t.Errorf("the transfer carries %d units of tokens, want 38 tokens less a unit (%d): the bucket's, not the 12 held", it.t, 38*per-1)
	}
	sh := g.shares["k"]
	if lvl := sh.bkt.Tokens(at); lvl != -7*per {
		t.Errorf("bucket level after the pay %v units, want -7 tokens (%d): burst 5 less 12 held", lvl, -7*per)
	}
	g.Return(at, "k", n, fx) // nothing used: the bucket is in debt, they are dropped
	if lvl := sh.bkt.Tokens(at); lvl != -7*per {
		t.Errorf("bucket level after the return %v units, want still -7 tokens (%d)", lvl, -7*per)
	}
	if d, _ := g.Request(at, strategy.Request{Key: "k", Tokens: 1, Arrival: at}, fx); d.Allowed {
		t.Fatal("a request at a bucket in debt was admitted")
	}
	// 8 tokens to refill at 1,000 tokens/s: 8 ms, a nanosecond early.
	if until := g.RefusedUntil(at, "k"); until != at+8*time.Millisecond-1 {
		t.Errorf("RefusedUntil = %v, want %v (the debt of 7 and a token at the new share)", until, at+8*time.Millisecond-1)
	}
	fx.Reset()
	g.adjust("k", 0, -1*per, at) // a lowering (as a payment's): the window stands
	g.flush(at, fx)
	if len(fx.RefusalsEnded) != 0 {
		t.Errorf("a transfer out ended the window: %v", fx.RefusalsEnded)
	}
	id := TransferID{Src: "b", SrcInc: 1, Dst: "a", DstInc: g.inc, Seq: 1}
	if !g.credit(at, g.applied, partApplied, id, []item{{key: "k", c: 500 * per}}) {
		t.Fatal("the transfer in was not credited")
	}
	g.flush(at, fx)
	if !slices.Equal(fx.RefusalsEnded, []string{"k"}) {
		t.Errorf("after a transfer in, windows ended %v, want [k]", fx.RefusalsEnded)
	}
}

// TestHeldKeyNotDropped: a key whose tokens are all back in a full bucket
// but for an allowance open is not dropped as idle and full (its bucket
// is not full: the tokens held are spent), and is once they are back.
// Fails when closeInterval drops a key with tokens held (a new full
// bucket would then hold them twice).
func TestHeldKeyNotDropped(t *testing.T) {
	g := fastTestNode(t, "a", []string{"a", "b"}, "idle=1s")
	fx := &strategy.Effects{}
	g.Request(0, strategy.Request{Key: "k", Tokens: 1, Arrival: 0}, fx)
	if n, _ := g.Grant(100*time.Millisecond, "k", 4, fx); n != 4 {
		t.Fatalf("Grant = %d, want 4", n)
	}
	for at := 200 * time.Millisecond; at <= 3*time.Second; at += 100 * time.Millisecond {
		g.Tick(at, fx)
	}
	if g.shares["k"] == nil {
		t.Fatal("the key was dropped with 4 tokens held by the driver")
	}
	g.Return(3*time.Second, "k", 4, fx)
	for at := 3100 * time.Millisecond; at <= 4*time.Second; at += 100 * time.Millisecond {
		g.Tick(at, fx)
	}
	if g.shares["k"] != nil {
		t.Error("the key was kept idle and full once its allowance was back")
	}
}

// TestRequestWaitCountsSeen: a key first requested in waiting mode is
// counted in MemoryBytes' seen map as one requested by Request is (it was
// put in the map uncounted, and counted out when forgotten).
func TestRequestWaitCountsSeen(t *testing.T) {
	g := fastTestNode(t, "a", []string{"a"}, "idle=1s")
	fx := &strategy.Effects{}
	g.RequestWait(0, strategy.Request{Key: "w", Tokens: 1}, 10*time.Millisecond, fx)
	if g.mem.seen.Len() != len(g.seen) {
		t.Errorf("seen holds %d keys, MemoryBytes counts %d", len(g.seen), g.mem.seen.Len())
	}
}
