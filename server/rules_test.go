package server

import (
	"context"
	"strings"
	"testing"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
	"github.com/tokenmesh/tokenmesh/rule"
)

// TestServerSetRules: after the node's rules change, SetRules makes the
// API serve the new set: a removed rule is refused as unknown and leaves
// /metrics, a kept rule keeps its state and counts, an added rule answers.
func TestServerSetRules(t *testing.T) {
	rules := testRules()
	node := startTestNode(t, rules)
	s := New(node, rules)
	check := func(rule string) (*tokenmeshv1.CheckResponse, error) {
		return s.Check(context.Background(), &tokenmeshv1.CheckRequest{Checks: []*tokenmeshv1.CheckItem{{Rule: rule, Key: "k", Hits: 1}}})
	}
	for range 3 {
		if _, err := check("api"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := check("loc"); err != nil {
		t.Fatal(err)
	}
	added := rule.Rule{Name: "new", Rate: slow, Burst: 1, Strategy: "owner"}
	next := []rule.Rule{rules[0], added}
	if _, err := node.SetRules(context.Background(), next); err != nil {
		t.Fatal(err)
	}
	s.SetRules(next)

	if r, err := check("api"); err != nil || r.Results[0].Allowed {
		t.Errorf("api after the reload: %v %v; want refused (its bucket of 3 was drained before)", r, err)
	}
	if r, err := check("new"); err != nil || !r.Results[0].Allowed || r.Results[0].Burst != 1 {
		t.Errorf("new: %v %v; want allowed, burst 1", r, err)
	}
	if _, err := check("loc"); err == nil || !strings.Contains(err.Error(), `"loc" is not a rule of this node`) {
		t.Errorf("loc after its removal: %v", err)
	}
	lr, _ := s.ListRules(context.Background(), nil)
	if len(lr.Rules) != 2 || lr.Rules[0].Name != "api" || lr.Rules[1].Name != "new" {
		t.Errorf("ListRules: %v", lr.Rules)
	}
	mfs, err := s.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "tokenmesh_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var rule, res string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "rule":
					rule = l.GetValue()
				case "result":
					res = l.GetValue()
				}
			}
			got[rule+"/"+res] = m.GetCounter().GetValue()
		}
	}
	if got["api/allowed"] != 3 || got["api/refused"] != 1 || got["new/allowed"] != 1 {
		t.Errorf("decisions %v: want api 3 allowed 1 refused, new 1 allowed", got)
	}
	for k := range got {
		if strings.HasPrefix(k, "loc/") {
			t.Errorf("removed rule loc still in /metrics: %v", got)
			break
		}
	}
}
