package regionlease_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// usableRun runs pushSetup's key contended between eu.n0 (G) and us.n1
// (its regional owner, 70 ms away), both offered 500/s against r = 100/s
// from 1 s to 3 s, with push_ahead=100ms (a dated push reaches us.n1 30
// ms before its tokens are made) and params, us.n1's clock running skew
// ahead of the test's and G's, and reports the most tokens us.n1 had
// admitted beyond what it could have had at any of its admissions (the
// test's time): every grant's tokens from their receipt, every dated
// push's from its usable_at (G's time), whatever the holder was told
// (naive: the dated pushes' dates stripped in transit, so that us.n1
// takes them on receipt). It also returns the dated pushes seen. With a
// skew the envelope's check is off (it reads every node's times as the
// test's).
func usableRun(t *testing.T, naive bool, skew time.Duration, params ...string) (over int64, dated int) {
	w, key := pushSetup(t, append([]string{"push_ahead=100ms"}, params...)...)
	w.unchecked = naive || skew != 0
	w.ahead = map[strategy.NodeID]time.Duration{"us.n1": skew}
	type avail struct {
		at     time.Duration
		tokens int64
	}
	var sched []avail
	seen := map[uint64]bool{}
	note := func(seq uint64, tokens int64, usable, at time.Duration) {
		if seq == 0 || seen[seq] || tokens <= 0 {
			return
		}
		seen[seq] = true
		if usable > 0 {
			dated++
			at = max(at, usable)
		}
		sched = append(sched, avail{at, tokens})
	}
	dates := map[uint64]time.Duration{} // usable_at of each push, as G sent it
	w.mutate = func(m *peerv1.RegionLeaseMessage) bool {
		g := m.GetGrant()
		if g == nil {
			return false
		}
		if g.UsableAtNs > 0 {
			dates[g.Seq] = time.Duration(g.UsableAtNs)
		}
		if !naive || g.UsableAtNs == 0 && g.PrevUsableAtNs == 0 {
			return false
		}
		g.UsableAtNs, g.SentAtNs, g.PrevUsableAtNs, g.PrevSentAtNs = 0, 0, 0, 0
		return true
	}
	w.seen = func(at time.Duration, _, to strategy.NodeID, m *peerv1.RegionLeaseMessage) {
		if g := m.GetGrant(); g != nil && to == "us.n1" {
			note(g.Seq, g.Tokens, dates[g.Seq], at)
			note(g.PrevSeq, g.PrevTokens, dates[g.PrevSeq], at)
		}
	}
	var admitted []time.Duration
	w.runBoth(key, func(now time.Duration, n strategy.NodeID) {
		if n == "us.n1" {
			admitted = append(admitted, now)
		}
	})
	for i, at := range admitted {
		var have int64
		for _, a := range sched {
			if a.at <= at {
				have += a.tokens
			}
		}
		over = max(over, int64(i+1)-have)
	}
	return over, dated
}

// A regional owner takes none of a dated push's tokens before G has made
// them (usable_at, dated.go): with push_ahead longer than the WAN's
// one-way delay, us.n1's admissions never run ahead of the tokens it
// could have had by then; a holder that takes dated pushes on receipt
// (their dates stripped in transit, as a build without dated pushes
// would) does, which the test checks too so that it can fail.
func TestDatedPushUsedNoEarlierThanMade(t *testing.T) {
	over, dated := usableRun(t, false, 0)
	t.Logf("dated pushes %d; us.n1 admitted at most %d tokens ahead of what it had", dated, over)
	if dated == 0 {
		t.Fatal("no dated push reached us.n1")
	}
	if over > 0 {
		t.Errorf("us.n1 admitted %d tokens more than it could have had by then", over)
	}
	naive, _ := usableRun(t, true, 0)
	t.Logf("a holder taking dated pushes on receipt: %d tokens ahead", naive)
	if naive <= 0 {
		t.Errorf("a holder taking dated pushes on receipt ran no token ahead: the test cannot tell the builds apart")
	}
	// Without clock_uncertainty no clock is trusted: a holder whose clock
	// runs 40 ms ahead measures the gap 40 ms longer and holds as long.
	if over, _ := usableRun(t, false, 40*time.Millisecond); over > 0 {
		t.Errorf("us.n1's clock 40 ms ahead: it admitted %d tokens more than it could have had", over)
	}
}

