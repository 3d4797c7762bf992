package cluster

import (
	"strconv"
	"sync"
	"testing"
)

// BenchmarkFastMapLoad compares fastMap's lookup with a sync.Map's on 10k
// keys (the table behind the fast path; docs/PERFORMANCE.md).
func BenchmarkFastMapLoad(b *testing.B) {
	keys := make([]string, 10000)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	b.Run("map=fastmap", func(b *testing.B) {
		m := newFastMap()
		for _, k := range keys {
			m.store(&fastEntry{key: k})
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if m.load(keys[i%len(keys)]) == nil {
				b.Fatal("missing key")
			}
		}
	})
	b.Run("map=syncmap", func(b *testing.B) {
		var m sync.Map
		for _, k := range keys {
			m.Store(k, &fastEntry{key: k})
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if _, ok := m.Load(keys[i%len(keys)]); !ok {
				b.Fatal("missing key")
			}
		}
	})
}
