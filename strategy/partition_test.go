package strategy

import (
	"slices"
	"strings"
	"testing"
)

func TestPartitionMode(t *testing.T) {
	for in, want := range map[string]PartitionMode{"": PartitionAvailable, "available": PartitionAvailable, "conserve": PartitionConserve} {
		got, err := ParsePartitionMode(in)
		if err != nil || got != want {
			t.Errorf("ParsePartitionMode(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"Conserve", "strict", " conserve"} {
		if _, err := ParsePartitionMode(in); err == nil || !strings.Contains(err.Error(), "want available or conserve") {
			t.Errorf("ParsePartitionMode(%q): error %v", in, err)
		}
	}
	if PartitionConserve.String() != "conserve" || PartitionAvailable.String() != "available" {
		t.Error("String names")
	}
}

func TestTakePartition(t *testing.T) {
	p, err := ParseParams([]string{"hold=2ms,partition=conserve"})
	if err != nil {
		t.Fatal(err)
	}
	rest, mode, err := TakePartition(p)
	if err != nil || mode != PartitionConserve || !slices.Equal(rest.Names(), []string{"hold"}) {
		t.Errorf("TakePartition = %v, %v, %v", rest.Names(), mode, err)
	}
	if !slices.Equal(p.Names(), []string{"hold", "partition"}) {
		t.Errorf("TakePartition changed its argument: %v", p.Names())
	}
	p, _ = ParseParams([]string{"partition=bogus"})
	if _, _, err := TakePartition(p); err == nil || !strings.Contains(err.Error(), `partition="bogus"`) {
		t.Errorf("bad value: %v", err)
	}
	p, _ = ParseParams(nil)
	if _, mode, err := TakePartition(p); err != nil || mode != PartitionAvailable {
		t.Errorf("none: %v %v", mode, err)
	}
}

func TestConserveScale(t *testing.T) {
	k, n, u := ConserveScale("b", []NodeID{"b", "a"}, []NodeID{"c", "a", "b"})
	if k != 2 || n != 3 || !slices.Equal(u, []NodeID{"a", "b", "c"}) {
		t.Errorf("= %d, %d, %v", k, n, u)
	}
	// The live view is always expected, and self counts in both.
	k, n, _ = ConserveScale("s", []NodeID{"a"}, nil)
	if k != 2 || n != 2 {
		t.Errorf("self and live only: %d of %d, want 2 of 2", k, n)
	}
}
