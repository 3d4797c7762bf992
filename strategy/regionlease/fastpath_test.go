package regionlease_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/regionlease"
)

// The fast path at a node (allowance.go, refusal.go), driven by hand:
// us.n2 holds leases of a key from its regional owner us.n1 (the global
// owner eu.n0), at 1,000 tokens/s and burst 1,000 (an allowance holds at
// most 5 tokens: strategy.AllowanceCap).

var fastMembers = []strategy.NodeID{"eu.n0", "us.n1", "us.n2"}

// fastTTL is the node leases' ttl here: they outlast the key's idle check
// (at most idle, 250 ms, after the key's first request).
const fastTTL = time.Second

// leasedNode is us.n2 offered the key (5 tokens a request) every
// millisecond from 1 s until it asks us.n1 for a lease; us.n1 grants
// tokens (0: none), the lease ending fastTTL after the ask, with a dry hint
// until hint after the ask (0: none). It returns the node, the key and
// the grant's time.
func leasedNode(t *testing.T, tokens int64, hint time.Duration) (*regionlease.RegionLease, string, time.Duration) {
	t.Helper()
	n := startedNode(t, "us.n2", fastMembers, bucket.Rate{Tokens: 1, Per: time.Millisecond}, 1000, 50*time.Millisecond, "ttl="+fastTTL.String())
	key := regionalKey(t, fastMembers)
	var fx strategy.Effects
	for i, now := uint64(1), time.Second; now < 2*time.Second; i, now = i+1, now+time.Millisecond {
		fx.Reset()
		n.Request(now, strategy.Request{ID: i, Key: key, Tokens: 5, Arrival: now}, &fx)
		for _, m := range decoded(t, &fx) {
			if a := m.GetAsk(); a != nil {
				g := &peerv1.RegionLeaseGrant{Key: key, Seq: a.Seq, Tokens: tokens, ExpiresNs: int64(now + fastTTL)}
				if hint > 0 {
					g.EmptyUntilNs = int64(now + hint)
				}
				deliver(t, n, now, "us.n1", &peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_Grant{Grant: g}})
				return n, key, now
			}
		}
	}
	t.Fatal("us.n2 never asked us.n1 for a lease")
	return nil, "", 0
}

// sent is what fx holds for the peers, as text (recipient and message),
// in order: two nodes that did the same send the same.
// tickAlike ticks a and b at now (after the effects already in fa and
// fb), fails t unless they send the same messages, and returns how many.
func tickAlike(t *testing.T, a, b *regionlease.RegionLease, now time.Duration, fa, fb *strategy.Effects) int {
	t.Helper()
	a.Tick(now, fa)
	b.Tick(now, fb)
	sa, sb := sent(t, fa), sent(t, fb)
	if !slices.Equal(sa, sb) {
		t.Fatalf("at %v a sends %q, b sends %q", now, sa, sb)
	}
	return len(sa)
}

func sent(t *testing.T, fx *strategy.Effects) []string {
	t.Helper()
	var out []string
	for i, m := range decoded(t, fx) {
		out = append(out, fmt.Sprintf("to %s: %s", fx.Messages[i].To, prototext.Format(m)))
	}
	return out
}

