package local

import "github.com/tokenmesh/tokenmesh/strategy"

// MemoryBytes estimates the heap the buckets take, in bytes, with what
// the driver's fast path holds of them (strategy.MemoryReporter;
// buckets.Table.MemoryBytes and buckets.Lender.MemoryBytes; ours).
func (l *Local) MemoryBytes() int { return l.table.MemoryBytes() + l.lend.MemoryBytes() }

var _ strategy.MemoryReporter = (*Local)(nil)
