package cluster

import (
	"testing"

	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// benchHolder is the cluster, the node checked and the key of
// BenchmarkHolderCheck and BenchmarkHolderRefused for strategy strat:
// 3 nodes n0, n1, n2 and n1 checking a key n0 owns; for regionlease,
// whose two tiers need regions (a node's region is its name's prefix),
// eu.n0, us.n1 and us.n2 and us.n2 checking a key whose global owner is
// eu.n0 and whose regional owner in us is us.n1: us.n2 decides from node
// leases of us.n1, which holds a stock leased from eu.n0 (without
// regions every node is in one region, whose regional owner is the
// global owner).
func benchHolder(b *testing.B, strat string, r rule.Rule) (*testCluster, *Node, string) {
	b.Helper()
	if strat != "regionlease" {
		c := newBenchCluster(b, r)
		return c, c.nodes["n1"], keyOwnedBy(b, "n0", c.ids)
	}
	c := newBenchClusterOf(b, []strategy.NodeID{"eu.n0", "us.n1", "us.n2"}, r)
	for i := range 1000 {
		k := "key-" + string(rune('a'+i%26)) + string(rune('a'+i/26%26))
		if rendezvous.Owner(k, c.ids) == "eu.n0" && rendezvous.Owner(k, c.ids[1:]) == "us.n1" {
			return c, c.nodes["us.n2"], k
		}
	}
	b.Fatal("no key owned by eu.n0 with us.n1 its regional owner")
	return nil, nil, ""
}

// newBenchClusterOf is newBenchCluster with the nodes ids.
func newBenchClusterOf(b *testing.B, ids []strategy.NodeID, rules ...rule.Rule) *testCluster {
	b.Helper()
	net := NewMemNetwork()
	c := &testCluster{net: net, rules: rules, nodes: map[strategy.NodeID]*Node{}, ids: ids}
	eps := map[strategy.NodeID]Transport{}
	for _, id := range ids {
		ep, err := net.Endpoint(id)
		if err != nil {
			b.Fatal(err)
		}
		eps[id] = ep
	}
	for _, id := range ids {
		node, err := New(Config{Self: id, Members: ids, Rules: rules, Transport: eps[id], Seed: 7})
		if err != nil {
			b.Fatal(err)
		}
		c.nodes[id] = node
		b.Cleanup(func() { node.Close() })
	}
	return c
}
