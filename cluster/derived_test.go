package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// testDeriver derives "<base>~<burst>" from the rule named base among
// rules: the same strategy and params, burst and rate the number (per
// hour: no refill within a test), Base and Seed base.
func testDeriver(rules ...rule.Rule) Deriver {
	return func(name string) (Derived, error) {
		base, n, ok := strings.Cut(name, "~")
		b, err := strconv.ParseInt(n, 10, 64)
		if !ok || err != nil || b <= 0 {
			return Derived{}, fmt.Errorf("%w: %q", ErrNotDerived, name)
		}
		for _, r := range rules {
			if r.Name == base {
				r.Name, r.Burst, r.Rate.Tokens = name, b, b
				return Derived{Rule: r, Base: base, Seed: base}, nil
			}
		}
		return Derived{}, fmt.Errorf("%w: %q: no base %q", ErrNotDerived, name, base)
	}
}

// newDerivedCluster is newCluster with every node's Deriver, and bounds.
func newDerivedCluster(t *testing.T, n, maxDerived, perBase int, rules ...rule.Rule) *testCluster {
	t.Helper()
	net := NewMemNetwork()
	c := &testCluster{net: net, epoch: time.Now(), rules: rules, nodes: map[strategy.NodeID]*Node{}}
	for i := range n {
		c.ids = append(c.ids, strategy.NodeID(fmt.Sprintf("n%d", i)))
	}
	eps := map[strategy.NodeID]Transport{}
	for _, id := range c.ids {
		ep, err := net.Endpoint(id)
		if err != nil {
			t.Fatal(err)
		}
		eps[id] = ep
	}
	for _, id := range c.ids {
		node, err := New(Config{Self: id, Members: c.ids, Rules: rules, Transport: eps[id], Seed: 7, Epoch: c.epoch,
			Derive: testDeriver(rules...), MaxDerived: maxDerived, MaxDerivedPerBase: perBase})
		if err != nil {
			t.Fatal(err)
		}
		c.nodes[id] = node
		t.Cleanup(func() { node.Close() })
	}
	return c
}

func ensure(t *testing.T, n *Node, name string) error {
	t.Helper()
	d, err := testDeriver(rule.Rule{Name: "base", Rate: slow, Burst: 10, Strategy: "owner", Params: []string{"hold=0s"}},
		rule.Rule{Name: "other", Rate: slow, Burst: 10, Strategy: "owner", Params: []string{"hold=0s"}})(name)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return n.EnsureDerived(ctx, d)
}

// allowedOf counts the allowed checks of n checks of one token.
func allowedOf(t *testing.T, node *Node, rule, key string, n int) int {
	t.Helper()
	ok := 0
	for range n {
		if check(t, node, rule, key, 1).Allowed {
			ok++
		}
	}
	return ok
}

