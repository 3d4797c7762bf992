package cluster

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/registry"
)

// fuzzRules is one rule per registered strategy, named after it, with a
// small rate and burst and short timers, so that a brief exchange makes
// every strategy that talks send its messages.
func fuzzRules() []rule.Rule {
	params := map[string][]string{
		"owner":    {"hold=1ms", "timeout=100ms"},
		"gcounter": {"gossip=5ms"},
		"tbqueue":  {"gossip=5ms"},
		"gdrl":     {"interval=5ms"},
		"adaptive": {"step=5ms", "window=20ms", "min_mean=0", "significance=0"},
	}
	var rules []rule.Rule
	for _, info := range registry.List() {
		rules = append(rules, rule.Rule{Name: info.Name, Rate: bucket.Rate{Tokens: 10, Per: time.Second}, Burst: 5,
			Strategy: info.Name, Params: params[info.Name]})
	}
	return rules
}

// recorder is a Transport that records every frame sent through it.
type recorder struct {
	Transport
	mu     sync.Mutex
	frames []Frame
}

func (r *recorder) Send(to strategy.NodeID, f Frame) error {
	r.mu.Lock()
	r.frames = append(r.frames, Frame{Rule: f.Rule, From: f.From, Payload: slices.Clone(f.Payload)})
	r.mu.Unlock()
	return r.Transport.Send(to, f)
}

