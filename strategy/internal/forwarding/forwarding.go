// Package forwarding keeps what a node knows of a request it forwarded to
// the key's owner (the throttling article's designated server, found by rendezvous
// hashing) until the verdict comes: where it went, when to send it again
// and when to stop waiting. owner, lease and fixedwindow share it; each
// sends its own wire message and keeps its own timers.
package forwarding

import (
	"fmt"
	"slices"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// MaxWait bounds the max_wait a peer may ask for in a forward (an hour,
// ours): a longer one is refused as an error, so a peer cannot reserve a
// key's bucket arbitrarily far ahead. owner.MaxWait and lease.MaxWait.
const MaxWait = time.Hour

// Pending is one forwarded request waiting for its verdict.
type Pending struct {
	Req      strategy.Request
	Owner    strategy.NodeID   // where the last attempt went
	SentTo   []strategy.NodeID // every node it was forwarded to: each may answer
	Next     time.Duration     // the next retransmission, or Deadline
	Deadline time.Duration     // when the forwarder stops waiting and answers by itself
	MaxWait  time.Duration     // waiting mode (strategy.Waiter): the longest wait the client accepts; 0: drop mode
}

// SendTo records an attempt to owner at now and returns when to send it
// again: now + retryEvery, or Deadline if that comes first (also kept in
// Next, so a stale timer can be told from the current one).
func (p *Pending) SendTo(now time.Duration, owner strategy.NodeID, retryEvery time.Duration) time.Duration {
	p.Owner = owner
	if !slices.Contains(p.SentTo, owner) {
		p.SentTo = append(p.SentTo, owner)
	}
	p.Next = min(now+retryEvery, p.Deadline)
	return p.Next
}

// CheckFrom refuses a verdict from a node p was never forwarded to.
func (p *Pending) CheckFrom(from strategy.NodeID) error {
	if !slices.Contains(p.SentTo, from) {
		return fmt.Errorf("verdict for request %d from %s, but it was forwarded to %v", p.Req.ID, from, p.SentTo)
	}
	return nil
}

// CheckDelay refuses a verdict's wait (delayNs, nanoseconds after the
// request's arrival) outside [0, MaxWait], or a wait on a refusal.
func (p *Pending) CheckDelay(from strategy.NodeID, allowed bool, delayNs int64) error {
	if delayNs < 0 || delayNs > int64(p.MaxWait) || (delayNs > 0 && !allowed) {
		return fmt.Errorf("verdict for request %d from %s: delay_ns %d outside [0, max wait %v] (allowed %v)", p.Req.ID, from, delayNs, p.MaxWait, allowed)
	}
	return nil
}

// Orphaned returns, sorted, the IDs of the pending requests whose last
// attempt went to a node that is not among members (after a membership
// change: to be sent to the key's new owner, in this order, so that the
// messages do not depend on map order).
func Orphaned(pending map[uint64]*Pending, members []strategy.NodeID) []uint64 {
	var ids []uint64
	for id, p := range pending {
		if !slices.Contains(members, p.Owner) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}
