package lease

import (
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// fastNode is newNode at 1000 tokens/s (an allowance holds up to 5:
// strategy.AllowanceCap, 5 ms of refill, a quarter of the burst of 20).
func fastNode(t *testing.T, self strategy.NodeID) *Lease {
	t.Helper()
	return newNodeAt(t, self, bucket.Rate{Tokens: 1000, Per: time.Second})
}

// leaseOf gives holder a lease of tokens of key from owner at now (an ask
// answered), and returns the lease's seq.
func leaseOf(t *testing.T, owner, holder *Lease, key string, tokens int64, now time.Duration) uint64 {
	t.Helper()
	h := holder.holding(key)
	h.seq++
	h.asking, h.askTo, h.askAt, h.askTokens = true, owner.self, now, tokens
	h.sentTo[h.seq] = owner.self
	fx := &strategy.Effects{}
	if err := owner.Receive(now, holder.self, ask(key, h.seq, tokens, int64(now)), fx); err != nil {
		t.Fatal(err)
	}
	owner.Tick(now, fx)
	granted := false
	for _, m := range fx.Messages {
		if decode(t, m.Payload).GetGrant() == nil {
			continue
		}
		granted = true
		if err := holder.Receive(now, owner.self, m.Payload, &strategy.Effects{}); err != nil {
			t.Fatal(err)
		}
	}
	if !granted {
		t.Fatalf("owner sent no grant (%d messages)", len(fx.Messages))
	}
	if got := h.leased(now); got != tokens {
		t.Fatalf("holder holds %d leased tokens, want %d", got, tokens)
	}
	return h.seq
}

// TestAllowanceFromLease: the key's owner lends the driver tokens of its
// pool and takes the unused back; a holder hands the driver tokens of its lease
// (Grant: at most strategy.AllowanceCap, valid until the lease's expiry),
// takes back the unused ones (Return), counts the used ones as the key's
// demand and reports the lease spent once the allowance used it up; it
// grants nothing while an allowance is open, or once
// the lease expired, and a return after the expiry puts nothing back.
func TestAllowanceFromLease(t *testing.T) {
	key := keyOwnedBy("n0")
	owner, holder := fastNode(t, "n0"), fastNode(t, "n1")
	now := 10 * time.Second
	seq := leaseOf(t, owner, holder, key, 8, now)
	h := holder.keys[key]
	expires := h.leases[0].expires

	// At the owner the allowance is lent out of the pool, and given back.
	lvl0, leased0, _ := owner.Audit(now, key)
	if g, until := owner.Grant(now, key, 4, &strategy.Effects{}); g != 4 || until != now+strategy.AllowanceValidity {
		t.Errorf("the key's owner granted %d until %v; want 4 until %v", g, until, now+strategy.AllowanceValidity)
	}
	if lvl, leased, _ := owner.Audit(now, key); leased != leased0+4 || lvl != lvl0-4*owner.sh.per {
		t.Errorf("owner's pool with the allowance out: level %d leased %d; want %d and %d", lvl, leased, lvl0-4*owner.sh.per, leased0+4)
	}
	if g, _ := owner.Grant(now, key, 4, &strategy.Effects{}); g != 0 {
		t.Errorf("a second allowance at the owner: %d; want 0", g)
	}
	owner.Return(now, key, 3, &strategy.Effects{}) // 1 used
	if lvl, leased, _ := owner.Audit(now, key); leased != leased0 || lvl != lvl0-owner.sh.per {
		t.Errorf("owner's pool after the return: level %d leased %d; want %d and %d", lvl, leased, lvl0-owner.sh.per, leased0)
	}
	g, until := holder.Grant(now, key, 100, &strategy.Effects{})
	if g != 5 || until != expires {
		t.Fatalf("Grant = %d until %v; want 5 (the cap) until the lease's expiry %v", g, until, expires)
	}
	if got := h.leased(now); got != 3 {
		t.Errorf("the lease holds %d tokens with the allowance out; want 3", got)
	}
	if g2, _ := holder.Grant(now, key, 1, &strategy.Effects{}); g2 != 0 {
		t.Errorf("a second allowance of %d while one is open; want 0", g2)
	}
	demand := h.cur
	fx := &strategy.Effects{}
	holder.Return(now+time.Millisecond, key, 2, fx) // 3 used
	if got := h.leased(now); got != 5 {
		t.Errorf("after 3 of 5 used, the lease holds %d; want 5", got)
	}
	if h.cur != demand+3 {
		t.Errorf("demand counted %d tokens for the allowance; want 3", h.cur-demand)
	}
	for _, m := range fx.Messages {
		if decode(t, m.Payload).GetReturn() != nil {
			t.Errorf("a spent report with tokens left in the lease")
		}
	}

	// Use the lease up through allowances: its spent report goes out when
	// the last allowance comes back with nothing left, not before.
	if g, _ = holder.Grant(now, key, 100, &strategy.Effects{}); g != 5 {
		t.Fatalf("Grant = %d, want 5", g)
	}
	fx = &strategy.Effects{}
	holder.Return(now, key, 0, fx)
	if g, _ = holder.Grant(now, key, 100, fx); g != 0 {
		t.Fatalf("Grant = %d with the lease used up; want 0", g)
	}
	var spent bool
	for _, m := range fx.Messages {
		if r := decode(t, m.Payload).GetReturn(); r != nil && r.Seq == seq && r.Unused == 0 && m.To == "n0" {
			spent = true
		}
	}
	if !spent {
		t.Errorf("no spent report to n0 after the allowance used the lease up (messages %d)", len(fx.Messages))
	}

	// A fresh lease: an allowance returned after the lease's expiry puts
	// nothing back, and none is granted past it.
	now += 5 * time.Second
	leaseOf(t, owner, holder, key, 4, now)
	exp := h.leases[len(h.leases)-1].expires
	if g, _ = holder.Grant(now, key, 100, &strategy.Effects{}); g != 4 {
		t.Fatalf("Grant = %d, want the 4 of the new lease", g)
	}
	holder.Return(exp, key, 4, &strategy.Effects{})
	if got := h.leased(exp - 1); got != 0 {
		t.Errorf("a return at the lease's expiry put %d tokens back; want 0", got)
	}
	if g, _ = holder.Grant(exp, key, 100, &strategy.Effects{}); g != 0 {
		t.Errorf("Grant = %d at the lease's expiry; want 0", g)
	}
}
