package cluster

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// recordingTransport records the frames sent through it.
type recordingTransport struct {
	mu   sync.Mutex
	sent map[strategy.NodeID][]string // payloads per peer, in order
}

func (r *recordingTransport) Send(to strategy.NodeID, f Frame) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent[to] = append(r.sent[to], string(f.Payload))
	return nil
}
func (r *recordingTransport) Listen(func(Frame)) {}
func (r *recordingTransport) Close() error       { return nil }

func (r *recordingTransport) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := 0
	for _, s := range r.sent {
		c += len(s)
	}
	return c
}

// TestTurnOutbox: frames a strategy sends during a turn of the loop reach
// the transport only at the turn's end, every one of them, in the order
// they were sent to each peer.
func TestTurnOutbox(t *testing.T) {
	tr := &recordingTransport{sent: map[strategy.NodeID][]string{}}
	n, err := New(Config{Self: "n0", Transport: tr,
		Rules: []rule.Rule{{Name: "r", Rate: bucket.Rate{Tokens: 10, Per: time.Second}, Burst: 10, Strategy: "local"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	before := tr.count() // what Start sent, outside a turn
	var during int
	err = n.Inspect(context.Background(), func(time.Duration, rule.Rule, strategy.Strategy) {
		d := loopDriver{n}
		for _, m := range []struct {
			to strategy.NodeID
			p  string
		}{{"p1", "a"}, {"p2", "b"}, {"p1", "c"}, {"p2", "d"}, {"p1", "e"}} {
			d.Send(0, m.to, []byte(m.p))
		}
		during = tr.count() - before
	})
	if err != nil {
		t.Fatal(err)
	}
	if during != 0 {
		t.Fatalf("%d frames reached the transport during the turn, want 0 (sent at its end)", during)
	}
	deadline := time.Now().Add(5 * time.Second)
	for tr.count()-before < 5 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if got := tr.sent["p1"]; !slices.Equal(got, []string{"a", "c", "e"}) {
		t.Fatalf("p1 got %q, want a, c, e", got)
	}
	if got := tr.sent["p2"]; !slices.Equal(got, []string{"b", "d"}) {
		t.Fatalf("p2 got %q, want b, d", got)
	}
	if st := n.Stats().Rules["r"]; st.MessagesSent != 5 || st.SendErrors != 0 {
		t.Fatalf("stats %+v, want 5 messages sent, no errors", st)
	}
}
