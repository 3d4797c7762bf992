package quota

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/memsize"
	"github.com/tokenmesh/tokenmesh/strategy/internal/wire"
)

// Replication of the owner's allocation (package doc, # Takeover): the
// owner sends each key's allocation to the key's next replicas-1 nodes in
// rendezvous order with every change and at least every ttl/2, and hands
// it over to the key's new owner when a view change moves the key away; a
// node that takes the key over adopts it instead of freezing the key.

// Bounds of replication: replicas at most maxReplicas; a replica holds at
// most maxReplicaEntries shares and releases (an allocation with more is
// not replicated: its successor freezes the key); a node keeps at most
// maxRecords keys' replicas holding at most maxRecordEntries shares and
// releases in all (about 100 bytes each: some 100 MB at most), and
// refuses a replica beyond, once those older than replica_age are dropped.
const (
	maxReplicas       = 8
	maxReplicaEntries = 4096
	maxRecords        = 1 << 16
	maxRecordEntries  = 1 << 20
	maxNodeIDBytes    = 256
)

// record is a key's allocation as an owner last replicated it to this
// node: its shares (live as the owner saw them) and pending releases, the
// whole tokens in its reserve at at, its own takeover (frozenUntil), and
// whether the owner handed the key over (decides it no more).
type record struct {
	from        strategy.NodeID
	at          time.Duration
	handover    bool
	reserve     int64
	frozenUntil time.Duration
	shares      []*share
	pending     []release
}

// replicaOf is a's state at now as a replica of key.
func (q *Quota) replicaOf(key string, a *alloc, now time.Duration, handover bool) *peerv1.QuotaReplica {
	m := &peerv1.QuotaReplica{Key: key, Handover: handover, FillIntervalS: int64(q.sh.fill / time.Second),
		Units: q.sh.units, Burst: q.sh.burst}
	if a.frozenUntil > now {
		m.FrozenUntilNs = int64(a.frozenUntil)
	}
	for _, s := range a.shares {
		sentAt := s.sentAt
		if s.pinned {
			// its renewals may have been dropped (share.pinnedUntil): the
			// send the client surely received
			sentAt = s.pinnedUntil - q.ttl
		}
		m.Shares = append(m.Shares, &peerv1.QuotaReplicaShare{Node: string(s.id.node), Client: uint64(s.id.client),
			TokensPerFill: s.units, MaxTokens: s.burst, Sent: s.sent, Seq: s.seq, SentAtNs: int64(sentAt),
			ExpiresNs: int64(s.expires), Demand: s.demand, Live: s.live || s.await, IdleSinceNs: int64(s.idleSince),
			ClientId: s.cid, AckedSentAtNs: int64(min(s.ackedAt, sentAt))})
	}
	for _, r := range a.pending {
		m.Pending = append(m.Pending, &peerv1.QuotaReplicaRelease{Node: string(r.id.node), Client: uint64(r.id.client),
			TokensPerFill: r.units, MaxTokens: r.burst, Seq: r.seq, AtNs: int64(r.at)})
	}
	return m
}

// stamp sets m's time and its reserve's whole tokens at now.
func stamp(m *peerv1.QuotaReplica, a *alloc, now time.Duration) {
	r := a.reserve // a copy: Tokens advances it
	m.AtNs, m.ReserveTokens = int64(now), max(int64(math.Floor(r.Tokens(now))), 0)
}

// successors is key's next replicas-1 nodes in rendezvous order after this
// one (its owner).
func (q *Quota) successors(key string) []strategy.NodeID {
	if q.replicas < 2 {
		return nil
	}
	rank := rendezvous.Rank(nil, key, q.members, q.replicas)
	return slices.DeleteFunc(rank, func(n strategy.NodeID) bool { return n == q.self })
}

// replicate sends a's state to key's successors when it changed since the
// last replica sent (an assignment, a cut, a release, a renewal's expiry;
// not a demand estimate alone) or renew has passed since (force: whatever
// the state). It returns the
// next time a replica is due (0: none).
func (q *Quota) replicate(now time.Duration, key string, a *alloc, force bool, fx *strategy.Effects) time.Duration {
	to := q.successors(key)
	if len(to) == 0 {
		return 0
	}
	if len(a.shares)+len(a.pending) > maxReplicaEntries {
		// Too large to replicate: the successors are told that this node
		// holds the key (a warm-up query is answered "some"; warmup.go),
		// at most every ttl/2.
		if a.replBytes == nil || len(a.replBytes) > 0 || now >= a.replAt+q.renew {
			a.replBytes, a.replAt = []byte{}, now
			msg := frame(&peerv1.QuotaState{Key: key})
			for _, n := range to {
				fx.Send(n, msg)
			}
		}
		return a.replAt + q.renew
	}
	m := q.replicaOf(key, a, now, false)
	// What changed: the state without its time, reserve and demand
	// estimates (which move with every report; the periodic replica
	// carries them, and the clients' next reports give them anew).
	demands := make([]float64, len(m.Shares))
	for i, x := range m.Shares {
		demands[i], x.Demand = x.Demand, 0
	}
	enc := wire.MustMarshal(m)
	if !force && a.replBytes != nil && bytes.Equal(enc, a.replBytes) && now < a.replAt+q.renew {
		return a.replAt + q.renew
	}
	for i, x := range m.Shares {
		x.Demand = demands[i]
	}
	a.replBytes, a.replAt = enc, now
	stamp(m, a, now)
	msg := frame(m)
	for _, n := range to {
		fx.Send(n, msg)
	}
	return now + q.renew
}