// TestDerivedRuleForwarded: a derived rule created at one node is created
// at the key's owner by the forwarded check's frame, and decided there
// with its own burst; the level of the base rule's key is carried over.
func TestDerivedRuleForwarded(t *testing.T) {
	base := rule.Rule{Name: "base", Rate: slow, Burst: 10, Strategy: "owner", Params: []string{"hold=0s"}}
	c := newDerivedCluster(t, 3, 0, 0, base, rule.Rule{Name: "other", Rate: slow, Burst: 10, Strategy: "owner", Params: []string{"hold=0s"}})
	n0, n1 := c.nodes["n0"], c.nodes["n1"]
	key := keyOwnedBy(t, "n1", c.ids)
	var fresh, back string
	for i := 0; back == ""; i++ {
		if k := fmt.Sprintf("fresh-%d", i); rendezvous.Owner(k, c.ids) == "n1" {
			fresh, back = k, fresh
		}
	}

	// 8 of the base's 10 spent at the owner, through n0.
	if got := allowedOf(t, n0, "base", key, 8); got != 8 {
		t.Fatalf("base: %d of 8 allowed", got)
	}
	if _, err := n0.Check(context.Background(), "base~5", key, 1); err == nil {
		t.Fatal("a derived rule answered before EnsureDerived")
	}
	if err := ensure(t, n0, "base~5"); err != nil {
		t.Fatal(err)
	}
	if err := ensure(t, n0, "base~5"); err != nil { // again: nothing to do
		t.Fatal(err)
	}
	// At the owner n1 the rule comes from the frame, its key from the
	// base's level: 2 left (of the new burst 5).
	if got := allowedOf(t, n0, "base~5", key, 4); got != 2 {
		t.Errorf("base~5 after 8 of 10 spent: %d of 4 allowed, want the 2 carried over", got)
	}
	if _, ok := n1.Rule("base~5"); !ok || n1.DerivedRules() != 1 || n0.DerivedRules() != 1 {
		t.Errorf("derived rules: n0 %d, n1 %d (has base~5: %v); want 1 each", n0.DerivedRules(), n1.DerivedRules(), ok)
	}
	// A key the base never saw starts full at the new burst.
	if got := allowedOf(t, n0, "base~5", fresh, 7); got != 5 {
		t.Errorf("base~5, fresh key: %d of 7 allowed, want 5", got)
	}
	// A sibling of the same base starts from the lowest level of the
	// base's and the first sibling's: 0 left of key.
	if err := ensure(t, n1, "base~20"); err != nil {
		t.Fatal(err)
	}
	if got := allowedOf(t, n1, "base~20", key, 3); got != 0 {
		t.Errorf("base~20 after base~5 spent key: %d allowed, want 0", got)
	}
	// The fresh key: base~5 spent it all too.
	if got := allowedOf(t, n1, "base~20", fresh, 3); got != 0 {
		t.Errorf("base~20, fresh key spent under base~5: %d allowed, want 0", got)
	}
	// Back to the base rule: a key it holds no bucket for starts from what
	// its derived rules left of it (5 of 5 spent under base~5).
	if got := allowedOf(t, n0, "base~5", back, 5); got != 5 {
		t.Fatalf("base~5, key back: %d of 5", got)
	}
	if got := allowedOf(t, n0, "base", back, 3); got != 0 {
		t.Errorf("base after base~5 spent key back: %d of 3 allowed, want 0", got)
	}
	// A frame for a name no Deriver knows is counted as for an unknown rule.
	if got := n1.Stats().UnknownRuleFrames; got != 0 {
		t.Errorf("unknown-rule frames %d, want 0", got)
	}
}