// An allowance's used tokens count as the key's requests, exactly as
// Request counts them: node a hands its lease (20 tokens) out in four
// allowances of 5, 10 ms apart, each returned used up at once; node b,
// with the same history, is asked for 5 tokens in one request at each of
// those times. Both send the same messages then (the spent report of the
// lease used up, the asks with the demand they report); 20 ms after the
// last (a's key would count as idle had its allowances not counted as
// use since the grant), both are granted 10 more tokens of their last
// ask, and both keep them (a key idle gives a grant back as it comes);
// ticked every millisecond for the next 300 ms, they send the same
// messages again (the idle return, the asks).
func TestAllowanceUsedCountsAsRequests(t *testing.T) {
	a, key, t0 := leasedNode(t, 20, 0)
	b, _, _ := leasedNode(t, 20, 0)
	id := uint64(1 << 20)
	var seq uint64 // the last ask's
	for i := range 4 {
		now := t0 + time.Duration(i+1)*10*time.Millisecond
		var fa, fb strategy.Effects
		g, until := a.Grant(now, key, 8, &fa)
		if g != 5 || until <= now {
			t.Fatalf("allowance %d at %v: %d tokens until %v, want 5 (the cap) valid after now", i, now, g, until)
		}
		a.Return(now, key, 0, &fa)
		id++
		if d, ok := b.Request(now, strategy.Request{ID: id, Key: key, Tokens: 5, Arrival: now}, &fb); !ok || !d.Allowed {
			t.Fatalf("b's request %d at %v: %+v (decided %v), want admitted from its lease", i, now, d, ok)
		}
		if sa, sb := sent(t, &fa), sent(t, &fb); !slices.Equal(sa, sb) {
			t.Fatalf("at %v, after the allowance a sends %q, after the request b sends %q", now, sa, sb)
		}
		for _, m := range decoded(t, &fa) {
			if k := m.GetAsk(); k != nil {
				seq = k.Seq
			}
		}
	}
	if seq == 0 {
		t.Fatal("no ask while the lease was used up: the demand went untested")
	}
	var msgs int
	for now := t0 + 41*time.Millisecond; now < t0+340*time.Millisecond; now += time.Millisecond {
		var fa, fb strategy.Effects
		if now == t0+60*time.Millisecond {
			grant := &peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_Grant{Grant: &peerv1.RegionLeaseGrant{
				Key: key, Seq: seq, Tokens: 10, ExpiresNs: int64(now + 200*time.Millisecond)}}}
			ga, gb := deliver(t, a, now, "us.n1", grant), deliver(t, b, now, "us.n1", grant)
			if len(ga) != len(gb) || len(ga) > 0 {
				t.Fatalf("at %v, given 10 tokens, a answers %v, b %v: want both to keep them", now, ga, gb)
			}
		}
		msgs += tickAlike(t, a, b, now, &fa, &fb)
	}
	if msgs == 0 {
		t.Fatal("neither node sent anything after the grant: the idle and ask bookkeeping went untested")
	}
}

