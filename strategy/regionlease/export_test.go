package regionlease

import (
	"fmt"
	"slices"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// Conserved checks, for tests, the invariant the envelope rests on, over
// both tiers: for every global owner O (every current node with a pool
// for a key), O's level plus the tokens that any node holds in unexpired
// leases granted by O (a node's lease, or a regional owner's stock lease:
// what is left of it and what its region's nodes still hold of it in
// their unexpired leases) never exceed the burst; no level, leased,
// stock or lent count is negative. current is the current incarnation of
// every node; all is every incarnation ever built (a crashed regional
// owner's records name the stock lease its nodes' leases came from);
// down reports the nodes down at now (nil: none). Leases held by crashed
// nodes are counted too, which only makes the check stricter, except a
// lost one (lostLease): a lease of a previous incarnation of O held by a
// node down at now, which no incarnation will use and no warm-up can ask.
func Conserved(current map[strategy.NodeID]*RegionLease, all []*RegionLease, down func(strategy.NodeID) bool, burst int64, now time.Duration) error {
	ids := make([]strategy.NodeID, 0, len(current))
	for id := range current {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	// parent finds the stock lease node n's lease (granter g, key, seq)
	// was lent from: its granter's record, in any incarnation.
	parent := func(g, n strategy.NodeID, key string, seq uint64) (strategy.NodeID, bool) {
		for _, inc := range all {
			if inc.self != g {
				continue
			}
			if r := inc.grants[grantID{n, key, seq}]; r != nil && r.pool == nil {
				return r.parentFrom, true
			}
		}
		return "", false
	}
	for _, id := range ids {
		n := current[id]
		for key, h := range n.keys {
			for _, ls := range h.leases {
				if ls.tokens < 0 || ls.lent < 0 || ls.subs < 0 {
					return fmt.Errorf("at %v: %s: lease %d of %q from %s: %d tokens, %d lent in %d leases", now, id, ls.seq, key, ls.from, ls.tokens, ls.lent, ls.subs)
				}
			}
		}
	}
	for _, oid := range ids {
		o := current[oid]
		for key, p := range o.pools {
			cp := o.answerState(now, key, p)     // dated pushes (dated.go) counted as settled
			if cp.Level < -64 || cp.Leased < 0 { // 64 ticks: the rounding of the promised refill
				return fmt.Errorf("at %v: %s: pool of %q has level %d ticks, %d leased", now, oid, key, cp.Level, cp.Leased)
			}
			var held int64
			for _, hid := range ids {
				hk := current[hid].keys[key]
				if hk == nil {
					continue
				}
				for _, ls := range hk.leases {
					if ls.expires <= now || lostLease(current, down, hid, ls) {
						continue
					}
					if ls.from == oid {
						held += ls.tokens
						continue
					}
					if pf, ok := parent(ls.from, hid, key, ls.seq); ok && pf == oid {
						held += ls.tokens
					}
				}
			}
			if cp.Level+held*o.sh.Per > burst*o.sh.Per {
				return fmt.Errorf("at %v: %s's level (%d ticks, %d per token) of %q plus %d tokens held in its leases (both tiers) exceed the burst %d",
					now, oid, cp.Level, o.sh.Per, key, held, burst)
			}
		}
	}
	return nil
}

// lostLease reports whether lease ls held by node hid is lost for good:
// hid is down (its leases went with its incarnation: a restart builds a
// new one with none) and ls was received before its granter's current
// incarnation started, so it came from a previous incarnation, whose
// bucket is forgotten (a warm-up asks the live members only: package
// doc, # Warm-up, "or by a crashed node, with which it is lost"). Such a
// lease is not counted against the granter's new bucket: no node can
// take a token from it. A down holder's lease of the granter's current
// incarnation is still counted (its bucket's capacity shrinks by it).
func lostLease(current map[strategy.NodeID]*RegionLease, down func(strategy.NodeID) bool, hid strategy.NodeID, ls held) bool {
	if down == nil || !down(hid) {
		return false
	}
	g := current[ls.from]
	return g != nil && g.restarted && ls.since < g.restartAt
}

// Float is, for tests, the tokens this node holds at now in unexpired
// leases of all keys (a regional owner's stock included), and the whole
// tokens in its pools.
func (l *RegionLease) Float(now time.Duration) (held, level int64) {
	for _, h := range l.keys {
		for _, ls := range h.leases {
			if ls.expires > now {
				held += ls.tokens
			}
		}
	}
	for key, p := range l.pools {
		cp := l.answerState(now, key, p)
		level += cp.Level / l.sh.Per
	}
	return held, level
}

// ConservedKeys checks, for tests, the invariant over the whole cluster and
// across owners, key by key: the levels of every pool of the key at the
// nodes not down at now (a crashed node's bucket is gone with it), plus
// every token held in unexpired leases of the key at any node (both tiers:
// what is left of a regional owner's stock leases and its nodes' leases;
// leases at crashed nodes counted too, which only makes the check
// stricter, except a previous granter incarnation's lease lost with its
// crashed holder: lostLease), never exceed the burst. Unlike Conserved (one owner's pool
// and its own leases), it sees a new global owner (a takeover, a restart)
// that would start while a previous owner's leases are still out. It
// holds whenever no two sides decide a key as two buckets (partition:
// conserve with no member forgotten during a cut).
func ConservedKeys(current map[strategy.NodeID]*RegionLease, down func(strategy.NodeID) bool, burst int64, now time.Duration) error {
	return ConservedKeysWith(current, down, burst, now, nil)
}

// ConservedKeysWith is ConservedKeys with allowed[key] more tokens of key
// held: the live driver's open allowances of key, granted (Grant) and not
// returned, still valid at now, at nodes up (the tokens a driver took of
// them count too, which only makes the check stricter: a lease is not
// released while an allowance of it is valid).
func ConservedKeysWith(current map[strategy.NodeID]*RegionLease, down func(strategy.NodeID) bool, burst int64, now time.Duration, allowed map[string]int64) error {
	ids := make([]strategy.NodeID, 0, len(current))
	for id := range current {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	type sum struct {
		level int64 // ticks
		held  int64 // tokens
		per   int64
		who   []string
	}
	keys := map[string]*sum{}
	at := func(key string) *sum {
		s := keys[key]
		if s == nil {
			s = &sum{}
			keys[key] = s
		}
		return s
	}
	for _, id := range ids {
		n := current[id]
		if !down(id) {
			for key, p := range n.pools {
				cp := n.answerState(now, key, p) // dated pushes (dated.go) counted as settled
				s := at(key)
				s.level += cp.Level
				s.per = n.sh.Per
				s.who = append(s.who, fmt.Sprintf("%s level %d ticks (leased %d, inherited %d)", id, cp.Level, cp.Leased, cp.Inherited))
			}
		}
		for key, h := range n.keys {
			for _, ls := range h.leases {
				if ls.expires > now && ls.tokens > 0 && !lostLease(current, down, id, ls) {
					s := at(key)
					s.held += ls.tokens
					s.per = n.sh.Per
					s.who = append(s.who, fmt.Sprintf("%s holds %d from %s (seq %d, until %v)", id, ls.tokens, ls.from, ls.seq, ls.expires))
				}
			}
		}
	}
	for _, key := range sortedKeys(allowed) {
		if n := allowed[key]; n > 0 {
			s := at(key)
			s.held += n
			for _, id := range ids {
				if current[id] != nil {
					s.per = current[id].sh.Per
				}
			}
			s.who = append(s.who, fmt.Sprintf("%d tokens in open allowances", n))
		}
	}
	for _, key := range sortedKeys(keys) {
		s := keys[key]
		if s.level+s.held*s.per > burst*s.per {
			return fmt.Errorf("at %v: key %q: levels (%d ticks, %d per token) plus %d tokens in leases exceed the burst %d: %v",
				now, key, s.level, s.per, s.held, burst, s.who)
		}
	}
	return nil
}

// FloatParts is, for tests, one key's tokens at one node: the whole
// tokens of its pool (as global owner) and the pool's leased count, the
// tokens in its unexpired region-tier leases (a regional owner's stock,
// not lent on) and those lent on from them, and the tokens in its
// unexpired node-tier leases.
type FloatParts struct{ Level, Leased, Stock, Lent, Node int64 }

// FloatByKey is, for tests, FloatParts per key at now.
func (l *RegionLease) FloatByKey(now time.Duration) map[string]FloatParts {
	out := map[string]FloatParts{}
	for k, p := range l.pools {
		cp := l.answerState(now, k, p)
		f := out[k]
		f.Level += cp.Level / l.sh.Per
		f.Leased += cp.Leased
		out[k] = f
	}
	for k, h := range l.keys {
		f := out[k]
		for _, ls := range h.leases {
			if ls.expires <= now {
				continue
			}
			if ls.region {
				f.Stock += ls.tokens
				f.Lent += ls.lent
			} else {
				f.Node += ls.tokens
			}
		}
		out[k] = f
	}
	return out
}

// WarmUps is, for tests, the warm-ups this node started and those that
// ended with every answer (warmup.go).
func (l *RegionLease) WarmUps() (started, full uint64) { return l.wu.seq, l.wu.full }
