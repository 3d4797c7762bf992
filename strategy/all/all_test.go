package all

import (
	"slices"
	"testing"
)

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

// TestSnapshotters: the strategies whose state is one bucket per key at a
// node (strategy.Snapshotter's documentation) are the ones that snapshot.
func TestSnapshotters(t *testing.T) {
	if got, want := Snapshotters(), []string{"central", "local", "static", "owner"}; !slices.Equal(got, want) {
		t.Errorf("Snapshotters() = %v, want %v (update strategy.Snapshotter's documentation and docs/OPERATIONS.md if this changed)", got, want)
	}
}
