package limiter

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rule"
)

// TestSetRules: a reload keeps an unchanged rule's bucket, adds and drops
// rules for Limiter, and a refused reload changes nothing; with a state
// dir the next snapshot holds the new rules.
func TestSetRules(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	slow := bucket.Rate{Tokens: 1, Per: time.Hour}
	a := rule.Rule{Name: "a", Rate: slow, Burst: 2, Strategy: "owner"}
	b := rule.Rule{Name: "b", Rate: slow, Burst: 1, Strategy: "local"}
	n, err := Start(ctx, Config{Name: "n", Rules: []rule.Rule{a, b}, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	la, err := n.Limiter("a")
	if err != nil {
		t.Fatal(err)
	}
	if !la.Allow("k") || !la.Allow("k") || la.Allow("k") {
		t.Fatal("a: want 2 allowed then a refusal")
	}
	c := rule.Rule{Name: "c", Rate: slow, Burst: 3, Strategy: "owner"}
	ch, err := n.SetRules(ctx, []rule.Rule{c, a})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ch.Kept, []string{"a"}) || !slices.Equal(ch.Added, []string{"c"}) || !slices.Equal(ch.Removed, []string{"b"}) {
		t.Fatalf("change %+v", ch)
	}
	if la.Allow("k") {
		t.Error("a: allowed after the reload; its bucket was reset")
	}
	if _, err := n.Limiter("b"); !errors.Is(err, ErrUnknownRule) {
		t.Errorf("Limiter(b) after its removal: %v", err)
	}
	lc, err := n.Limiter("c")
	if err != nil || lc.Burst() != 3 {
		t.Fatalf("Limiter(c): %v %v", lc, err)
	}
	if !lc.Allow("k") {
		t.Error("c: refused its first token")
	}
	if _, err := n.SetRules(ctx, []rule.Rule{a, {Name: "x", Rate: slow, Burst: 1, Strategy: "nope"}}); err == nil {
		t.Error("a reload with an unknown strategy was accepted")
	}
	if _, err := n.Limiter("c"); err != nil {
		t.Errorf("Limiter(c) after a refused reload: %v", err)
	}
	if err := n.persist.save(n.node); err != nil {
		t.Fatal(err)
	}
	saved, found, err := n.persist.store.Load()
	if err != nil || !found {
		t.Fatalf("loading the snapshot: found %v, %v", found, err)
	}
	got := map[string]string{}
	for name, r := range saved.Rules {
		got[name] = r.Strategy
	}
	if len(got) != 2 || got["a"] != "owner" || got["c"] != "owner" {
		t.Errorf("persisted rules %v, want a and c", got)
	}
}

// The deprecated Config.ClusterRules still adds its rules after Rules
// (callers from before the two were one keep working).
func TestClusterRulesDeprecatedStillAdds(t *testing.T) {
	slow := bucket.Rate{Tokens: 1, Per: time.Hour}
	a := rule.Rule{Name: "a", Rate: slow, Burst: 1, Strategy: "local"}
	b := rule.Rule{Name: "b", Rate: slow, Burst: 2, Strategy: "local"}
	n, err := Start(context.Background(), Config{Name: "n", Rules: []rule.Rule{a}, ClusterRules: []rule.Rule{b}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	lb, err := n.Limiter("b")
	if err != nil {
		t.Fatalf("the rule given in ClusterRules: %v", err)
	}
	if !lb.Allow("k") || !lb.Allow("k") || lb.Allow("k") {
		t.Error("b: want its burst of 2 then a refusal")
	}
	if _, err := n.Limiter("a"); err != nil {
		t.Errorf("the rule given in Rules: %v", err)
	}
}