// A lease's return excludes the tokens in an open allowance, and the
// lease behind one is neither given back at idle nor reported spent by an
// ask while it is open: us.n2 holds a lease (a dry hint sets its renew
// timer 1 ms after the grant), hands 5 of its tokens to the driver, and
// its requests stop. Of a lease of 20: its idle check (250 ms after the
// key's first request) gives nothing back while the allowance is open
// (the lease lasts fastTTL), and at the lease's end its
// return carries 15 tokens, not 20; when the driver gave the 5 back
// unused a millisecond later, the idle check gives all 20 back. Of a
// lease of 5, all in the allowance: the renew timer's ask does not report
// the lease spent, nor does anything else before its end.
func TestAllowanceExcludedFromReturns(t *testing.T) {
	const lead = 10 * time.Millisecond // 2*lan_latency, lan_latency min(hint, 5 ms)
	for _, c := range []struct {
		lease    int64
		giveBack bool
		want     []int64 // the returns' unused tokens, once per lease
	}{{20, false, []int64{15}}, {20, true, []int64{20}}, {5, false, nil}} {
		n, key, t0 := leasedNode(t, c.lease, lead+time.Millisecond)
		var fx strategy.Effects
		if g, _ := n.Grant(t0, key, 20, &fx); g != 5 {
			t.Fatalf("allowance: %d tokens, want 5", g)
		}
		var got []int64
		asked := false
		for now := t0 + time.Millisecond; now < t0+fastTTL+100*time.Millisecond; now += time.Millisecond {
			fx.Reset()
			if c.giveBack && now == t0+2*time.Millisecond {
				n.Return(now, key, 5, &fx)
			}
			n.Tick(now, &fx)
			for _, m := range decoded(t, &fx) {
				if a := m.GetAsk(); a != nil {
					asked = true
					if len(a.Spent) > 0 {
						t.Errorf("lease %d: at %v the ask reports leases %v spent: the lease behind the open allowance is not", c.lease, now, a.Spent)
					}
				}
				r := m.GetReturn()
				if r == nil {
					continue
				}
				if !c.giveBack && now < t0+fastTTL-lead {
					t.Errorf("lease %d: at %v us.n2 returns %d of its lease while the allowance is open, before the lease's end", c.lease, now, r.Unused)
				}
				if len(got) == 0 { // the first send (resent until acknowledged)
					got = append(got, r.Unused)
				}
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("lease %d, allowance given back %v: us.n2 returned %v of its lease, want %v", c.lease, c.giveBack, got, c.want)
		}
		if c.lease == 5 && !asked {
			t.Error("us.n2 sent no ask on its renew timer: the spent report went untested")
		}
	}
}

// A refusal window opens when us.n2 holds no lease token and its regional
// owner's dry hint is ahead (capped at the renew timer's ask), and a
// grant with tokens ends it: us.n2's ask was answered with no tokens and
// a hint of 30 ms; a request is refused on the node and RefusedUntil is
// after now, no later than the hint nor the renew time (hint - lead); the
// renew timer's ask is answered with 10 tokens: the grant ends the window
// (Effects.EndRefusal), RefusedUntil is now, and the next request is
// admitted.
func TestRefusalWindowEndsWithGrant(t *testing.T) {
	const lead = 10 * time.Millisecond
	n, key, t0 := leasedNode(t, 0, 30*time.Millisecond)
	var fx strategy.Effects
	now := t0 + time.Millisecond
	if d, ok := n.Request(now, strategy.Request{ID: 1 << 20, Key: key, Tokens: 1, Arrival: now}, &fx); !ok || d.Allowed {
		t.Fatalf("request in the dry hint: %+v (decided %v), want refused on the node", d, ok)
	}
	u := n.RefusedUntil(now, key)
	if u <= now || u > t0+30*time.Millisecond-lead {
		t.Fatalf("RefusedUntil at %v = %v: want after now, by the renew time %v", now, u, t0+30*time.Millisecond-lead)
	}
	if g, _ := n.Grant(now, key, 5, &fx); g != 0 {
		t.Fatalf("Grant with no lease token: %d tokens, want 0", g)
	}
	// The driver refuses the key's requests until u and reports them.
	n.Refused(u-time.Millisecond, key, 3, 3, &fx)
	for now = t0 + 2*time.Millisecond; now <= t0+30*time.Millisecond; now += time.Millisecond {
		fx.Reset()
		n.Tick(now, &fx)
		for _, m := range decoded(t, &fx) {
			a := m.GetAsk()
			if a == nil {
				continue
			}
			fx.Reset()
			b, err := proto.Marshal(&peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_Grant{Grant: &peerv1.RegionLeaseGrant{
				Key: key, Seq: a.Seq, Tokens: 10, ExpiresNs: int64(now + 200*time.Millisecond)}}})
			if err != nil {
				t.Fatal(err)
			}
			if err := n.Receive(now, "us.n1", b, &fx); err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(fx.RefusalsEnded, key) {
				t.Fatalf("the grant of 10 tokens at %v ends no refusal window of %q (ended: %v)", now, key, fx.RefusalsEnded)
			}
			if u := n.RefusedUntil(now, key); u > now {
				t.Fatalf("RefusedUntil after the grant = %v, want none (now %v)", u, now)
			}
			if d, ok := n.Request(now, strategy.Request{ID: 2 << 20, Key: key, Tokens: 1, Arrival: now}, &fx); !ok || !d.Allowed {
				t.Fatalf("request after the grant: %+v (decided %v), want admitted", d, ok)
			}
			return
		}
	}
	t.Fatal("us.n2 sent no ask on its renew timer")
}

// Requests the driver refused in a window count as Request counts a
// refused one: node a reports one refused request of 5 tokens every
// millisecond for 15 ms (Refused) while its regional owner's dry hint
// (30 ms, no tokens) lasts; node b, with the same history, is asked for
// them and refuses them itself. Both send the same messages then and,
// ticked every millisecond for the next 300 ms, again (the renew timer's
// ask, 20 ms on, sent only while the key is in use, and the demand it
// reports).
func TestRefusedCountsAsRequests(t *testing.T) {
	a, key, t0 := leasedNode(t, 0, 30*time.Millisecond)
	b, _, _ := leasedNode(t, 0, 30*time.Millisecond)
	var msgs int
	for i, now := uint64(1<<20), t0+time.Millisecond; now < t0+300*time.Millisecond; i, now = i+1, now+time.Millisecond {
		var fa, fb strategy.Effects
		if now <= t0+15*time.Millisecond {
			a.Refused(now, key, 1, 5, &fa)
			if d, ok := b.Request(now, strategy.Request{ID: i, Key: key, Tokens: 5, Arrival: now}, &fb); !ok || d.Allowed {
				t.Fatalf("b's request at %v: %+v (decided %v), want refused on the node", now, d, ok)
			}
		}
		msgs += tickAlike(t, a, b, now, &fa, &fb)
	}
	if msgs == 0 {
		t.Fatal("neither node sent anything: the renew timer's ask went untested")
	}
}
