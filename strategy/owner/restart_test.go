package owner

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// TestRestartDefersToOldOwner (restart.go): a node started late forwards
// the keys it owns to their owner among the other members until that
// node shows it sees it (here a hand-over of another key's level); then
// it decides them itself. A node started at time 0 decides at once.
func TestRestartDefersToOldOwner(t *testing.T) {
	key := keyOwnedBy("n0")
	alt := rendezvous.Owner(key, []strategy.NodeID{"n1", "n2"})
	o := newNode(t, "n0", "hold=0s", "warmup=1s")
	start := 10 * time.Second
	o.Start(start, &strategy.Effects{})

	fx := &strategy.Effects{}
	if _, ok := o.Request(start, strategy.Request{ID: 1, Key: key, Tokens: 1, Arrival: start}, fx); ok {
		t.Fatal("a restarted node decided its key before any peer showed it sees it")
	}
	if len(fx.Messages) != 1 || fx.Messages[0].To != alt || decode(t, fx.Messages[0]).GetForward() == nil {
		t.Fatalf("sent %v, want a forward to %s, the key's owner among the others", fx.Messages, alt)
	}

	seenBy(t, o, start+time.Millisecond, alt)
	fx.Reset()
	at := start + 2*time.Second // after the warm-up the sign started
	if d, ok := o.Request(at, strategy.Request{ID: 2, Key: key, Tokens: 1, Arrival: at}, fx); !ok || !d.Allowed {
		t.Fatalf("after %s's sign: %v %v, want the key decided here at once", alt, d, ok)
	}

	fresh := newNode(t, "n0", "hold=0s")
	fx.Reset()
	if d, ok := fresh.Request(0, strategy.Request{ID: 3, Key: key, Tokens: 1}, fx); !ok || !d.Allowed {
		t.Fatalf("a node started at 0: %v %v, want its key decided at once", d, ok)
	}

	// A rule added to a running node (strategy.Config.Added: a reload, a
	// derived rule) is no restart: its keys are not deferred (the merge of
	// the deferral first broke cluster's TestDerivedRuleForwarded).
	added, err := New(strategy.Config{Self: "n0", Members: members, Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 2,
		Rand: rand.New(rand.NewPCG(1, 2)), Params: mustParams(t, "hold=0s"), LatencyHint: time.Millisecond, Added: true})
	if err != nil {
		t.Fatal(err)
	}
	added.Start(start, &strategy.Effects{})
	if alt := added.deferTo(key); alt != "" {
		t.Fatalf("an added rule defers %q to %s", key, alt)
	}
}

func mustParams(t *testing.T, params ...string) strategy.Params {
	t.Helper()
	p, err := strategy.ParseParams(params)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
