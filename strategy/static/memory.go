package static

import "github.com/tokenmesh/tokenmesh/strategy"

// MemoryBytes estimates the heap the buckets take, in bytes
// (strategy.MemoryReporter; buckets.Table.MemoryBytes; ours).
func (s *Static) MemoryBytes() int { return s.table.MemoryBytes() }

var _ strategy.MemoryReporter = (*Static)(nil)
