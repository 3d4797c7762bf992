package membership

import (
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// TestWireVersions: a member of the build before wire versions (none
// advertised) and members advertising version 2 join each other (memberlist
// accepts the delegate versions: minimum and current stay 0), the metadata
// stays the bare peer address, every member reads the old one as version 1
// and the new ones as 2, and the cluster speaks 1 until the old member
// leaves; OnVersions is called with them.
func TestWireVersions(t *testing.T) {
	var mu sync.Mutex
	var seen map[strategy.NodeID]uint32
	old := start(t, "n0", key1, nil, nil)
	newCfg := func(name string) Config {
		cfg := testConfig(name, key1, []string{old.LocalAddr()}, nil)
		cfg.WireVersion = 2
		return cfg
	}
	n1cfg := newCfg("n1")
	n1cfg.OnVersions = func(v map[strategy.NodeID]uint32) {
		mu.Lock()
		seen = v
		mu.Unlock()
	}
	n1, err := New(n1cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n1.Shutdown() })
	n2, err := New(newCfg("n2"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n2.Shutdown() })
	all := map[strategy.NodeID]uint32{"n0": 1, "n1": 2, "n2": 2}
	waitFor(t, 5*time.Second, "versions", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return maps.Equal(n1.WireVersions(), all) && maps.Equal(n2.WireVersions(), all) &&
			maps.Equal(old.WireVersions(), all) && maps.Equal(seen, all)
	})
	if got := old.Members()["n1"]; got != "peer-n1" {
		t.Fatalf("the old member reads n1's metadata as %q, want the bare peer address", got)
	}
	if v := n1.ClusterWireVersion(); v != 1 {
		t.Fatalf("cluster version %d with an old member, want 1", v)
	}
	if err := old.Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the old member gone", func() bool {
		return n1.ClusterWireVersion() == 2 && n2.ClusterWireVersion() == 2
	})
}
