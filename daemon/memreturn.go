package daemon

import (
	"context"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// Returning the memory of expired keys to the OS (issue 28: RSS came back
// only ~4 minutes after a million keys expired). The strategies rebuild
// their maps when the keys expire, but an idle process does not collect
// (the heap goal is a multiple of the last live heap, GOGC) until the
// runtime's forced collection every 2 minutes, and the scavenger returns
// pages only down to that goal. So the daemon reads the rules' heap
// estimates (strategy.MemoryReporter, O(1) per rule) every
// MemoryReturnInterval and, when they have fallen by at least
// MemoryReturnMin bytes and to half of their peak since the last return,
// calls debug.FreeOSMemory once: a full collection of what is by then a
// small live heap, and every free page back to the OS. Ours.
const (
	// MemoryReturnInterval is how often the daemon reads the rules' heap estimates.
	MemoryReturnInterval = 5 * time.Second
	// MemoryReturnMin is the fall of the rules' estimated heap, bytes,
	// below which nothing is returned (a collection is not worth less).
	MemoryReturnMin = 64 << 20
)

// memReturner decides when to return memory, from the rules' estimated
// heap read over time. Not safe for concurrent use.
type memReturner struct {
	peak int64  // the largest estimate since the last return (or the start)
	free func() // debug.FreeOSMemory
}

// observe takes the rules' estimated heap now, bytes, and reports whether
// it returned memory (called free): when the estimate fell by at least
// MemoryReturnMin and to at most half of its peak. The peak then restarts
// from the estimate.
func (m *memReturner) observe(total int64) bool {
	if total >= m.peak {
		m.peak = total
		return false
	}
	if m.peak-total < MemoryReturnMin || total > m.peak/2 {
		return false
	}
	m.free()
	m.peak = total
	return true
}

// stateBytes is the sum of the heap estimates of the rules whose
// strategy makes one (others are left out: their wire size is a walk of
// their keys). ok is false when the node did not answer within ctx.
func (d *Daemon) stateBytes(ctx context.Context) (total int64, ok bool) {
	err := d.node.Cluster().Peek(ctx, func(_ time.Duration, _ rule.Rule, s strategy.Strategy) {
		if mr, isMR := s.(strategy.MemoryReporter); isMR {
			total += int64(mr.MemoryBytes())
		}
	})
	return total, err == nil
}

// returnMemory runs until ctx ends: every MemoryReturnInterval it reads the
// rules' heap estimates and returns memory after a large expiry.
func (d *Daemon) returnMemory(ctx context.Context) {
	r := memReturner{free: debug.FreeOSMemory}
	t := time.NewTicker(MemoryReturnInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		total, ok := d.stateBytes(rctx)
		cancel()
		if !ok {
			continue
		}
		peak := r.peak
		if r.observe(total) {
			d.log.Info("returned memory to the OS after keys expired (debug.FreeOSMemory)",
				slog.Int64("state_bytes_peak", peak), slog.Int64("state_bytes", total))
		}
	}
}