// TestDerivedBounds: EnsureDerived refuses beyond MaxDerivedPerBase of one
// base and MaxDerived in all, with ErrDerivedLimit, counted; nothing is
// created then.
func TestDerivedBounds(t *testing.T) {
	base := rule.Rule{Name: "base", Rate: slow, Burst: 10, Strategy: "owner", Params: []string{"hold=0s"}}
	other := rule.Rule{Name: "other", Rate: slow, Burst: 10, Strategy: "owner", Params: []string{"hold=0s"}}
	c := newDerivedCluster(t, 1, 3, 2, base, other)
	n0 := c.nodes["n0"]
	for _, name := range []string{"base~1", "base~2"} {
		if err := ensure(t, n0, name); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	err := ensure(t, n0, "base~3")
	if !errors.Is(err, ErrDerivedLimit) || !strings.Contains(err.Error(), `2 derived rules of "base"`) {
		t.Errorf("third of one base: %v, want ErrDerivedLimit naming the base", err)
	}
	if err := ensure(t, n0, "other~1"); err != nil {
		t.Fatalf("other~1: %v", err)
	}
	if err := ensure(t, n0, "other~2"); !errors.Is(err, ErrDerivedLimit) || !strings.Contains(err.Error(), "holds 3 derived rules") {
		t.Errorf("fourth in all: %v, want ErrDerivedLimit naming the global bound", err)
	}
	if st := n0.Stats(); st.DerivedRules != 3 || st.DerivedRefused != 2 {
		t.Errorf("stats: %d derived, %d refused; want 3 and 2", st.DerivedRules, st.DerivedRefused)
	}
	if _, ok := n0.Rule("base~3"); ok {
		t.Error("a refused derived rule exists")
	}
	// Bad bounds are refused at New.
	if _, err := soloNode(t, Config{Rules: []rule.Rule{base}, MaxDerived: -1}); err == nil {
		t.Error("MaxDerived -1 accepted")
	}
}

// TestDerivedSetRules: a reload keeps a derived rule the Deriver still
// derives (with its buckets), drops one it no longer does, and a static
// rule of the same name wins.
func TestDerivedSetRules(t *testing.T) {
	base := rule.Rule{Name: "base", Rate: slow, Burst: 10, Strategy: "owner", Params: []string{"hold=0s"}}
	other := rule.Rule{Name: "other", Rate: slow, Burst: 10, Strategy: "owner", Params: []string{"hold=0s"}}
	c := newDerivedCluster(t, 1, 0, 0, base, other)
	n0 := c.nodes["n0"]
	for _, name := range []string{"base~3", "other~3"} {
		if err := ensure(t, n0, name); err != nil {
			t.Fatal(err)
		}
	}
	if got := allowedOf(t, n0, "base~3", "k", 2); got != 2 {
		t.Fatalf("base~3: %d of 2", got)
	}
	// The Deriver of the new config knows only base's.
	n0.SetDeriver(testDeriver(base))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ch, err := n0.SetRules(ctx, []rule.Rule{base})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ch.Kept, []string{"base", "base~3"}) || !slices.Equal(ch.Removed, []string{"other", "other~3"}) {
		t.Errorf("change %+v: want base and base~3 kept, other and other~3 removed", ch)
	}
	if got := allowedOf(t, n0, "base~3", "k", 2); got != 1 {
		t.Errorf("base~3 after the reload: %d of 2 allowed, want its last token (kept)", got)
	}
	// A static rule of a derived rule's name replaces it.
	static := rule.Rule{Name: "base~3", Rate: slow, Burst: 7, Strategy: "local"}
	if _, err := n0.SetRules(ctx, []rule.Rule{base, static}); err != nil {
		t.Fatal(err)
	}
	if r, _ := n0.Rule("base~3"); r.Burst != 7 || n0.DerivedRules() != 0 {
		t.Errorf("after a static rule of its name: %+v, %d derived; want the static one, 0", r, n0.DerivedRules())
	}
	// Without a Deriver, SetRules drops every derived rule.
	if err := ensure(t, n0, "base~4"); err != nil {
		t.Fatal(err)
	}
	n0.SetDeriver(nil)
	if _, err := n0.SetRules(ctx, []rule.Rule{base}); err != nil {
		t.Fatal(err)
	}
	if n0.DerivedRules() != 0 || !slices.Equal(n0.Rules(), []string{"base"}) {
		t.Errorf("without a Deriver: rules %v, %d derived", n0.Rules(), n0.DerivedRules())
	}
}

// TestFewerTokens compares levels in tokens across tick sizes.
func TestFewerTokens(t *testing.T) {
	ks := func(level, per int64) strategy.KeyState {
		return strategy.KeyState{Level: level, TicksPerToken: per, Capacity: level + 1}
	}
	for _, x := range []struct {
		a, b strategy.KeyState
		want bool
	}{
		{ks(1, 1), ks(2, 1), true},
		{ks(2, 1), ks(1, 1), false},
		{ks(3, 2), ks(1, 1), false}, // 1.5 vs 1
		{ks(3, 4), ks(1, 1), true},  // 0.75 vs 1
		{ks(1<<62, 1<<62), ks(1, 1), false},
		{ks(0, 5), ks(0, 1), false},
	} {
		if got := fewerTokens(x.a, x.b); got != x.want {
			t.Errorf("fewerTokens(%v, %v) = %v, want %v", x.a, x.b, got, x.want)
		}
	}
}
