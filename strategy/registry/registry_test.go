package registry

import "testing"

// TestListIsACopy: changing what List returns does not change the registry.
func TestListIsACopy(t *testing.T) {
	l := List()
	l[0].Name = "changed"
	if List()[0].Name == "changed" {
		t.Fatal("List returned the registry itself")
	}
}

// TestEveryStrategyBuildsWithprobeConfig: Snapshots builds each strategy
// with probeConfig, so a constructor that refused it would make Snapshots
// say false for a strategy that snapshots.
func TestEveryStrategyBuildsWithprobeConfig(t *testing.T) {
	for _, info := range List() {
		if _, err := info.New(probeConfig()); err != nil {
			t.Errorf("%s: New(probeConfig()): %v", info.Name, err)
		}
	}
}

// TestFastPath: the strategies whose checks the live node can decide in
// the caller's goroutine say so, and those it cannot do not (a strategy
// that stopped implementing an interface its docs promise fails here).
func TestFastPath(t *testing.T) {
	lent := FastPath{Buckets: true, Allowances: true}
	both := FastPath{Allowances: true, Refusals: true}
	for name, want := range map[string]FastPath{
		"central": lent, "local": lent, "static": lent,
		"owner": {Allowances: true}, "lease": both, "regionlease": both, "adaptive": both, "gdrl": both,
		"gcounter": {}, "tbqueue": {}, "quota": {}, "fixedwindow": {}, "concurrency": {},
	} {
		info, err := Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		if got := info.FastPath(); got != want {
			t.Errorf("%s: FastPath() = %+v, want %+v", name, got, want)
		}
	}
}

// TestSnapshots: a strategy whose state is one bucket per key at a node
// snapshots (central, owner); one whose state is shares does not (gdrl).
func TestSnapshots(t *testing.T) {
	for name, want := range map[string]bool{"central": true, "owner": true, "gdrl": false} {
		info, err := Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		if got := info.Snapshots(); got != want {
			t.Errorf("%s: Snapshots() = %v, want %v", name, got, want)
		}
	}
}