// captureFrames runs a real two-node exchange (n0, n1) under rules and
// returns the frames both nodes sent: meaningful payloads for the seed
// corpus.
func captureFrames(tb testing.TB, rules []rule.Rule) []Frame {
	tb.Helper()
	net := NewMemNetwork()
	ids := []strategy.NodeID{"n0", "n1"}
	epoch := time.Now()
	recs := map[strategy.NodeID]*recorder{}
	for _, id := range ids {
		ep, err := net.Endpoint(id)
		if err != nil {
			tb.Fatal(err)
		}
		recs[id] = &recorder{Transport: ep}
	}
	nodes := map[strategy.NodeID]*Node{}
	for _, id := range ids {
		n, err := New(Config{Self: id, Members: ids, Rules: rules, Transport: recs[id], Seed: 3, Epoch: epoch})
		if err != nil {
			tb.Fatal(err)
		}
		nodes[id] = n
	}
	// Uneven traffic on a few keys, both nodes, for about 60ms: every
	// strategy that gossips gets several rounds, owner forwards both ways.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := range 12 {
		for _, r := range rules {
			for j, id := range ids {
				for k := range 1 + (i+j)%3 {
					if _, err := nodes[id].Check(ctx, r.Name, fmt.Sprintf("k%d", k), int64(1+k%2)); err != nil {
						tb.Fatalf("%s: Check(%s): %v", id, r.Name, err)
					}
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, n := range nodes {
		n.Close()
	}
	var out []Frame
	for _, id := range ids {
		r := recs[id]
		r.mu.Lock()
		out = append(out, r.frames...)
		r.mu.Unlock()
	}
	return out
}

// hookTransport is a Transport that keeps the receive callback the node
// registered, so that a test can hand it frames with any From. It drops
// (and counts) the frames the node sends to itself: a fuzzed frame "from"
// the node itself gets its replies addressed back to it, which no real
// transport would carry (grpcpeer's peer book leaves Self out) and which
// would make the node's received counts depend on timing.
type hookTransport struct {
	Transport
	self   strategy.NodeID
	mu     sync.Mutex
	recv   func(Frame)
	toSelf atomic.Int64
}

func (h *hookTransport) Send(to strategy.NodeID, f Frame) error {
	if to == h.self {
		h.toSelf.Add(1)
		return nil
	}
	return h.Transport.Send(to, f)
}

func (h *hookTransport) Listen(recv func(Frame)) {
	h.mu.Lock()
	h.recv = recv
	h.mu.Unlock()
	h.Transport.Listen(recv)
}

// FuzzDeliver feeds one running node (n0 of {n0, n1}, a rule of every
// strategy) arbitrary frames through its transport's receive path: the
// rule picked among the node's rules by ruleSel or named by ruleName, the
// payload arbitrary, and From either n1 (sent through n1's MemNetwork
// endpoint) or arbitrary (handed to the callback the node registered with
// Listen). After each frame a Check of every rule must still answer within
// the timeout, and the node's Stats must account for the frame exactly
// once: received by its rule, or counted as for an unknown rule (or
// dropped on a full inbox).
func FuzzDeliver(f *testing.F) {
	rules := fuzzRules()
	names := make([]string, len(rules))
	for i, r := range rules {
		names[i] = r.Name
	}
	frames := captureFrames(f, rules)
	// A few seeds per rule: the first frames n1 sent to n0 (what the
	// fuzzed node, n0, receives in a real run: forwards, reports, deltas)
	// and the first n0 sent (verdicts, shares), handed over as from n1.
	perRule := map[string]int{}
	perSender := map[[2]string]int{}
	for _, fr := range frames {
		k := [2]string{fr.Rule, string(fr.From)}
		if perSender[k] >= 3 {
			continue
		}
		perSender[k]++
		perRule[fr.Rule]++
		f.Add(uint8(slices.Index(names, fr.Rule)), "", "n1", fr.From == "n1", fr.Payload)
	}
	f.Logf("seed frames per rule (of %d captured): %v", len(frames), perRule)
	for i, name := range names {
		if perRule[name] == 0 { // strategies that send nothing (local, central, static)
			f.Add(uint8(i), "", "n1", true, []byte{0x0a, 0x02, 0x08, 0x01})
		}
	}
	f.Add(uint8(255), "no-such-rule", "n1", true, []byte{0x08, 0x01})
	f.Add(uint8(255), "", "", false, []byte{})
	f.Add(uint8(200), "owner", "intruder", false, []byte{0xff, 0xff, 0xff, 0xff, 0x0f})

	fn := newFuzzNode(f, rules)
	f.Fuzz(func(t *testing.T, ruleSel uint8, ruleName, from string, viaPeer bool, payload []byte) {
		fn.deliver(t, ruleSel, ruleName, from, viaPeer, payload)
	})
}

// fuzzNode is FuzzDeliver's node: n0 of {n0, n1} on a MemNetwork, with n1
// a bare endpoint that sends to n0 and receives nothing.
type fuzzNode struct {
	node   *Node
	peer   Transport
	recv   func(Frame) // the callback the node registered with Listen
	names  []string
	ownKey string // a key n0 owns: owner decides it without the network
}

func newFuzzNode(tb testing.TB, rules []rule.Rule) *fuzzNode {
	tb.Helper()
	net := NewMemNetwork()
	ids := []strategy.NodeID{"n0", "n1"}
	ep0, err := net.Endpoint("n0")
	if err != nil {
		tb.Fatal(err)
	}
	peer, err := net.Endpoint("n1")
	if err != nil {
		tb.Fatal(err)
	}
	hook := &hookTransport{Transport: ep0, self: "n0"}
	node, err := New(Config{Self: "n0", Members: ids, Rules: rules, Transport: hook, Seed: 5})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		node.Close()
		peer.Close()
	})
	fn := &fuzzNode{node: node, peer: peer}
	hook.mu.Lock()
	fn.recv = hook.recv
	hook.mu.Unlock()
	if fn.recv == nil {
		tb.Fatal("the node registered no receive callback")
	}
	for _, r := range rules {
		fn.names = append(fn.names, r.Name)
	}
	for i := range 1000 {
		if k := fmt.Sprintf("key-%d", i); rendezvous.Owner(k, ids) == "n0" {
			fn.ownKey = k
			break
		}
	}
	return fn
}

// deliver hands one frame to the node and checks that it still answers
// and that its Stats account for the frame.
func (fn *fuzzNode) deliver(t *testing.T, ruleSel uint8, ruleName, from string, viaPeer bool, payload []byte) {
	node, peer, recv, names, ownKey := fn.node, fn.peer, fn.recv, fn.names, fn.ownKey
	rule := ruleName
	if int(ruleSel) < 4*len(names) {
		rule = names[int(ruleSel)%len(names)]
	}
	before := node.Stats()
	if viaPeer {
		if err := peer.Send("n0", Frame{Rule: rule, From: strategy.NodeID(from), Payload: payload}); err != nil {
			t.Fatalf("send to n0: %v", err)
		}
	} else {
		recv(Frame{Rule: rule, From: strategy.NodeID(from), Payload: slices.Clone(payload)})
	}
	// The frame is in the inbox ahead of these checks: once they
	// answer, the loop has handled it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, name := range names {
		if _, err := node.Check(ctx, name, ownKey, 1); err != nil {
			// A stuck loop: show where (the node's goroutine among them).
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("Check(%s) after a frame for %q from %q (%d bytes): %v\n%s", name, rule, from, len(payload), err, buf)
		}
	}
	after := node.Stats()
	dropped := after.InboxDropped - before.InboxDropped
	unknown := after.UnknownRuleFrames - before.UnknownRuleFrames
	bad := after.BadSender - before.BadSender
	sender := from
	if viaPeer {
		sender = "n1" // MemNetwork stamps the sending endpoint's id
	}
	if wantBad := sender == "" || !utf8.ValidString(sender); (bad == 1) != wantBad {
		t.Fatalf("frame from %q: counted as from a bad sender %d times, want %v", from, bad, wantBad)
	}
	var received, bytes int64
	for _, name := range names {
		received += after.Rules[name].MessagesReceived - before.Rules[name].MessagesReceived
		bytes += after.Rules[name].BytesReceived - before.Rules[name].BytesReceived
	}
	if bad == 1 {
		return
	}
	if dropped+unknown+received != 1 {
		t.Fatalf("frame for %q: received %d, unknown rule %d, inbox dropped %d; want exactly one frame accounted",
			rule, received, unknown, dropped)
	}
	_, known := before.Rules[rule]
	switch {
	case dropped == 1:
	case known && (received != 1 || after.Rules[rule].MessagesReceived-before.Rules[rule].MessagesReceived != 1 ||
		bytes != int64(len(payload))):
		t.Fatalf("frame for rule %q (%d bytes): received %d frames, %d bytes", rule, len(payload), received, bytes)
	case !known && unknown != 1:
		t.Fatalf("frame for unknown rule %q not counted as such (received %d)", rule, received)
	}
}
