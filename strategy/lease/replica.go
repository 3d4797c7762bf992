package lease

import (
	"slices"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/leasepool"
	"github.com/tokenmesh/tokenmesh/strategy/internal/wire"
)

// maxReplicasPerMessage bounds the states of one LeaseReplicas message
// this node sends; maxReplicasAccepted those it accepts.
const (
	maxReplicasPerMessage = 256
	maxReplicasAccepted   = 4096
)

// record is a key's bucket as its owner last shipped it to this node (a
// replica; see "# Crashes" in the package doc): level ticks at at (no
// refill before at), lent tokens in the owner's leases, all ended by
// lentUntil; from is the owner that shipped it; handover says it stopped
// deciding the key when it did.
type record struct {
	swept         // its place in the sweep's order (sweep.go)
	level, lent   int64
	at, lentUntil time.Duration
	from          strategy.NodeID
	handover      bool
}

// asPool is r as a pool whose inherited leases are r's lent tokens.
func (r *record) asPool() *pool {
	return &pool{Pool: leasepool.Pool{Level: r.level, Last: r.at, Inherited: r.lent, InheritedUntil: r.lentUntil}}
}

// asRecord is the inverse of asPool: p's level at p.Last, its inherited
// leases as lent (p's own leases, none in a pool made by asPool, are not
// counted); from and handover are left zero.
func (p *pool) asRecord() record {
	return record{level: p.Level, lent: p.Inherited, at: p.Last, lentUntil: p.InheritedUntil}
}

// stateOf is p at now as shipped to replicas: refilled to now (a copy),
// valid from max(now, p.Last), with its own and inherited leases as lent
// (and their end, when there are some).
func (l *Lease) stateOf(p *pool, now time.Duration) record {
	cp := *p
	l.sh.advance(&cp, now)
	r := record{level: cp.Level, at: max(now, cp.Last), lent: cp.Leased + cp.Inherited}
	if r.lent > 0 {
		r.lentUntil = max(cp.LentUntil, cp.InheritedUntil)
	}
	return r
}

// ship is one key's state queued for a replica.
type ship struct {
	key string
	r   record
}

// replicasOf is key's first K nodes in rendezvous order among members.
func (l *Lease) replicasOf(key string, members []strategy.NodeID) []strategy.NodeID {
	l.rank = rendezvous.Rank(l.rank[:0], key, members, l.replicas)
	return l.rank
}

// markDirty notes that key's pool changed, to be shipped at the next sync.
func (l *Lease) markDirty(now time.Duration, key string, fx *strategy.Effects) {
	if l.replicas < 2 {
		return
	}
	l.setDirty(key)
	if l.syncAt < 0 {
		l.syncAt = now + l.syncEvery
		fx.WakeAt(l.syncAt)
	}
}

// syncDirty ships the pools that changed since the last sync, of the keys
// this node owns, to the keys' other replicas.
func (l *Lease) syncDirty(now time.Duration, fx *strategy.Effects) {
	l.syncAt = -1
	keys := make([]string, 0, len(l.dirty))
	for k := range l.dirty {
		keys = append(keys, k)
		l.mem.dirty.Remove(k)
	}
	clear(l.dirty)
	if l.mem.dirty.ShouldRebuild() { // a cleared map keeps its slots: give them back
		l.dirty = map[string]bool{}
		l.mem.dirty.Rebuilt()
	}
	slices.Sort(keys)
	out := map[strategy.NodeID][]ship{}
	for _, k := range keys {
		p := l.pools[k]
		if p == nil || l.owner(k) != l.self || p.untouched(now) {
			continue // an untouched conservative start tells nothing: the previous owner's state does
		}
		l.addShip(out, k, l.stateOf(p, now), l.replicasOf(k, l.members))
	}
	l.sendShips(out, fx)
}

// addShip queues r (of key) for every node of to but this one.
func (l *Lease) addShip(out map[strategy.NodeID][]ship, key string, r record, to []strategy.NodeID) {
	for _, n := range to {
		if n != l.self {
			out[n] = append(out[n], ship{key, r})
		}
	}
}

// sendShips sends the queued states, per peer in node order, at most
// maxReplicasPerMessage a message (one state alone as LeaseReplica).
func (l *Lease) sendShips(out map[strategy.NodeID][]ship, fx *strategy.Effects) {
	peers := make([]strategy.NodeID, 0, len(out))
	for n := range out {
		peers = append(peers, n)
	}
	slices.Sort(peers)
	for _, n := range peers {
		ss := out[n]
		if len(ss) == 1 {
			m := encodeShips(ss)
			m.States[0].SinceBaseNs += m.BaseNs
			fx.Send(n, wire.MustMarshal(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Replica{Replica: m.States[0]}}))
			continue
		}
		for len(ss) > 0 {
			k := min(len(ss), maxReplicasPerMessage)
			fx.Send(n, wire.MustMarshal(&peerv1.LeaseMessage{Body: &peerv1.LeaseMessage_Replicas{Replicas: encodeShips(ss[:k])}}))
			ss = ss[k:]
		}
	}
}

