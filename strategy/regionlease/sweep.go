package regionlease

import (
	"github.com/tokenmesh/tokenmesh/strategy/internal/keyorder"
	"github.com/tokenmesh/tokenmesh/strategy/internal/memsize"
)

// The sweep in steps (issue 28 item 5: no loop stall in proportion to the
// keys; the sweep in one go held the loop for 376-589 ms of CPU at 1M
// keys). Ours. keyorder.Sweeper begins a pass every sweepEvery, as the
// sweep in one go ran, and visits keyorder.Budget keys per Tick, one
// table after another in the order that sweep took: the fences held, G's
// fence records, the push states, the pools, the holdings. The tables'
// keys are in keyorder.Index (sweepOrders), kept by the helpers that add
// and delete keys (the maps' values are maps, or leasepool.Pool: they
// hold no place). Each key is judged as the sweep in one go judged it at
// the pass's beginning (passAt): a key changed since shows a later time
// (a pool's Last, a holding's lastRequestAt, a fence pushed on), so a
// key is dropped at its visit only if that sweep dropped it too (later,
// never earlier), but for a fence, fence record or push state made
// during the pass whose time already lies that far back, which that
// sweep would have dropped at the next pass; no decision reads one.

// sweepOrders are the keys of the swept maps, for the sweep's steps.
type sweepOrders struct {
	fences, gfences, pushes, pools, keys keyorder.Index
}

// bytes is the heap the orders take: each Index's array and its map of
// positions (slots by its peak; the key strings are the swept maps').
func (o *sweepOrders) bytes() int {
	n := 0
	for _, x := range []*keyorder.Index{&o.fences, &o.gfences, &o.pushes, &o.pools, &o.keys} {
		n += x.Order.Bytes()
		if x.Peak() > 0 {
			n += memsize.MapHeader + memsize.Map(x.Peak(), keyorder.IndexSlot)
		}
	}
	return n
}

// Tables of a pass, in order.
const (
	sweepFences = iota
	sweepGFences
	sweepPushes
	sweepPools
	sweepHoldings
	sweepTables
)

// sweepSome goes on with the pass under way, visiting up to budget keys
// in the tables from the one it is at, and reports whether the pass is
// over: with fewer keys than budget in all tables, a pass is one call
// (one Tick), as the sweep in one go was.
func (l *RegionLease) sweepSome(budget int) bool {
	return keyorder.StepTables(&l.sweepAt, sweepTables, budget, l.sweepStep)
}

// sweepStep visits up to *budget keys of table i of the pass under way
// (begun at passAt), taking them off *budget, and reports whether the
// table's pass is over (after the last table, the maps and heaps are
// shrunk: shrinkMaps).
func (l *RegionLease) sweepStep(i int, budget *int) bool {
	switch i {
	case sweepFences:
		return keyorder.Step(&l.order.fences, budget, l.sweepFence)
	case sweepGFences:
		return keyorder.Step(&l.order.gfences, budget, l.sweepGFence)
	case sweepPushes:
		return keyorder.Step(&l.order.pushes, budget, l.sweepPush)
	case sweepPools:
		return keyorder.Step(&l.order.pools, budget, l.sweepPool)
	default:
		done := keyorder.Step(&l.order.keys, budget, l.sweepHolding)
		if done {
			l.shrinkMaps()
		}
		return done
	}
}

// sweepFence drops key's fences that ended long enough before the pass
// (passAt) for no move to still read them (takeover + fill time, as
// changes), and the key when none is left (reported: true).
func (l *RegionLease) sweepFence(key string) bool {
	now := l.passAt
	fs := l.fences[key]
	for from, f := range fs {
		if f+l.takeover+l.fillTime < now {
			delete(fs, from)
			l.nfences--
		}
	}
	if len(fs) == 0 {
		l.dropFenceKey(key)
		return true
	}
	return false
}

// sweepGFence forgets key's fence records once their replica has swept
// every fence it shipped (they end by shipped; a replica sweeps them
// takeover + fill time after, at its next sweep) and the key has no pool
// here, and the key when none is left (reported: true).
func (l *RegionLease) sweepGFence(key string) bool {
	now := l.passAt
	keep := l.takeover + l.fillTime + l.sweepEvery + l.maxSkew
	if l.pools[key] != nil {
		return false
	}
	fs := l.gfences[key]
	for r, f := range fs {
		if f.shipped+keep < now {
			delete(fs, r)
			l.mem.fenceRec--
		}
	}
	if len(fs) == 0 {
		l.dropGFenceKey(key)
		return true
	}
	return false
}

// sweepPush drops the push state of key when it was not contended for a
// window past region_ttl before the pass and has no armed timer.
func (l *RegionLease) sweepPush(key string) bool {
	if ps := l.pushes[key]; !ps.armed && l.passAt >= ps.dryAt+l.rttl+2*l.window {
		l.dropPush(key)
		return true
	}
	return false
}

// sweepPool drops key's pool when it has no leases and was full at
// passAt - sweepLag with nothing decided after.
func (l *RegionLease) sweepPool(key string) bool {
	at := l.passAt - l.sweepLag
	p := l.pools[key]
	if p.Last > at {
		return false
	}
	if cp := *p; l.sh.Full(&cp, at) {
		l.dropPool(key)
		return true
	}
	return false
}

// sweepHolding forgets key's ended acceptances and old reports, and drops
// the holding when nothing is left to remember: not asking, no lease, no
// dry hint, no report, no request for 2*window + region_ttl before the
// pass.
func (l *RegionLease) sweepHolding(key string) bool {
	now := l.passAt
	h := l.keys[key]
	for seq, exp := range h.accepted {
		if exp <= now {
			delete(h.accepted, seq)
		}
	}
	for n, r := range h.reports {
		if r.at+2*l.window <= now {
			delete(h.reports, n)
		}
	}
	if h.asking || len(h.leases) > 0 || len(h.dated) > 0 || h.allow.tokens > 0 || h.spentUntil > now || h.emptyUntil > now || now < h.lastRequestAt+2*l.window+l.rttl || len(h.reports) > 0 {
		return false
	}
	l.dropHolding(key, h)
	return true
}

// dropFenceKey deletes key's (empty) map of fences held.
func (l *RegionLease) dropFenceKey(key string) {
	l.mem.fences.Remove(key)
	l.order.fences.Remove(key)
	delete(l.fences, key)
}

// dropGFenceKey deletes key's (empty) map of fence records.
func (l *RegionLease) dropGFenceKey(key string) {
	l.mem.gfences.Remove("")
	l.order.gfences.Remove(key)
	delete(l.gfences, key)
}

// dropPush deletes key's push state.
func (l *RegionLease) dropPush(key string) {
	l.order.pushes.Remove(key)
	memsize.Delete(l.pushes, &l.mem.pushes, key)
}
