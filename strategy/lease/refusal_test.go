package lease

import (
	"slices"
	"testing"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// TestRefusalWindowFollowsDryHint: a holder refused on the owner's dry
// hint names the hint's end as its refusal window (strategy.Refuser);
// the refusals the driver reports count as demand, enough here for an
// ask the two requests the strategy saw did not warrant; a grant with
// tokens ends the window (Effects.EndRefusal), and while a lease holds a
// token, or at the key's owner, there is none.
func TestRefusalWindowFollowsDryHint(t *testing.T) {
	key := keyOwnedBy("n0")
	holder := newNode(t, "n1")
	fx := &strategy.Effects{}
	if _, ok := holder.Request(0, strategy.Request{ID: 1, Key: key, Tokens: 1, Arrival: 0}, fx); ok {
		t.Fatal("decided without a lease")
	}
	v := msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Verdict{Verdict: &peerv1.LeaseVerdict{RequestId: 1, Allowed: false, EmptyForUs: 50_000}}})
	if err := holder.Receive(2*time.Millisecond, "n0", v, &strategy.Effects{}); err != nil {
		t.Fatal(err)
	}
	now := 10 * time.Millisecond
	fx = &strategy.Effects{}
	if d, ok := holder.Request(now, strategy.Request{ID: 2, Key: key, Tokens: 1, Arrival: now}, fx); !ok || d.Allowed || len(fx.Messages) != 0 {
		t.Fatalf("want a local refusal on the hint, got decided=%v allowed=%v messages=%d", ok, d.Allowed, len(fx.Messages))
	}
	if u := holder.RefusedUntil(now, key); u != 50*time.Millisecond {
		t.Fatalf("RefusedUntil = %v, want the hint's end, 50ms", u)
	}
	if u := holder.RefusedUntil(50*time.Millisecond, key); u > 50*time.Millisecond {
		t.Fatalf("RefusedUntil at the hint's end = %v, want none", u)
	}

	// 30 requests the driver refused in the window: demand for an ask.
	fx = &strategy.Effects{}
	holder.Refused(40*time.Millisecond, key, 30, 30, fx)
	if len(fx.Messages) != 1 || fx.Messages[0].To != "n0" || decode(t, fx.Messages[0].Payload).GetAsk() == nil {
		t.Fatalf("after 30 refusals reported: messages %v, want one ask to n0", fx.Messages)
	}
	a := decode(t, fx.Messages[0].Payload).GetAsk()

	// A grant with tokens ends the window; with a token in a lease there is none.
	g := msg(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Grant{Grant: &peerv1.LeaseGrant{
		Key: key, Seq: a.Seq, Tokens: 3, ExpiresNs: int64(40*time.Millisecond + 400*time.Millisecond)}}})
	fx = &strategy.Effects{}
	if err := holder.Receive(42*time.Millisecond, "n0", g, fx); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(fx.RefusalsEnded, key) {
		t.Fatalf("a grant of 3 tokens ended no refusal window (ended %v)", fx.RefusalsEnded)
	}
	if u := holder.RefusedUntil(45*time.Millisecond, key); u > 45*time.Millisecond {
		t.Fatalf("RefusedUntil with 3 tokens in a lease = %v, want none", u)
	}

	// At the key's owner: no window.
	owner := newNode(t, "n0")
	if u := owner.RefusedUntil(now, key); u > now {
		t.Fatalf("RefusedUntil at the owner = %v, want none", u)
	}
}
