package owner

import (
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// TestSnapshotChangesAcrossViewChange: which keys a node snapshots
// depends on its view, which can change with no bucket touched: a
// restarted node defers every key to its peers until they show they see
// it, and its restored buckets become its own again then. SnapshotChanges
// must not report changes across such a change (a store fed its empty
// changes would lack the key, and a restart would give it a fresh burst):
// it reports false, and the SnapshotFull after it holds the key.
func TestSnapshotChangesAcrossViewChange(t *testing.T) {
	o := newNode(t, "n0", "hold=0")
	fx := &strategy.Effects{}
	start := 10 * time.Second
	o.Start(start, fx) // a restart: every key deferred to the other members
	mine := keyOwnedBy("n0")
	drained := strategy.KeyState{Key: mine, Level: 0, Capacity: 2e9, TicksPerToken: 1e9, At: start}
	if err := o.Restore(start, []strategy.KeyState{drained}); err != nil {
		t.Fatal(err)
	}
	var got []strategy.KeyState
	emit := func(s strategy.KeyState) { got = append(got, s) }
	gone := func(string) {}
	o.SnapshotFull(start, emit)
	if len(got) != 0 {
		t.Fatalf("full snapshot while deferring: %+v, want none (no key is n0's yet)", got)
	}
	for _, m := range []strategy.NodeID{"n1", "n2"} {
		o.rs.seenBy[m] = true // as sawUs records a peer's forward
	}
	o.restartSeenAll()
	if !o.owns(mine) {
		t.Fatalf("%s is not n0's after its peers saw it", mine)
	}
	if o.SnapshotChanges(start, emit, gone) {
		t.Fatalf("SnapshotChanges reported changes %+v across the end of the deferral, want false (a full one)", got)
	}
	o.SnapshotFull(start, emit)
	if len(got) != 1 || got[0] != drained {
		t.Fatalf("full snapshot after the deferral: %+v, want %+v", got, drained)
	}
	got = nil
	if !o.SnapshotChanges(start+time.Millisecond, emit, gone) || len(got) != 0 {
		t.Fatalf("SnapshotChanges with the view unchanged and nothing touched: %+v (reported %v), want no change", got, got != nil)
	}
}
