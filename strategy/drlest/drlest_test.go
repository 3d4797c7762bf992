package drlest

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

var members = []strategy.NodeID{"n0", "n1", "n2", "n3"}

func newNode(t testing.TB, mode Mode, self strategy.NodeID, params ...string) *DRL {
	t.Helper()
	p, err := strategy.ParseParams(params)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(mode, strategy.Config{Self: self, Members: members, Rate: bucket.Rate{Tokens: 100, Per: time.Second}, Burst: 40,
		Rand: rand.New(rand.NewPCG(1, 2)), Params: p})
	if err != nil {
		t.Fatal(err)
	}
	d.Start(0, &strategy.Effects{})
	return d
}

func report(t testing.TB, demands map[string]uint64) []byte {
	t.Helper()
	m := &peerv1.DrlEstReport{Interval: 1}
	for _, k := range []string{"a", "b", "c"} {
		if v, ok := demands[k]; ok {
			m.Demands = append(m.Demands, &peerv1.DrlEstDemand{Key: k, MilliTokensPerS: v})
		}
	}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGRDDropProbability: with the peers' estimates summing to T = 400/s
// against C = r = 100/s, GRD admits a request with probability C/T = 1/4
// (GDRL §I-C: dropped with probability (T - C)/T); with T <= C it admits
// all.
func TestGRDDropProbability(t *testing.T) {
	d := newNode(t, GRD, "n0")
	fx := &strategy.Effects{}
	for _, from := range []strategy.NodeID{"n1", "n2", "n3"} {
		if err := d.Receive(time.Millisecond, from, report(t, map[string]uint64{"a": 400_000 / 3, "b": 10_000}), fx); err != nil {
			t.Fatal(err)
		}
	}
	admitted := 0
	const n = 20000
	for i := range n {
		if dec, _ := d.Request(2*time.Millisecond, strategy.Request{ID: uint64(i), Key: "a", Tokens: 1, Arrival: 2 * time.Millisecond}, fx); dec.Allowed {
			admitted++
		}
	}
	if p := float64(admitted) / n; p < 0.24 || p > 0.26 {
		t.Errorf("T = 400/s, C = 100/s: admitted %.3f of requests, want 1/4", p)
	}
	for i := range 1000 {
		if dec, _ := d.Request(2*time.Millisecond, strategy.Request{ID: uint64(n + i), Key: "b", Tokens: 1, Arrival: 2 * time.Millisecond}, fx); !dec.Allowed {
			t.Fatalf("T = 30/s below C: request %d refused", i)
		}
	}
}

// TestEstimateAndReport: a node filters each interval's rate with alpha and
// sends the estimate to every other member; a stale estimate stops
// counting.
func TestEstimateAndReport(t *testing.T) {
	d := newNode(t, GRD, "n0", "interval=1s", "alpha=0.5")
	fx := &strategy.Effects{}
	for i := range 80 {
		d.Request(time.Duration(i)*time.Millisecond, strategy.Request{ID: uint64(i), Key: "a", Tokens: 1, Arrival: time.Duration(i) * time.Millisecond}, fx)
	}
	fx.Reset()
	d.Tick(time.Second, fx)
	if got := d.keys["a"].demand; got != 40 {
		t.Errorf("80 tokens in a 1 s interval at alpha 0.5: estimate %v/s, want 40", got)
	}
	if len(fx.Messages) != 3 {
		t.Fatalf("%d reports sent, want one to each of the 3 other members", len(fx.Messages))
	}
	var m peerv1.DrlEstReport
	if err := proto.Unmarshal(fx.Messages[0].Payload, &m); err != nil || len(m.Demands) != 1 || m.Demands[0].MilliTokensPerS != 40_000 {
		t.Fatalf("report %v (%v), want a: 40,000 milli-tokens/s", &m, err)
	}
	if err := d.Receive(time.Second, "n1", report(t, map[string]uint64{"a": 500_000}), fx); err != nil {
		t.Fatal(err)
	}
	if got := d.total(time.Second+time.Millisecond, d.keys["a"]); got != 540 {
		t.Errorf("T = %v/s, want 40 + 500", got)
	}
	if got := d.total(4*time.Second, d.keys["a"]); got != 40 {
		t.Errorf("T after 3 intervals without n1's report = %v/s, want 40 (n1's estimate stale)", got)
	}
}

// TestFPSShares: fps's rate share is floor/N plus (1 - floor) of r by the
// node's demand among the members' (100/s, floor 0.1, N = 4: n0 with 300
// of 400/s gets 2.5 + 67.5 = 70/s), all of r evenly while no node has
// demand; the burst is split evenly (40/4).
func TestFPSShares(t *testing.T) {
	d := newNode(t, FPS, "n0", "interval=1s", "alpha=1")
	fx := &strategy.Effects{}
	d.Request(0, strategy.Request{ID: 1, Key: "a", Tokens: 1, Arrival: 0}, fx)
	if r, b := d.keys["a"].bucket.Rate(), d.keys["a"].bucket.Burst(); r.PerSec() != 25 || b != 10 {
		t.Errorf("no demand known: (%v, %d), want (25/s, 10)", r, b)
	}
	for i := range 299 {
		d.Request(time.Millisecond, strategy.Request{ID: uint64(2 + i), Key: "a", Tokens: 1, Arrival: time.Millisecond}, fx)
	}
	if err := d.Receive(2*time.Millisecond, "n1", report(t, map[string]uint64{"a": 100_000}), fx); err != nil {
		t.Fatal(err)
	}
	d.Tick(time.Second, fx)
	if r, b := d.keys["a"].bucket.Rate(), d.keys["a"].bucket.Burst(); r.PerSec() != 70 || b != 10 {
		t.Errorf("300 of 400/s: (%v, %d), want (70/s, 10)", r, b)
	}
}

// TestReceiveRefusesBadReports: every bound of wire.go is an error naming
// it, and changes nothing; a report from a non-member is ignored.
func TestReceiveRefusesBadReports(t *testing.T) {
	d := newNode(t, GRD, "n0")
	fx := &strategy.Effects{}
	long := strings.Repeat("k", maxKeyBytes+1)
	for name, m := range map[string]*peerv1.DrlEstReport{
		"empty":    {Demands: []*peerv1.DrlEstDemand{{Key: "", MilliTokensPerS: 1}}},
		"too long": {Demands: []*peerv1.DrlEstDemand{{Key: long, MilliTokensPerS: 1}}},
		"sorted":   {Demands: []*peerv1.DrlEstDemand{{Key: "b", MilliTokensPerS: 1}, {Key: "a", MilliTokensPerS: 1}}},
		"above":    {Demands: []*peerv1.DrlEstDemand{{Key: "a", MilliTokensPerS: maxMilliPerSec + 1}}},
	} {
		b, _ := proto.Marshal(m)
		if err := d.Receive(time.Millisecond, "n1", b, fx); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := d.Receive(time.Millisecond, "n1", []byte{0xff}, fx); err == nil {
		t.Error("an undecodable payload accepted")
	}
	if err := d.Receive(time.Millisecond, "x9", report(t, map[string]uint64{"a": 1000}), fx); err != nil {
		t.Fatal(err)
	}
	if len(d.keys) != 0 {
		t.Errorf("bad or foreign reports left state: %d keys", len(d.keys))
	}
}

// TestParamErrors: out-of-range parameters are refused, naming them.
func TestParamErrors(t *testing.T) {
	for _, bad := range []string{"interval=0s", "alpha=0", "alpha=1.5", "floor=-0.1", "floor=2"} {
		p, _ := strategy.ParseParams([]string{bad})
		name := strings.SplitN(bad, "=", 2)[0]
		_, err := New(FPS, strategy.Config{Self: "n0", Members: members, Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 1,
			Rand: rand.New(rand.NewPCG(1, 2)), Params: p})
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v, want an error naming %s", bad, err, name)
		}
	}
}

// FuzzReceive: no payload panics a node, and a refused one changes nothing.
func FuzzReceive(f *testing.F) {
	f.Add(report(f, map[string]uint64{"a": 1000, "b": 5}))
	f.Add([]byte{0x12, 0x03, 0x0a, 0x01, 0x61})
	f.Fuzz(func(t *testing.T, payload []byte) {
		for _, mode := range []Mode{GRD, FPS} {
			d := newNode(t, mode, "n0")
			before := d.StateBytes()
			if err := d.Receive(time.Millisecond, "n1", payload, &strategy.Effects{}); err != nil && d.StateBytes() != before {
				t.Fatalf("%s: a refused payload changed the state: %d -> %d bytes", mode, before, d.StateBytes())
			}
			d.Tick(time.Second, &strategy.Effects{})
		}
	})
}
