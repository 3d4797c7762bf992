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

// TestMemoryBytesCountsEverySubTable: with split=K a key's sub-buckets are
// spread over K tables; MemoryBytes grows with buckets in any of them, not
// only in the first.
func TestMemoryBytesCountsEverySubTable(t *testing.T) {
	o := newNode(t, "n0", "hold=0", "split=2")
	var fx strategy.Effects
	o.SetMembers(0, []strategy.NodeID{"n0"}, &fx) // alone: owns every sub-key
	before := o.MemoryBytes()
	for id := uint64(1); id <= 2; id++ { // request ID mod 2 picks the sub-bucket: one in each table
		if d, ok := o.Request(0, strategy.Request{ID: id, Key: "k", Tokens: 1}, &fx); !ok || !d.Allowed {
			t.Fatalf("request %d: %+v decided=%v, want allowed at once", id, d, ok)
		}
	}
	if o.tables[1].Len() != 1 {
		t.Fatalf("table 1 holds %d keys, want 1", o.tables[1].Len())
	}
	// one key in a table: 8 map slots of 25 B, a 48 B bucket, an 8 B key
	if got, want := o.MemoryBytes(), before+2*(8*25+48+8); got < want {
		t.Fatalf("MemoryBytes = %d after a bucket in each of 2 tables, want at least %d", got, want)
	}
}

// TestSnapshotEverySubTable: with split=2 the snapshot holds both of a
// drained key's sub-buckets, and a restore puts each back in its own
// table (the second was left out before: a restart gave it a fresh
// burst). A state whose key has no sub-bucket index of the split is
// dropped.
func TestSnapshotEverySubTable(t *testing.T) {
	o := newNode(t, "n0", "hold=0", "split=2")
	var fx strategy.Effects
	o.SetMembers(0, []strategy.NodeID{"n0"}, &fx) // alone: owns every sub-key
	for id := uint64(1); id <= 4; id++ {          // request ID mod 2 picks the sub-bucket
		o.Request(0, strategy.Request{ID: id, Key: "k", Tokens: 1}, &fx)
	}
	var got []strategy.KeyState
	o.Snapshot(time.Millisecond, func(s strategy.KeyState) { got = append(got, s) })
	if len(got) != 2 {
		t.Fatalf("snapshot %+v, want both sub-buckets of k", got)
	}
	p := newNode(t, "n0", "hold=0", "split=2")
	p.SetMembers(0, []strategy.NodeID{"n0"}, &fx)
	if err := p.Restore(time.Millisecond, append(got, strategy.KeyState{Key: "plain", Level: 0, Capacity: 1, TicksPerToken: 1})); err != nil {
		t.Fatal(err)
	}
	for i, tab := range p.tables {
		if tab.Len() != 1 {
			t.Errorf("table %d holds %d keys after the restore, want k's sub-bucket", i, tab.Len())
		}
		if rem := tab.Remaining(subKey("k", i), time.Millisecond); rem != o.tables[i].Remaining(subKey("k", i), time.Millisecond) {
			t.Errorf("sub-bucket %d: %d tokens restored, the original holds %d", i, rem, o.tables[i].Remaining(subKey("k", i), time.Millisecond))
		}
	}
}
