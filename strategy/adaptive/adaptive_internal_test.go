package adaptive

import (
	"fmt"
	"math"
	"math/big"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/strattest"
)

var testRate = bucket.Rate{Tokens: 1, Per: time.Second}

func newNode(t strattest.Fataler, self string, members []string, rate bucket.Rate, burst int64, params ...string) *Adaptive {
	t.Helper()
	a, err := New(strattest.Config(t, self, members, rate, burst, params...))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func nodeNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("n%d", i)
	}
	return out
}

// dump is the node's whole state, for "errors change no state".
func dump(a *Adaptive) string {
	s := fmt.Sprintf("members=%v epoch=%d pend=%v@%v lastSent=%d next=%v\n", a.members, a.epoch, a.pending != nil, a.pendAt, a.lastSent, a.nextStep)
	for _, m := range []map[string]share{a.shares, a.pending} {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			s += fmt.Sprintf("share %q %+v\n", k, m[k])
		}
	}
	keys := make([]string, 0, len(a.keys))
	for k := range a.keys {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		s += fmt.Sprintf("key %q %+v\n", k, *a.keys[k])
	}
	nodes := make([]string, 0, len(a.reports))
	for n := range a.reports {
		nodes = append(nodes, string(n))
	}
	slices.Sort(nodes)
	for _, n := range nodes {
		b, _ := proto.Marshal(a.reports[strategy.NodeID(n)])
		s += fmt.Sprintf("report %s %x\n", n, b)
	}
	return s
}

// Property: whatever the statistics, every re-split key's shares sum to
// (r, b) exactly, over all members, and every member's message lists the
// same keys.
func TestSharesSumExactly(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 9).Draw(t, "nodes")
		rate := bucket.Rate{Tokens: rapid.Int64Range(0, 1000).Draw(t, "tokens"), Per: time.Duration(rapid.Int64Range(1, 10_000).Draw(t, "per_ms")) * time.Millisecond}
		if rate.Tokens == 0 {
			rate = bucket.Rate{}
		}
		burst := rapid.Int64Range(0, 1000).Draw(t, "burst")
		names := nodeNames(n)
		a := newNode(t, "n0", names, rate, burst, "significance="+rapid.SampledFrom([]string{"0", "3"}).Draw(t, "sig"), "min_mean=0",
			"floor="+rapid.SampledFrom([]string{"0", "0.1", "1"}).Draw(t, "floor"))
		keys := []string{"a", "b", "c", "d"}
		for _, m := range names {
			rep := &peerv1.AdaptiveReport{}
			for _, k := range keys {
				if rapid.Bool().Draw(t, "active") {
					rep.Stats = append(rep.Stats, &peerv1.AdaptiveStat{Key: k,
						Offered:     rapid.Int64Range(1, 1<<rapid.IntRange(0, 62).Draw(t, "bits")).Draw(t, "offered"),
						PeakBacklog: rapid.Int64Range(0, burst).Draw(t, "peak")})
				}
			}
			a.reports[strategy.NodeID(m)] = rep
		}
		var fx strategy.Effects
		a.resplit(time.Second, &fx)
		if a.units == 0 {
			return
		}
		msgs := map[strategy.NodeID]*peerv1.AdaptiveShares{}
		for _, m := range fx.Messages {
			var am peerv1.AdaptiveMessage
			if err := proto.Unmarshal(m.Payload, &am); err != nil {
				t.Fatal(err)
			}
			msgs[m.To] = am.GetShares()
		}
		// n0's own shares are its pending targets.
		own := &peerv1.AdaptiveShares{}
		for _, k := range keys {
			if s, ok := a.pending[k]; ok {
				u := int64(0)
				if s.rate.Tokens != 0 {
					u = s.rate.Tokens / a.unitRate.Tokens
				}
				own.Shares = append(own.Shares, &peerv1.AdaptiveShare{Key: k, RateUnits: u, Burst: s.burst})
			}
		}
		msgs["n0"] = own
		if len(msgs) != n {
			t.Fatalf("%d messages for %d nodes", len(msgs), n)
		}
		sumU, sumB := map[string]int64{}, map[string]int64{}
		for _, m := range msgs {
			if len(m.Shares) != len(msgs["n0"].Shares) {
				t.Fatalf("nodes got different key sets")
			}
			for _, s := range m.Shares {
				if s.RateUnits < 0 || s.Burst < 0 {
					t.Fatalf("negative share %v", s)
				}
				sumU[s.Key] += s.RateUnits
				sumB[s.Key] += s.Burst
			}
		}
		for k, u := range sumU {
			if (rate.Tokens != 0 && u != a.units) || sumB[k] != burst {
				t.Fatalf("key %s: units %d (want %d), burst %d (want %d)", k, u, a.units, sumB[k], burst)
			}
		}
		// units * (r/units) is r exactly.
		if rate.Tokens != 0 {
			lhs := new(big.Int).Mul(big.NewInt(a.unitRate.Tokens*a.units), big.NewInt(int64(rate.Per)))
			rhs := new(big.Int).Mul(big.NewInt(rate.Tokens), big.NewInt(int64(a.unitRate.Per)))
			if lhs.Cmp(rhs) != 0 {
				t.Fatalf("units %d of %v do not make %v", a.units, a.unitRate, rate)
			}
		}
	})
}