// With clock_uncertainty=e, a holder uses a dated push's tokens at its
// usable_at plus at most e on its own clock (dated.go, usableAfter): with
// the clocks within e, still never before G made them; with us.n1's clock
// 40 ms ahead of G's, e = 5ms, at most 35 ms early (the bound the
// parameter states: min(40-5, push_ahead less the shortest delay, 30) ms),
// that is at most r*30ms = 3 tokens over what it had. The earlier use
// shows too: over the run us.n1 admits more than without the parameter.
func TestDatedPushClockUncertainty(t *testing.T) {
	over, dated := usableRun(t, false, 0, "clock_uncertainty=5ms")
	t.Logf("clocks agree, clock_uncertainty=5ms: %d dated pushes, at most %d tokens ahead", dated, over)
	if dated == 0 {
		t.Fatal("no dated push reached us.n1")
	}
	if over > 0 {
		t.Errorf("clocks within clock_uncertainty: us.n1 admitted %d tokens more than it could have had", over)
	}
	skewed, _ := usableRun(t, false, 40*time.Millisecond, "clock_uncertainty=5ms")
	t.Logf("us.n1's clock 40 ms ahead, clock_uncertainty=5ms: at most %d tokens ahead (bound 3)", skewed)
	if skewed > 3 {
		t.Errorf("us.n1's clock 40 ms ahead: %d tokens ahead, above the stated bound r*min(35ms, 30ms) = 3", skewed)
	}
	if skewed <= 0 {
		t.Errorf("us.n1's clock 40 ms ahead with clock_uncertainty=5ms ran no token ahead: the skew does not reach the holder")
	}
}

// A global owner sends dated pushes only to a region whose regional owner
// said it takes them (takes_dated): a holder of a build without them
// would use their tokens on receipt. us.n1 asks with takes_push, with and
// without takes_dated; push_ahead=0 turns dated pushes off.
func TestDatedOnlyToAskersThatTakeThem(t *testing.T) {
	for _, tc := range []struct {
		name      string
		takes     bool
		params    []string
		wantDated bool
	}{{"takes dated", true, nil, true}, {"older holder", false, nil, false}, {"push_ahead=0", true, []string{"push_ahead=0"}, false}} {
		t.Run(tc.name, func(t *testing.T) {
			w, key := pushSetup(t, tc.params...)
			grants := pushedGrants(t, w.nodes["eu.n0"], key, &peerv1.RegionLeaseAsk{TakesPush: true, TakesDated: tc.takes}, true)
			pushed, dated := len(grants), 0
			for _, gr := range grants {
				if gr.UsableAtNs != 0 || gr.PrevUsableAtNs != 0 {
					dated++
				}
			}
			t.Logf("%d pushes, %d dated", pushed, dated)
			if pushed == 0 {
				t.Fatal("no push")
			}
			if tc.wantDated != (dated > 0) {
				t.Errorf("%d of %d pushes dated; want dated pushes: %v", dated, pushed, tc.wantDated)
			}
		})
	}
}

// A dated push whose usable_at lies before its sending, or further ahead
// of it than a global owner may push (min(2*latency_hint, region_ttl/4)),
// or that was sent further in the future than max_skew, is refused with
// an error naming it, and no token of it is taken.
func TestDatedPushMalformedRefused(t *testing.T) {
	for _, tc := range []struct {
		name         string
		sent, usable time.Duration
	}{{"usable before sent", 1000 * time.Millisecond, 900 * time.Millisecond},
		{"usable far ahead", 1000 * time.Millisecond, 10 * time.Second},
		{"sent in the future", 5 * time.Second, 5050 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			w, key := pushSetup(t)
			r := w.nodes["us.n1"]
			var fx strategy.Effects
			for i := 0; i < 5; i++ { // us.n1's own requests: it asks eu.n0, its upstream
				at := time.Second + time.Duration(i)*time.Millisecond
				r.Request(at, strategy.Request{ID: uint64(500 + i), Key: key, Tokens: 1, Arrival: at}, &fx)
			}
			now := 1070 * time.Millisecond
			b, err := proto.Marshal(&peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_Grant{Grant: &peerv1.RegionLeaseGrant{
				Key: key, Seq: 1<<63 | 7, Tokens: 5, ExpiresNs: int64(now + time.Second), Pushed: true,
				SentAtNs: int64(tc.sent), UsableAtNs: int64(tc.usable)}}})
			if err != nil {
				t.Fatal(err)
			}
			err = r.Receive(now, "eu.n0", b, &fx)
			if err == nil || !strings.Contains(err.Error(), "dated push") {
				t.Errorf("Receive: error %v, want one naming the dated push", err)
			}
			if held, _ := r.Float(now + 2*time.Second); held != 0 {
				t.Errorf("a malformed dated push was taken: %d tokens held", held)
			}
		})
	}
}
