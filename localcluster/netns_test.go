package localcluster

import (
	"context"
	"github.com/tokenmesh/tokenmesh/internal/lockedbuf"
	"github.com/tokenmesh/tokenmesh/rule"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
	"github.com/tokenmesh/tokenmesh/internal/netns"
)

func TestStartPartitionedNeedsNamespaces(t *testing.T) {
	_, err := Start(context.Background(), Config{Binary: binary, Nodes: 2, StartPartitioned: [][]int{{0}, {1}},
		Rules: []rule.Rule{{Name: "a", Rate: rule.MustRate("1/s")}}})
	if err == nil || !strings.Contains(err.Error(), "Namespaces") {
		t.Errorf("StartPartitioned without Namespaces: %v", err)
	}
	_, err = Start(context.Background(), Config{Binary: binary, Nodes: 2, Namespaces: true, StartPartitioned: [][]int{{0, 1}, {1}},
		Rules: []rule.Rule{{Name: "a", Rate: rule.MustRate("1/s")}}})
	if err == nil || !strings.Contains(err.Error(), "two groups") {
		t.Errorf("node 1 in two groups: %v", err)
	}
}

// members reads node i's tokenmesh_members line.
func members(c *Cluster, i int) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	m, err := c.Metrics(ctx, i)
	if err != nil {
		return err.Error()
	}
	for _, l := range strings.Split(m, "\n") {
		if strings.HasPrefix(l, "tokenmesh_members ") {
			return l
		}
	}
	return "no tokenmesh_members"
}

// In namespace mode the nodes listen on their namespace addresses, the
// cluster's clients reach them, Partition cuts gossip (each node then
// sees itself alone), Heal lets them merge, and Stop removes the
// namespaces.
func TestNamespaces(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	if err := netns.Available(); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var log lockedbuf.Buffer
	c, err := Start(ctx, Config{Binary: binary, Nodes: 2, Namespaces: true, Settle: -1, Log: &log,
		Rules: []rule.Rule{{Name: "a", Rate: rule.MustRate("1/s"), Burst: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = c.Stop()
		}
		if t.Failed() {
			t.Logf("nodes:\n%s", log.String())
		}
	})
	if !c.Namespaced() {
		t.Fatal("not namespaced")
	}
	for i, n := range c.Nodes {
		if !strings.HasPrefix(n.Gossip, "10.251.0.") || !strings.HasPrefix(n.API, "10.251.0.") {
			t.Errorf("n%d: addresses %+v, want the namespace's", i, n)
		}
	}
	cl, err := c.Client(1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.ListRules(ctx, &tokenmeshv1.ListRulesRequest{}); err != nil {
		t.Fatalf("ListRules at n1 through the namespace dialer: %v", err)
	}
	if err := c.Partition([]int{0}, []int{1}); err != nil {
		t.Fatal(err)
	}
	wait := func(what, want string, d time.Duration) {
		t.Helper()
		deadline := time.Now().Add(d)
		for members(c, 0) != want || members(c, 1) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: members %q, %q after %v, want %q", what, members(c, 0), members(c, 1), d, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	wait("partitioned", "tokenmesh_members 1", 30*time.Second)
	if err := c.Heal(); err != nil {
		t.Fatal(err)
	}
	wait("healed", "tokenmesh_members 2", 15*time.Second)
	stopped = true
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command("ip", "netns", "list").CombinedOutput()
	for _, h := range c.lab.Hosts {
		if strings.Contains(string(out), h.Namespace) {
			t.Errorf("namespace %s remains after Stop:\n%s", h.Namespace, out)
		}
	}
}

// cutOff: a node is cut from the nodes outside its group, a node in no
// group from all others, and without groups from none.
func TestCutOff(t *testing.T) {
	got := cutOff([][]int{{0, 1}, {2}}, 4)
	want := [][]int{{2, 3}, {2, 3}, {0, 1, 3}, {0, 1, 2}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("cutOff({0,1},{2}) over 4 = %v, want %v", got, want)
	}
	for i, c := range cutOff(nil, 3) {
		if len(c) != 0 {
			t.Errorf("cutOff() cuts node %d from %v, want none", i, c)
		}
	}
}
