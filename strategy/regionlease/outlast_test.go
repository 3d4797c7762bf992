package regionlease_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// outlastRun has us.n2 (a remote regional owner taking dated pushes, 200
// tokens/s) ask burstSetup's key first, at 10 ms, and be lent its share
// of the burst (50 tokens; it reports none of them used), while the
// global owner eu.n0's own requests (500/s from 10 ms) drain the bucket
// (r = 100/s, b = 100). It returns the tokens eu.n0 pushed to us.n2 from
// 300 ms to 700 ms, and, when report is set, from 800 ms to 1.2 s after
// us.n2 reported all 50 used at 750 ms.
func outlastRun(t *testing.T, report bool, params ...string) (before, after int64) {
	g, key := burstSetup(t, append([]string{"region_split=demand"}, params...)...)
	gr := askWith(t, g, 10*time.Millisecond, "us.n2", &peerv1.RegionLeaseAsk{Key: key, Seq: 1, Tokens: 5, DemandMtps: 200_000, TakesPush: true, TakesDated: true})
	if gr.Tokens != 50 {
		t.Fatalf("us.n2's first ask got %d tokens, want its share of the burst, 50", gr.Tokens)
	}
	seq := uint64(1)
	for at := 10 * time.Millisecond; at < 1200*time.Millisecond; at += time.Millisecond {
		var fx strategy.Effects
		if at%(2*time.Millisecond) == 0 {
			g.Request(at, strategy.Request{ID: uint64(at), Key: key, Tokens: 1, Arrival: at}, &fx)
		}
		if at%(100*time.Millisecond) == 0 { // us.n2 keeps its demand fresh (it holds its stock)
			seq++
			askWith(t, g, at, "us.n2", &peerv1.RegionLeaseAsk{Key: key, Seq: seq, Tokens: 1, DemandMtps: 200_000, TakesPush: true, TakesDated: true})
		}
		if report && at == 750*time.Millisecond {
			b, err := proto.Marshal(&peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_Used{Used: &peerv1.RegionLeaseUsed{Key: key, Seq: 1, Used: 50}}})
			if err != nil {
				t.Fatal(err)
			}
			if err := g.Receive(at, "us.n2", b, &fx); err != nil {
				t.Fatal(err)
			}
		}
		g.Tick(at, &fx)
		for _, p := range pushesIn(t, &fx) {
			if p.to != "us.n2" {
				continue
			}
			switch {
			case at >= 300*time.Millisecond && at < 700*time.Millisecond:
				before += p.grant.Tokens
			case at >= 800*time.Millisecond:
				after += p.grant.Tokens
			}
		}
	}
	return before, after
}

// A region whose reserve outlasts the global owner's region's by more
// than outlast gets no part of the refill until it no longer does
// (outlast.go): us.n2 holds 50 tokens at 200/s (they last 0.3 s at its
// demand less its part of the refill) while eu.n0's bucket is dry, so it
// gets no push from 300 to 700 ms; once it reports them used it gets its
// part again. With outlast=0 (the rule off) it gets pushes throughout,
// which the test checks too so that it can fail.
func TestOutlastingRegionWaits(t *testing.T) {
	before, after := outlastRun(t, true)
	t.Logf("default: pushed to us.n2 %d tokens from 300 to 700 ms, %d from 800 ms on (after its report)", before, after)
	if before != 0 {
		t.Errorf("us.n2 outlasts eu.n0's region by 0.3 s: pushed %d tokens from 300 to 700 ms, want 0", before)
	}
	if after == 0 {
		t.Errorf("us.n2 reported its reserve used: no push from 800 ms on")
	}
	off, _ := outlastRun(t, false, "outlast=0")
	t.Logf("outlast=0: pushed to us.n2 %d tokens from 300 to 700 ms", off)
	if off == 0 {
		t.Errorf("outlast=0: no push to us.n2 from 300 to 700 ms: the test cannot tell the rule from its absence")
	}
}