// handOver sends a's final state, marked handover, to key's new owner o:
// this node decides the key no more.
func (q *Quota) handOver(now time.Duration, key string, a *alloc, o strategy.NodeID, fx *strategy.Effects) {
	if q.replicas < 2 || o == q.self || o == "" || len(a.shares)+len(a.pending) > maxReplicaEntries {
		return
	}
	m := q.replicaOf(key, a, now, true)
	stamp(m, a, now)
	fx.Send(o, frame(m))
}

// onReplica keeps a replica (checked: recordOf) as the key's record (a
// later one replaces it) and, when this node owns the key and its
// allocation is still to be taken over, adopts it (or schedules that).
// Errors: values out of bounds, or more records than maxRecords or
// maxRecordEntries allow.
func (q *Quota) onReplica(now time.Duration, from strategy.NodeID, m *peerv1.QuotaReplica, fx *strategy.Effects) error {
	r, err := q.recordOf(now, from, m)
	if err != nil {
		return err
	}
	if q.replicas < 2 {
		return nil // replicas off here: every takeover freezes
	}
	old := q.records[m.Key]
	if old != nil && old.at > r.at {
		return nil // an older state
	}
	if full := func() bool {
		n := q.recordEntries + r.entries()
		if old != nil {
			n -= old.entries()
		}
		return (old == nil && len(q.records) >= maxRecords) || n > maxRecordEntries
	}; full() {
		q.sweepRecords(now)
		if old = q.records[m.Key]; full() {
			return errTooManyRecords(m.Key)
		}
	}
	q.dropRecord(m.Key)
	q.records[m.Key] = r
	q.recordEntries += r.entries()
	q.mem.records.Add(m.Key)
	q.mem.recordExtra += recordBytes(r)
	if q.owner(m.Key) != q.self {
		return nil
	}
	a := q.allocs[m.Key]
	switch {
	case a == nil:
		a = q.allocFor(m.Key, now)
	case !a.adopted && a.frozenUntil > now:
		if b := q.tryAdopt(m.Key, a, now); b != nil {
			a = b
		}
	default:
		return nil
	}
	q.rebalance(now, m.Key, a, fx)
	return nil
}

// sweepRecords drops the records too old to be adopted.
func (q *Quota) sweepRecords(now time.Duration) {
	for k, r := range q.records {
		if now-r.at > q.replicaAge {
			q.dropRecord(k)
			q.markGone(k, now) // a warm-up query for it is answered "some" (warmup.go)
		}
	}
	q.records = memsize.Shrink(q.records, &q.mem.records)
}

// dropRecord forgets key's record, if any.
func (q *Quota) dropRecord(key string) {
	if r := q.records[key]; r != nil {
		q.recordEntries -= r.entries()
		q.mem.records.Remove(key)
		q.mem.recordExtra -= recordBytes(r)
		delete(q.records, key)
	}
}

// entries is r's shares and releases (plus one for the record itself).
func (r *record) entries() int { return 1 + len(r.shares) + len(r.pending) }

// plan says whether key's record may be adopted by a new allocation here,
// and when: the record must come from the owner before the latest change
// that made this node the key's owner (or, after a restart, be a hand-over
// sent since), and either be a hand-over sent after that change began
// (views converge within 1 s) or come from an owner that left this node's
// view (crashed, or drained), taken at most replica_age before the change,
// adopted replica_wait after it (every replica it sent before dying has
// arrived by then). change is the change's time (the restart's).
func (q *Quota) plan(key string, now time.Duration) (r *record, adoptAt, change time.Duration, ok bool) {
	r = q.records[key]
	if r == nil || q.replicas < 2 {
		return nil, 0, 0, false
	}
	var prev strategy.NodeID
	concern := false
	if q.restarted {
		change, concern = q.startAt, true
	}
	for _, c := range q.changes {
		if p := rendezvous.Owner(key, c.prev); p != q.self && c.at >= change {
			change, prev, concern = c.at, p, true
		}
	}
	switch {
	case !concern:
		return nil, 0, 0, false // no takeover: nothing to continue
	case r.handover:
		if (prev != "" && r.from != prev) || r.at < change-time.Second-q.maxSkew {
			return nil, 0, 0, false
		}
		return r, now, change, true
	case prev == "" || r.from != prev || slices.Contains(q.members, prev) || change-r.at > q.replicaAge:
		return nil, 0, 0, false
	}
	return r, max(now, change+q.replicaWait), change, true
}