// encodeShips is ss as one LeaseReplicas: times count from the earliest
// state's (base_ns), a lease end from its state's time (a lease end
// before it is the same as one at it: the lent tokens are released at
// the first refill).
func encodeShips(ss []ship) *peerv1.LeaseReplicas {
	base := ss[0].r.at
	for _, s := range ss[1:] {
		base = min(base, s.r.at)
	}
	m := &peerv1.LeaseReplicas{BaseNs: int64(base), States: make([]*peerv1.LeaseReplica, len(ss))}
	for i, s := range ss {
		st := &peerv1.LeaseReplica{Key: s.key, LevelTicks: s.r.level, SinceBaseNs: int64(s.r.at - base), LentTokens: s.r.lent, Handover: s.r.handover}
		if s.r.lent > 0 {
			st.LentForNs = int64(max(s.r.lentUntil-s.r.at, 0))
		}
		m.States[i] = st
	}
	return m
}

// receiveReplicas merges each state of m (checked: checkReplicas) into
// this node's record of its key and, for the keys this node owns, into
// their pools (adopt).
func (l *Lease) receiveReplicas(now time.Duration, from strategy.NodeID, m *peerv1.LeaseReplicas) {
	if l.replicas < 2 {
		return // replicas off here: keep today's conservative takeover
	}
	base := time.Duration(m.BaseNs)
	for _, s := range m.States {
		in := record{level: s.LevelTicks, lent: s.LentTokens, at: base + time.Duration(s.SinceBaseNs), from: from, handover: s.Handover}
		if in.lent > 0 {
			in.lentUntil = in.at + time.Duration(s.LentForNs)
		}
		if r := l.records[s.Key]; r != nil {
			l.mergeRecord(r, in)
		} else {
			l.setRecord(s.Key, &in)
		}
		if l.owner(s.Key) == l.self {
			l.adopt(s.Key, now)
		}
	}
}

// mergeRecord merges in into r: a later state from the same owner replaces
// it; otherwise (another sender, or an older state) the merge keeps the
// more consumed bucket: both refilled to the later time, the lower level
// and the larger lent tokens until the later end.
func (l *Lease) mergeRecord(r *record, in record) {
	in.swept = swept{pos: r.pos, set: l.pass} // its place in the sweep's order kept; not dropped in this pass
	if in.from == r.from && in.at >= r.at {
		*r = in
		return
	}
	m := l.mergeRecords(r, &in)
	m.from, m.handover = in.from, r.handover || in.handover
	m.swept = in.swept
	*r = *m
}

// mergeInto keeps in p (refilled to the same time as q) the more consumed
// of p and q: the lower level, the larger inherited lent tokens (never
// more than p's capacity leaves) until the later end.
func (l *Lease) mergeInto(p, q *pool) {
	p.Level = min(p.Level, q.Level)
	if q.Inherited > 0 {
		p.Inherited = min(max(p.Inherited, q.Inherited), l.sh.burst-p.Leased)
		p.InheritedUntil = max(p.InheritedUntil, q.InheritedUntil)
	}
	p.Level = min(p.Level, l.sh.capacity(p))
}

// trusted reports whether r may replace a conservative takeover: its
// owner handed the key over, or it is no longer a member in this view
// (it crashed or left, so it decides no more).
func (l *Lease) trusted(r *record) bool {
	return r.handover || !slices.Contains(l.members, r.from)
}

// adopt moves key's record (if any) into its pool at this node as owner:
// a trusted record replaces a pool still untouched in its conservative
// start (or makes the pool); any other record is merged into the pool
// (kept until a pool is made, if none).
func (l *Lease) adopt(key string, now time.Duration) {
	r := l.records[key]
	if r == nil || l.handedOff(key, r) {
		return
	}
	p := l.pools[key]
	switch {
	case p == nil && !l.trusted(r):
		return // pool() decides when the key is first used
	case p == nil:
		l.setPool(key, r.asPool())
	case l.trusted(r) && p.untouched(now):
		l.mem.askers -= int(p.askMem) // the askers go with the old state
		sw := swept{pos: p.pos, set: l.pass}
		*p = *r.asPool() // in place: grant records of 0 tokens point to it
		p.swept = sw
	default:
		q := r.asPool()
		t := max(p.Last, q.Last, now)
		l.sh.advance(p, t)
		l.sh.advance(q, t)
		l.mergeInto(p, q)
	}
	l.dropRecord(key)
}

// untouched reports whether p is a conservative start that nothing has
// been taken from yet.
func (p *pool) untouched(now time.Duration) bool {
	return p.conservative && p.Level == 0 && p.Leased == 0 && p.Inherited == 0 && now < p.Last
}
