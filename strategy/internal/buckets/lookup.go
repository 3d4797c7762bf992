package buckets

import (
	"slices"

	"github.com/tokenmesh/tokenmesh/bucket"
)

// Lookup returns key's bucket and true, or nil and false when the table
// holds none (Get would create a full one). It creates nothing. The
// caller may change the bucket through the pointer, so the key counts as
// changed for the next snapshot of changes (changes.go), as with Get.
func (t *Table) Lookup(key string) (*bucket.Bucket, bool) {
	e, ok := t.m[key]
	if !ok {
		return nil, false
	}
	t.mark(e)
	return &e.b, true
}

// Delete drops key's bucket, if any, and its share of StateBytes and
// MemoryBytes.
func (t *Table) Delete(key string) {
	if e, ok := t.m[key]; ok {
		t.drop(key, e)
	}
}

// SortedKeys returns the keys held, sorted (a deterministic order for
// strategies that send one message per key).
func (t *Table) SortedKeys() []string {
	out := make([]string, 0, len(t.m))
	for k := range t.m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
