package cluster

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/rule"
)

func setRulesAll(t *testing.T, c *testCluster, rules ...rule.Rule) RulesChange {
	t.Helper()
	var ch RulesChange
	for _, id := range c.ids {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		got, err := c.nodes[id].SetRules(ctx, rules)
		cancel()
		if err != nil {
			t.Fatalf("%s: SetRules: %v", id, err)
		}
		ch = got
	}
	return ch
}

// TestSetRulesKeepsUnchanged: an identical rule keeps its buckets, a
// changed one starts full at its new burst, a removed one is gone, an
// added one answers; a refused update changes nothing.
func TestSetRulesKeepsUnchanged(t *testing.T) {
	a := rule.Rule{Name: "a", Rate: slow, Burst: 3, Strategy: "owner"}
	b := rule.Rule{Name: "b", Rate: slow, Burst: 2, Strategy: "owner"}
	c := rule.Rule{Name: "c", Rate: slow, Burst: 5, Strategy: "local"}
	cl := newCluster(t, 2, false, a, b, c)
	n0 := cl.nodes["n0"]
	// A key owned by the other node: checks are forwarded there.
	key := keyOwnedBy(t, "n1", cl.ids)
	for range 2 {
		if !check(t, n0, "a", key, 1).Allowed {
			t.Fatal("a: refused within the burst")
		}
	}
	for range 2 {
		check(t, n0, "b", key, 1)
	}
	if check(t, n0, "b", key, 1).Allowed {
		t.Fatal("b: allowed above the burst")
	}

	b2 := b
	b2.Burst = 4
	d := rule.Rule{Name: "d", Rate: slow, Burst: 1, Strategy: "owner"}
	ch := setRulesAll(t, cl, a, b2, d)
	if !slices.Equal(ch.Kept, []string{"a"}) || !slices.Equal(ch.Changed, []string{"b"}) ||
		!slices.Equal(ch.Removed, []string{"c"}) || !slices.Equal(ch.Added, []string{"d"}) || ch.Empty() {
		t.Fatalf("change %+v: want kept a, changed b, removed c, added d", ch)
	}
	if got := n0.Rules(); !slices.Equal(got, []string{"a", "b", "d"}) {
		t.Fatalf("rules after SetRules: %v", got)
	}
	// a kept its bucket: 1 token left of 3.
	if !check(t, n0, "a", key, 1).Allowed || check(t, n0, "a", key, 1).Allowed {
		t.Error("a: want its last token then a refusal (its state kept)")
	}
	// b starts full at its new burst 4.
	for i := range 4 {
		if !check(t, n0, "b", key, 1).Allowed {
			t.Fatalf("b: check %d refused; want a fresh bucket of 4", i)
		}
	}
	if check(t, n0, "b", key, 1).Allowed {
		t.Error("b: allowed above its new burst")
	}
	if !check(t, n0, "d", key, 1).Allowed || check(t, n0, "d", key, 1).Allowed {
		t.Error("d: want its burst of 1")
	}
	if _, err := n0.Check(context.Background(), "c", key, 1); err == nil || !strings.Contains(err.Error(), `rule "c" is not defined`) {
		t.Errorf("c after removal: %v", err)
	}
	if st := n0.Stats(); len(st.Rules) != 3 {
		t.Errorf("stats after SetRules: %v rules, want 3", len(st.Rules))
	}

	// Refused updates change nothing.
	for _, bad := range [][]rule.Rule{
		nil,
		{a, {Name: "e", Rate: slow, Burst: 1, Strategy: "nope"}},
		{a, a},
		{{Name: "", Rate: slow, Burst: 1, Strategy: "owner"}},
		{a, {Name: "f", Rate: slow, Burst: 1, Strategy: "owner", Params: []string{"bogus=1"}}},
	} {
		if ch, err := n0.SetRules(context.Background(), bad); err == nil {
			t.Errorf("SetRules(%v) = %+v, want an error", bad, ch)
		}
	}
	if got := n0.Rules(); !slices.Equal(got, []string{"a", "b", "d"}) {
		t.Fatalf("rules after refused updates: %v", got)
	}
	if check(t, n0, "a", key, 1).Allowed {
		t.Error("a: allowed after refused updates; its bucket was reset")
	}
	// The same rules again: nothing to do.
	if ch := setRulesAll(t, cl, a, b2, d); !ch.Empty() || len(ch.Kept) != 3 {
		t.Errorf("identical SetRules: %+v", ch)
	}
}

// TestSetRulesUnderLoad: checks keep flowing on 3 nodes while one rule is
// replaced again and again; each check is decided or fails with a reload
// error, the kept gdrl rule (driven by wake-ups) keeps deciding, and no
// more than its burst is admitted per key of the kept owner rule.
func TestSetRulesUnderLoad(t *testing.T) {
	kept := rule.Rule{Name: "kept", Rate: slow, Burst: 50, Strategy: "owner"}
	g := rule.Rule{Name: "g", Rate: slow, Burst: 1000, Strategy: "gdrl"}
	flip := rule.Rule{Name: "flip", Rate: slow, Burst: 5, Strategy: "owner"}
	cl := newCluster(t, 3, false, kept, g, flip)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	var failures []error
	for _, id := range cl.ids {
		n := cl.nodes[id]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				for _, rule := range []string{"kept", "g", "flip"} {
					d, err := n.Check(ctx, rule, "k", 1)
					mu.Lock()
					switch {
					case err == nil && rule == "kept" && d.Allowed:
						admitted++
					case err != nil && !errors.Is(err, ErrRuleChanged) && !errors.Is(err, ErrRuleRemoved) &&
						!strings.Contains(err.Error(), "not defined"):
						failures = append(failures, err)
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range 20 {
		f := flip
		f.Burst = int64(5 + i%3)
		rules := []rule.Rule{kept, g, f}
		if i%4 == 3 {
			rules = []rule.Rule{g, kept} // flip removed for a while, order changed
		}
		setRulesAll(t, cl, rules...)
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d checks failed with other errors, first: %v", len(failures), failures[0])
	}
	if admitted != 50 {
		t.Errorf("kept rule admitted %d of 600 checks of one key, want exactly its burst 50 (state kept across reloads)", admitted)
	}
	if d := check(t, cl.nodes["n2"], "g", "k2", 1); !d.Allowed {
		t.Error("gdrl rule refused a fresh key after the reloads")
	}
}

// TestSetRulesPartition: a rule given with partition=conserve in its
// params is kept by an identical reload (compared as New keeps it) and
// changed when its partition mode changes.
func TestSetRulesPartition(t *testing.T) {
	a := rule.Rule{Name: "a", Rate: slow, Burst: 2, Strategy: "owner", Params: []string{"partition=conserve"}}
	cl := newCluster(t, 1, false, a)
	n0 := cl.nodes["n0"]
	if !check(t, n0, "a", "k", 2).Allowed {
		t.Fatal("a: refused within the burst")
	}
	if ch := setRulesAll(t, cl, a); len(ch.Kept) != 1 || !ch.Empty() {
		t.Fatalf("identical rule with partition=conserve: %+v, want kept", ch)
	}
	if check(t, n0, "a", "k", 1).Allowed {
		t.Error("a: allowed after an identical reload; its bucket was reset")
	}
	b := a
	b.Params = nil
	if ch := setRulesAll(t, cl, b); len(ch.Changed) != 1 {
		t.Fatalf("partition conserve -> available: %+v, want changed", ch)
	}
	if !check(t, n0, "a", "k", 1).Allowed {
		t.Error("a: refused after its partition mode changed; want a fresh bucket")
	}
}