func TestApportion(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		total := rapid.Int64Range(0, 1<<62).Draw(t, "total")
		ws := rapid.SliceOfN(rapid.Uint64(), 1, 20).Draw(t, "weights")
		out := apportion(total, ws)
		var sum int64
		for _, o := range out {
			if o < 0 {
				t.Fatalf("negative %v", out)
			}
			sum += o
		}
		if sum != total {
			t.Fatalf("sum %d, want %d", sum, total)
		}
	})
	if got := apportion(10, []uint64{1, 1, 1}); !slices.Equal(got, []int64{4, 3, 3}) {
		t.Fatalf("got %v", got)
	}
	if got := apportion(5, []uint64{0, 0}); !slices.Equal(got, []int64{3, 2}) {
		t.Fatalf("got %v", got)
	}
	if got := apportion(7, []uint64{0, 5, 2}); !slices.Equal(got, []int64{0, 5, 2}) {
		t.Fatalf("got %v", got)
	}
}

// Errors change no state.
func TestReceiveErrors(t *testing.T) {
	bad := map[string]proto.Message{
		"no body":        &peerv1.AdaptiveMessage{},
		"empty stat key": &peerv1.AdaptiveMessage{Body: &peerv1.AdaptiveMessage_Report{Report: &peerv1.AdaptiveReport{Stats: []*peerv1.AdaptiveStat{{Offered: 1}}}}},
		"unsorted":       &peerv1.AdaptiveMessage{Body: &peerv1.AdaptiveMessage_Report{Report: &peerv1.AdaptiveReport{Stats: []*peerv1.AdaptiveStat{{Key: "b"}, {Key: "a"}}}}},
		"negative":       &peerv1.AdaptiveMessage{Body: &peerv1.AdaptiveMessage_Report{Report: &peerv1.AdaptiveReport{Stats: []*peerv1.AdaptiveStat{{Key: "a", Offered: -1}}}}},
		"units":          &peerv1.AdaptiveMessage{Body: &peerv1.AdaptiveMessage_Shares{Shares: &peerv1.AdaptiveShares{Epoch: 9, Units: 7}}},
		"rate units":     &peerv1.AdaptiveMessage{Body: &peerv1.AdaptiveMessage_Shares{Shares: &peerv1.AdaptiveShares{Epoch: 9, Units: 1000, Shares: []*peerv1.AdaptiveShare{{Key: "a", RateUnits: 1001}}}}},
		"burst":          &peerv1.AdaptiveMessage{Body: &peerv1.AdaptiveMessage_Shares{Shares: &peerv1.AdaptiveShares{Epoch: 9, Units: 1000, Shares: []*peerv1.AdaptiveShare{{Key: "a", Burst: 6}}}}},
		"dup share":      &peerv1.AdaptiveMessage{Body: &peerv1.AdaptiveMessage_Shares{Shares: &peerv1.AdaptiveShares{Epoch: 9, Units: 1000, Shares: []*peerv1.AdaptiveShare{{Key: "a"}, {Key: "a"}}}}},
		// Out of bounds (received at 1 s; burst 5): a backlog above the
		// burst, epochs no adaptor can have numbered by now.
		"backlog > burst": &peerv1.AdaptiveMessage{Body: &peerv1.AdaptiveMessage_Report{Report: &peerv1.AdaptiveReport{Stats: []*peerv1.AdaptiveStat{{Key: "a", Offered: 1, PeakBacklog: 6}}}}},
		"report epoch":    &peerv1.AdaptiveMessage{Body: &peerv1.AdaptiveMessage_Report{Report: &peerv1.AdaptiveReport{Epoch: math.MaxUint64}}},
		"shares epoch":    &peerv1.AdaptiveMessage{Body: &peerv1.AdaptiveMessage_Shares{Shares: &peerv1.AdaptiveShares{Epoch: 1 << 40, Units: 1000}}},
	}
	for name, m := range bad {
		for _, self := range []string{"n0", "n1"} {
			a := newNode(t, self, nodeNames(3), testRate, 5)
			var fx strategy.Effects
			a.Request(0, strategy.Request{ID: 1, Key: "a", Tokens: 1}, &fx)
			before, sb := dump(a), a.StateBytes()
			payload, _ := proto.Marshal(m)
			from := strategy.NodeID("n0")
			if self == "n0" {
				from = "n2"
			}
			if err := a.Receive(time.Second, from, payload, &fx); err == nil {
				t.Errorf("%s at %s: accepted", name, self)
			}
			if dump(a) != before || a.StateBytes() != sb || len(fx.Messages) != 0 {
				t.Fatalf("%s at %s: state changed", name, self)
			}
		}
	}
}