// tryAdopt adopts key's record into a (a new or frozen allocation here) if
// plan allows it now, returning the allocation that replaces a; or
// schedules the adoption (a.adoptAt) and returns nil.
func (q *Quota) tryAdopt(key string, a *alloc, now time.Duration) *alloc {
	r, at, change, ok := q.plan(key, now)
	if !ok {
		return nil
	}
	if at > now {
		a.adoptAt = at
		a.wake = minWake(a.wake, at)
		return nil
	}
	b := q.adopt(a, r, now, change)
	if b == nil {
		return nil // it does not fit beside what a counts: a stays frozen
	}
	q.dropRecord(key)
	q.setAlloc(key, b)
	b.wake = now
	if r.handover {
		q.adoptedHandovers++
	} else {
		q.adoptedReplicas++
	}
	return b
}

// adopt builds the allocation that continues r at now, merged with a (the
// frozen allocation made meanwhile from the clients' reports), or nil when
// together they would hold more than the key's units or burst.
//
//   - r's shares are counted as held. A share sent to a client whose node is
//     a member is renewed at once if the renewal surely reaches the client
//     before the assignment it holds expires (sentAt + ttl > now +
//     apply_lag); else it awaits confirmation (share.await): it is renewed
//     once that node reports what the client holds (confirm). The others are counted
//     until their expiry as the replica has it (the owner replicates with
//     every renewal), then released.
//   - r's pending releases are counted as they are.
//   - The reserve: from a hand-over, r's whole tokens at r's time (its sender
//     decides nothing after it), refilled since; from a crashed owner, empty
//     at the change: its level at r's time less what the owner could have
//     taken since (all of it, and the refill: it may have decided until it
//     died, before the change), refilled since the change.
//   - r's own takeover (frozenUntil) is inherited.
func (q *Quota) adopt(a *alloc, r *record, now, change time.Duration) *alloc {
	b := &alloc{winStart: a.winStart, plain: a.plain, plainCur: a.plainCur, adopted: true}
	if r.frozenUntil > now {
		b.frozenUntil = r.frozenUntil
	}
	q.adoptShares(b, r, now)
	b.pending = slices.Clone(r.pending)
	b.countHeld()
	// What a counts: its clients' reports since the change.
	for _, x := range a.shares {
		q.mergeReported(b, x, now)
	}
	for _, p := range a.pending {
		b.pending = append(b.pending, p)
		b.heldUnits += p.units
		b.heldBurst += p.burst
	}
	if b.heldUnits > q.sh.units || b.heldBurst > q.sh.burst {
		return nil
	}
	q.startReserve(b, r, now, change)
	return b
}

// adoptShares adds r's shares to b: renewed at once, awaiting their
// node's report, or counted until their expiry (adopt).
func (q *Quota) adoptShares(b *alloc, r *record, now time.Duration) {
	for _, rs := range r.shares {
		s := *rs
		s.live, s.await, s.denyAt = false, false, 0
		member := slices.Contains(q.members, s.id.node)
		if s.sent && rs.live && member && s.sentAt+q.ttl > now+q.applyLag {
			// renewed at once: the renewal reaches the client before its
			// assignment (valid ttl from its receipt, after sentAt)
			// expires, and its node applies it even before it sees the
			// crash (renewsHeld)
			s.live, s.pinned, s.pinnedUntil = true, true, s.sentAt+q.ttl
			s.sentAt = min(s.sentAt, now-q.renew)
		} else if s.sent {
			s.await = rs.live && member
		} else {
			s.live = rs.live && member
		}
		b.shares = append(b.shares, &s)
	}
}

// countHeld sets b's held units and burst to its shares' and pending
// releases'.
func (b *alloc) countHeld() {
	for _, s := range b.shares {
		b.heldUnits += s.units
		b.heldBurst += s.burst
	}
	for _, p := range b.pending {
		b.heldUnits += p.units
		b.heldBurst += p.burst
	}
}

