package static

import "github.com/tokenmesh/tokenmesh/strategy"

// MemoryBytes estimates the heap the buckets take, in bytes, with what
// the driver's fast path holds of them (strategy.MemoryReporter;
// buckets.Table.MemoryBytes and buckets.Lender.MemoryBytes; ours).
func (s *Static) MemoryBytes() int { return s.table.MemoryBytes() + s.lend.MemoryBytes() }

var _ strategy.MemoryReporter = (*Static)(nil)
