package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// The partition option reaches the strategy (as a field or as the generic
// parameter), SetExpected reaches a Conserver, and conserve is refused for
// a strategy without it or when the field and the parameter disagree.
func TestPartitionOptionAndExpected(t *testing.T) {
	perSec := bucket.Rate{Tokens: 1, Per: time.Second}
	all := []strategy.NodeID{"n0", "n1", "n2"}
	newNode := func(rules []rule.Rule) (*Node, error) { return soloNode(t, Config{Members: all, Rules: rules}) }
	for _, tc := range []struct {
		rule rule.Rule
		want string
	}{
		{rule.Rule{Name: "c", Rate: perSec, Burst: 9, Strategy: "local", Partition: strategy.PartitionConserve}, "local does not implement partition: conserve"},
		{rule.Rule{Name: "l", Rate: perSec, Burst: 9, Strategy: "local", Params: []string{"partition=conserve"}}, "local does not implement partition: conserve"},
		{rule.Rule{Name: "s", Rate: perSec, Burst: 9, Strategy: "static", Params: []string{"partition=sometimes"}}, `partition="sometimes": want available or conserve`},
		{rule.Rule{Name: "s", Rate: perSec, Burst: 9, Strategy: "static", Params: []string{"partition=available"}, Partition: strategy.PartitionConserve}, "disagree"},
	} {
		if _, err := newNode([]rule.Rule{tc.rule}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("rule %+v: error %v, want %q", tc.rule, err, tc.want)
		}
	}
	n, err := newNode([]rule.Rule{
		{Name: "field", Rate: perSec, Burst: 9, Strategy: "static", Partition: strategy.PartitionConserve},
		{Name: "param", Rate: perSec, Burst: 9, Strategy: "static", Params: []string{"partition=conserve"}},
		{Name: "avail", Rate: perSec, Burst: 9, Strategy: "static"},
	})
	if err != nil {
		t.Fatal(err)
	}
	remaining := func() map[string]int64 {
		out := map[string]int64{}
		if err := n.Inspect(context.Background(), func(now time.Duration, r rule.Rule, s strategy.Strategy) {
			out[r.Name], _ = s.(strategy.Remainer).Remaining(now, "fresh")
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	// n1, n2 fail: still expected (the node keeps its own default, the
	// start members, until told otherwise).
	if err := n.SetMembers([]strategy.NodeID{"n0"}); err != nil {
		t.Fatal(err)
	}
	if got := remaining(); got["field"] != 3 || got["param"] != 3 || got["avail"] != 9 {
		t.Errorf("split: a fresh key holds %v, want field 3, param 3 (conserve: b/3), avail 9", got)
	}
	// reconnect_timeout passed: they are no longer expected.
	if err := n.SetExpected([]strategy.NodeID{"n0"}); err != nil {
		t.Fatal(err)
	}
	if got := remaining(); got["field"] != 9 || got["param"] != 9 || got["avail"] != 9 {
		t.Errorf("given up: a fresh key holds %v, want 9 everywhere", got)
	}
	if err := n.SetExpected([]strategy.NodeID{""}); err == nil {
		t.Error("SetExpected took an empty name")
	}
}
