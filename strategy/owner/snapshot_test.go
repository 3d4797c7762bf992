package owner

import (
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// TestSnapshotOwnedKeysOnly: a node snapshots the buckets of the keys it
// owns in its current view, not those left from a view in which it owned
// more; restored into a new node, an owned key is as drained as before.
func TestSnapshotOwnedKeysOnly(t *testing.T) {
	o := newNode(t, "n0", "hold=0")
	mine, theirs := keyOwnedBy("n0"), keyOwnedBy("n1")
	fx := &strategy.Effects{}
	o.SetMembers(0, []strategy.NodeID{"n0"}, fx) // alone: owns every key
	for _, k := range []string{mine, theirs} {
		for i := range 2 {
			if d, ok := o.Request(0, strategy.Request{ID: uint64(i + 1), Key: k, Tokens: 1}, fx); !ok || !d.Allowed {
				t.Fatalf("key %s request %d: decided %v allowed %v", k, i, ok, d.Allowed)
			}
		}
	}
	o.SetMembers(0, members, fx) // theirs goes back to n1
	var got []strategy.KeyState
	o.Snapshot(time.Millisecond, func(s strategy.KeyState) { got = append(got, s) })
	if len(got) != 1 || got[0].Key != mine {
		t.Fatalf("snapshot %+v, want only %s (owned by n0)", got, mine)
	}
	p := newNode(t, "n0", "hold=0")
	if err := p.Restore(time.Millisecond, got); err != nil {
		t.Fatal(err)
	}
	if rem, ok := p.Remaining(time.Millisecond, mine); !ok || rem != 0 {
		t.Fatalf("restored %s: Remaining %d (known %v), want 0", mine, rem, ok)
	}
}