func FuzzReceive(f *testing.F) {
	f.Add([]byte{})
	f.Add(mustMarshal(&peerv1.AdaptiveMessage{Body: &peerv1.AdaptiveMessage_Report{Report: &peerv1.AdaptiveReport{Epoch: 3, Stats: []*peerv1.AdaptiveStat{{Key: "a", Offered: 5, PeakBacklog: 2}, {Key: "b", Offered: 1}}}}}))
	f.Add(mustMarshal(&peerv1.AdaptiveMessage{Body: &peerv1.AdaptiveMessage_Shares{Shares: &peerv1.AdaptiveShares{Epoch: 2, Units: 1000,
		Members: newNode(f, "n0", nodeNames(3), testRate, 5).memHash, Shares: []*peerv1.AdaptiveShare{{Key: "a", RateUnits: 900, Burst: 4}}}}}))
	f.Fuzz(func(t *testing.T, payload []byte) {
		for _, self := range []string{"n0", "n1"} {
			a := newNode(t, self, nodeNames(3), testRate, 5)
			var fx strategy.Effects
			a.Request(0, strategy.Request{ID: 1, Key: "a", Tokens: 1}, &fx)
			before, sb := dump(a), a.StateBytes()
			from := strategy.NodeID("n0")
			if self == "n0" {
				from = "n2"
			}
			if err := a.Receive(time.Second, from, payload, &fx); err != nil {
				if dump(a) != before || a.StateBytes() != sb {
					t.Fatal("a refused payload changed the state")
				}
				continue
			}
			// Accepted: shares stay within (r, b) and requests still work.
			for k, s := range a.shares {
				if s.burst < 0 || s.burst > 5 || rateLess(testRate, s.rate) {
					t.Fatalf("key %q: share %+v", k, s)
				}
			}
			a.Request(2*time.Second, strategy.Request{ID: 2, Key: "a", Tokens: 1, Arrival: 2 * time.Second}, &fx)
			a.Tick(2*time.Second, &fx)
			a.Tick(3*time.Second, &fx)
		}
	})
}