// mergeReported merges x, a share of the frozen allocation made from the
// clients' reports since the change, into b (the adopted replica).
func (q *Quota) mergeReported(b *alloc, x *share, now time.Duration) {
	var h *held
	if x.sent {
		h = &held{units: x.units, burst: x.burst, expires: x.expires - q.applyLag}
	}
	y := b.find(x.id)
	if y != nil && y.sent && (y.await || y.live) && x.live {
		if q.confirm(b, y, h, now) {
			if x.demand >= 0 {
				y.demand = x.demand
			}
			return
		}
		y = nil // released; x starts anew below
		h = nil
	}
	q.placeReported(b, x, y, h, now)
}

// placeReported counts x in b beside y, b's share of the same client
// (nil: none, or released), h what x's client holds (nil: nothing).
func (q *Quota) placeReported(b *alloc, x, y *share, h *held, now time.Duration) {
	switch {
	case y != nil:
		// the replica knows it (not awaiting): what x holds beyond it
		// is counted as a release until it expires
		y.live = y.live || x.live
		if h != nil {
			b.holdRelease(x)
		}
	case !x.live && !x.sent:
	case h != nil && x.live && x.expires > now+q.applyLag:
		s := *x
		b.insert(&s)
		b.heldUnits += s.units
		b.heldBurst += s.burst
	case h != nil:
		b.holdRelease(x)
	default:
		s := &share{id: x.id, demand: x.demand, live: x.live, idleSince: x.idleSince, cid: x.cid}
		if x.denyAt == 0 {
			s.claimUntil = x.claimUntil // still a claim (clientid.go): no DENY_ALL sent to it
		}
		b.insert(s)
	}
}

// holdRelease counts what x holds as a release until x expires.
func (b *alloc) holdRelease(x *share) {
	b.pending = append(b.pending, release{at: x.expires, units: x.units, burst: x.burst, id: x.id, seq: math.MaxUint64})
	b.heldUnits += x.units
	b.heldBurst += x.burst
}

// startReserve starts b's reserve: from a hand-over, r's whole tokens at
// r's time, refilled since; from a crashed owner, empty at the change.
func (q *Quota) startReserve(b *alloc, r *record, now, change time.Duration) {
	start, level := change, int64(0)
	if r.handover {
		start, level = min(r.at, now), r.reserve
	}
	full := bucket.Rate{Tokens: q.sh.units, Per: q.sh.fill}.Reduced()
	b.reserve = bucket.MustNew(full, q.sh.burst, start)
	b.reserve.AllowN(start, q.sh.burst-min(max(level, 0), q.sh.burst))
	q.sh.resize(b, start)
	b.slowedAt = now
}

// insert adds s to a's shares in order (none of its id there).
func (a *alloc) insert(s *share) {
	i, _ := slices.BinarySearchFunc(a.shares, s.id, func(x *share, id holderID) int { return x.id.compare(id) })
	a.shares = slices.Insert(a.shares, i, s)
}

// confirm takes a report of what the client of an adopted share s holds
// (h; nil: nothing) at its node, which sees this node as the key's owner:
// if it is s's assignment and a renewal sent now reaches the client before
// it expires there, s is live again and renewed at once (true). Otherwise
// (the replica missed a change, or the client's assignment expired) s is
// released — counted as held, the larger of s and h, until both have
// expired at the client — and false: the client starts anew with a paid
// first assignment.
func (q *Quota) confirm(a *alloc, s *share, h *held, now time.Duration) bool {
	s.await, s.pinned = false, false
	if h != nil && h.units == s.units && h.burst == s.burst && h.expires > now+q.applyLag {
		s.live = true
		s.sentAt = min(s.sentAt, now-q.renew) // renewed at once
		s.expires = max(s.expires, h.expires+q.applyLag)
		return true
	}
	rel := release{at: max(s.expires, now), units: s.units, burst: s.burst, id: s.id, seq: math.MaxUint64}
	if h != nil {
		rel.at = max(rel.at, h.expires+q.applyLag)
		if extra := h.units - s.units; extra > 0 && a.heldUnits+extra <= q.sh.units {
			rel.units += extra
			a.heldUnits += extra
		}
		if extra := h.burst - s.burst; extra > 0 && a.heldBurst+extra <= q.sh.burst {
			rel.burst += extra
			a.heldBurst += extra
		}
	}
	a.remove(s.id)
	if rel.units > 0 || rel.burst > 0 {
		a.pending = append(a.pending, rel)
	} // else: nothing held, nothing to count
	return false
}

func errTooManyRecords(key string) error {
	return fmt.Errorf("quota: replica of %q: this node keeps replicas of %d keys or %d shares and releases already (none older than replica_age to drop)", key, maxRecords, maxRecordEntries)
}
