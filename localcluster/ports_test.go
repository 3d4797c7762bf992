package localcluster

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tokenmesh/tokenmesh/rule"
)

// pickPorts draws distinct ports below the kernel's ephemeral range, each
// bindable for TCP and UDP.
func TestPickPorts(t *testing.T) {
	ps, err := pickPorts(8)
	if err != nil {
		t.Fatal(err)
	}
	high := ephemeralLow()
	seen := map[int]bool{}
	for _, p := range ps {
		if p < fixedPortLow || p >= high {
			t.Errorf("port %d outside [%d, %d)", p, fixedPortLow, high)
		}
		if seen[p] {
			t.Errorf("port %d drawn twice", p)
		}
		seen[p] = true
		if !portFree(p) {
			t.Errorf("port %d not free right after the draw", p)
		}
	}
	if len(ps) != 8 {
		t.Fatalf("%d ports, want 8", len(ps))
	}
}

// A node whose drawn port another process took before the node bound it
// (a race between the draw and the bind) is started again on new ports:
// here the first draw hands node n1 a port a listener holds.
func TestStartRedrawsTakenPort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	taken := held.Addr().(*net.TCPAddr).Port
	var draws atomic.Int32
	drawPorts = func(n int) ([]int, error) {
		ps, err := pickPorts(n)
		if err == nil && draws.Add(1) == 2 { // n1's first draw
			ps[1] = taken
		}
		return ps, err
	}
	defer func() { drawPorts = pickPorts }()
	c, err := Start(context.Background(), Config{Binary: binary, Nodes: 2, Settle: -1, Rules: []rule.Rule{{Name: "a", Rate: rule.MustRate("1/s")}}})
	if err != nil {
		t.Fatalf("a taken port was not drawn again: %v", err)
	}
	defer c.Stop()
	if got := draws.Load(); got != 3 {
		t.Errorf("%d draws, want 3 (n0, n1, n1 again)", got)
	}
	if strings.HasSuffix(c.Nodes[1].GRPC, fmt.Sprintf(":%d", taken)) {
		t.Errorf("n1 serves on the taken port %d", taken)
	}
}
