package localcluster

import "testing"

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
