package buckets

import (
	"slices"

	"github.com/tokenmesh/tokenmesh/bucket"
)

// Lookup returns key's bucket and true, or nil and false when the table
// holds none (Get would create a full one). It creates nothing.
func (t *Table) Lookup(key string) (*bucket.Bucket, bool) {
	b, ok := t.m[key]
	return b, ok
}

// Delete drops key's bucket, if any, and its share of StateBytes and
// MemoryBytes.
func (t *Table) Delete(key string) {
	if _, ok := t.m[key]; ok {
		delete(t.m, key)
		t.keyBytes -= len(key)
		t.keyAlloc -= allocBytes(len(key))
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
