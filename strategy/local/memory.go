package local

import "github.com/tokenmesh/tokenmesh/strategy"

// MemoryBytes estimates the heap the buckets take, in bytes
// (strategy.MemoryReporter; buckets.Table.MemoryBytes; ours).
func (l *Local) MemoryBytes() int { return l.table.MemoryBytes() }

var _ strategy.MemoryReporter = (*Local)(nil)
