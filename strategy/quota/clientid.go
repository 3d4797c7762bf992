package quota

import (
	"slices"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// Client ids (package doc, # Client ids; ours). A client that names itself
// (strategy.QuotaUsage.ID: RLQS's tokenmesh-client-id header, one per
// Envoy) and comes back on a new stream — its node died, it reconnected to
// any node — takes over the share its id held, which is sent to it again
// as it is (Envoy keeps its bucket cache across streams: an identical
// token bucket only renews the TTL), instead of starting as a new client
// that waits until the old share has surely expired and its first
// assignment is paid.

// takeover is one share taken over by a claim (for tests): the share's
// holder before and after, and what it held.
type takeover struct {
	at           time.Duration
	from, to     holderID
	cid          string
	units, burst int64
}

// claim marks s, a new share from a report u that carried what the client
// holds (h; nil: nothing known), as a claim on the share of u.ID when u
// says its client holds the bucket (time_elapsed > 0: Envoy's first report
// of a bucket has 0, so a restarted Envoy, whose bucket cache is new, is a
// new client) and its node knows of nothing it holds.
func (q *Quota) claim(s *share, u strategy.QuotaUsage, h *held, now time.Duration) {
	s.cid = u.ID
	if u.ID != "" && u.Elapsed > 0 && h == nil {
		s.claimUntil = now + q.ttl
	}
}

// isClaim reports whether s may still take over the share of its id: a
// claim, nothing sent to it yet (no DENY_ALL either: Envoy would replace
// its bucket with the blanket rule, and start the next token bucket
// full), unexpired.
func (s *share) isClaim(now time.Duration) bool {
	return s.cid != "" && s.claimUntil > now && s.live && !s.sent && s.denyAt == 0
}

// takeOvers lets every claim of a take over the share of its id, when
// that is safe now (donor), and withholds the DENY_ALL of a claim whose
// donor may become safe soon (its node not yet seen gone, or a replica to
// adopt awaited); a first token bucket paid meanwhile is sent all the same
// (shape.sendDue), and ends the claim.
func (q *Quota) takeOvers(a *alloc, now time.Duration) {
	for _, c := range slices.Clone(a.shares) {
		if !c.isClaim(now) {
			continue
		}
		d, wait := q.donor(a, c, now)
		if d != nil {
			q.takeOver(a, d, c, now)
			continue
		}
		if a.adoptAt > now {
			wait = max(wait, a.adoptAt)
		}
		c.holdDeny = min(wait, c.claimUntil)
	}
}

// donor is the share claim c may take over now, or nil and until when one
// may become one (0: none). The share must be the only other one of c's
// id in a (two shares of one id — two Envoys configured alike, or a forged
// id — are ambiguous: neither is taken over), sent (a token bucket its
// client holds), no longer renewed (not live, not awaiting its node's
// report or pinned), its node gone from this node's view (a crash, a
// drain, a partition: a stream that merely ended does not make a share
// free to take, so that streams a client opens and ends at will cannot
// hand its id's share around), and acknowledged recently enough that the
// resend surely reaches the client before the assignment it holds expires
// there (ackedAt + ttl > now + apply_lag): after an expiry Envoy would
// start it full, unpaid.
func (q *Quota) donor(a *alloc, c *share, now time.Duration) (d *share, wait time.Duration) {
	for _, s := range a.shares {
		if s == c || s.cid != c.cid {
			continue
		}
		if d != nil || wait > 0 {
			return nil, 0 // ambiguous
		}
		inTime := s.sent && s.ackedAt > 0 && s.ackedAt+q.ttl > now+q.applyLag
		switch {
		case !inTime:
			return nil, 0
		case !s.live && !s.await && !s.pinned && !slices.Contains(q.members, s.id.node):
			d = s
		default:
			// its node may yet be seen gone: the claim waits (without a
			// DENY_ALL) while the resend would still be in time
			wait = s.ackedAt + q.ttl - q.applyLag
		}
	}
	return d, wait
}

// takeOver moves donor d's share to claim c: c's client is d's (the same
// id), so it holds d's assignment (or the one before it: any token bucket
// d was sent is paid), and d's assignment is sent to it again at once: an
// identical token bucket that Envoy only renews. What c held (a first
// assignment's burst paid in part, never sent) is destroyed; d's pending
// releases stay as they are.
func (q *Quota) takeOver(a *alloc, d, c *share, now time.Duration) {
	a.heldUnits -= c.units
	a.heldBurst -= c.burst
	id, demand := c.id, c.demand
	*c = *d
	c.id, c.live, c.await, c.pinned, c.pinnedUntil = id, true, false, false, 0
	c.claimUntil, c.holdDeny = 0, 0
	if demand >= 0 {
		c.demand = demand
	}
	c.sentAt = min(c.sentAt, now-q.renew) // resent now (sendDue)
	a.remove(d.id)
	q.sh.resize(a, now)
	q.takeovers = append(q.takeovers, takeover{at: now, from: d.id, to: id, cid: c.cid, units: c.units, burst: c.burst})
	if len(q.takeovers) > maxTakeoverLog {
		q.takeovers = q.takeovers[1:]
	}
}

// maxTakeoverLog bounds Quota.takeovers (kept for tests).
const maxTakeoverLog = 64

// earlyUsage is a report with a client id from a node that sees this node
// as the key's owner before this node does (their views disagree for up to
// a failure detector's delay after a change). Without an id such a report
// is dropped (its node resyncs with the owner it sees next, and the
// client's next report comes a report interval later); a claim's report is
// kept and handled if this node comes to own the key soon: after an
// owner's kill the new owner may see the kill after the killed node's
// Envoys' new nodes, whose resyncs would be lost, and those Envoys would
// take their shares over a report interval later, perhaps too late.
type earlyUsage struct {
	at   time.Duration
	from strategy.NodeID
	u    strategy.QuotaUsage
	h    *held
}

// maxEarly bounds the early reports kept; earlyFor is how long one is kept
// (views converge within a failure detector's delay, 1 s, and max_skew).
const (
	maxEarly = 256
	earlyFor = time.Second
)

// keepEarly keeps a report with a client id that came before this node
// sees itself as its key's owner (earlyUsage); others, and any beyond
// maxEarly, are dropped.
func (q *Quota) keepEarly(now time.Duration, from strategy.NodeID, u strategy.QuotaUsage, h *held) {
	if u.ID == "" {
		return
	}
	q.early = slices.DeleteFunc(q.early, func(e earlyUsage) bool { return now >= e.at+earlyFor+q.maxSkew })
	if len(q.early) < maxEarly {
		q.early = append(q.early, earlyUsage{at: now, from: from, u: u, h: h})
	}
}

// replayEarly handles, after a view change, the early reports whose key
// this node now owns, from nodes still members, and drops the stale ones.
func (q *Quota) replayEarly(now time.Duration, fx *strategy.Effects) {
	if len(q.early) == 0 {
		return
	}
	early := q.early
	q.early = nil
	for _, e := range early {
		switch {
		case now >= e.at+earlyFor+q.maxSkew:
		case q.owner(e.u.Key) == q.self && slices.Contains(q.members, e.from):
			q.ownerUsage(now, e.from, e.u, e.h, fx)
		default:
			q.early = append(q.early, e)
		}
	}
}
