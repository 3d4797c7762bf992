package owner

import (
	"maps"
	"slices"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/wire"
)

// Replicas and leave (see "Replicas" and "Leave" in the package doc): the
// primary ships the levels of the keys it decided to their other replicas
// every `sync`, levels from peers are merged keeping the more consumed
// one, and a leaving node ships every level it holds, each shipment to be
// acknowledged.

// markDirty notes that key's level changed here, to be shipped to its
// replicas at the next sync.
func (o *Owner) markDirty(now time.Duration, key string, fx *strategy.Effects) {
	if o.leaving {
		// Leave shipped this key's level already, and the next owners
		// take over as soon as they learn of the leave: ship every later
		// change at once, not at the next sync.
		others := o.others()
		o.shipLevels([]string{key}, func(k string) []strategy.NodeID { return o.replicasOf(k, others) }, false, fx)
		return
	}
	if o.replicas < 2 || len(o.members) < 2 {
		return
	}
	o.dirty[key] = true
	if o.syncAt < 0 {
		o.syncAt = now + o.syncEvery
		fx.WakeAt(o.syncAt)
	}
}

// onLevelsAck forgets the leave shipment a levels acknowledgement from its
// receiver names.
func (o *Owner) onLevelsAck(now time.Duration, from strategy.NodeID, a *peerv1.OwnerLevelsAck, fx *strategy.Effects) {
	if o.autoAck(now, from, a.Seq, fx) {
		return
	}
	if o.ackTo[a.Seq] == from {
		delete(o.unacked, a.Seq)
		delete(o.ackTo, a.Seq)
	}
}

// receiveLevels (validated: checkLevels) merges each level into its key's
// bucket (the more consumed one is kept), ends the warm-ups waiting for
// the sender, and acknowledges a leave shipment (seq != 0).
func (o *Owner) receiveLevels(now time.Duration, from strategy.NodeID, ls *peerv1.OwnerLevels, fx *strategy.Effects) {
	if o.auto != nil && isRound(ls) {
		o.receiveRound(now, from, ls, fx)
		return
	}
	for _, l := range ls.Levels {
		at := time.Duration(l.AtNs)
		sub := o.subOf(l.Key)
		if o.auto != nil && sub == o.auto.void {
			continue // beyond this node's K: not a sub-bucket it keeps
		}
		t := o.tables[sub]
		b, ok := t.Lookup(l.Key)
		if !ok {
			b = t.Get(l.Key, min(at, now))
			if o.auto != nil {
				o.autoNewBucket(l.Key, b) // none held here: new since the last re-split, empty
			}
		}
		ticks := l.LevelTicks
		if o.auto != nil {
			ticks = o.fromWire(sub, ticks)
		}
		_ = b.MergeLevelAtFloor(now, ticks, at, o.floors[sub]) // validated above; a sender ahead of this clock is taken at now
		if o.owns(l.Key) {
			o.markDirty(now, l.Key, fx)
		}
	}
	for _, l := range ls.Levels {
		if f := o.fetching[l.Key]; f != nil {
			f.await = slices.DeleteFunc(f.await, func(m strategy.NodeID) bool { return m == from })
			if len(f.await) == 0 {
				o.fetched(now, l.Key, false, fx)
			}
		}
	}
	if ls.Seq != 0 {
		fx.Send(from, wire.MustMarshal(&peerv1.OwnerMessage{Body: &peerv1.OwnerMessage_LevelsAck{LevelsAck: &peerv1.OwnerLevelsAck{Seq: ls.Seq}}}))
	}
}

// shipLevels sends the levels of keys (sorted) to the nodes chosen by to,
// batched per peer, maxLevelsPerMessage a message; with ack, every message
// gets a seq and is kept until acknowledged.
func (o *Owner) shipLevels(keys []string, to func(key string) []strategy.NodeID, ack bool, fx *strategy.Effects) {
	per := map[strategy.NodeID][]*peerv1.OwnerLevel{}
	var peers []strategy.NodeID
	for _, k := range keys {
		b, ok := o.tab(k).Lookup(k)
		if !ok {
			continue
		}
		o.clampRaw(b, k)
		ticks, at := b.Level()
		if o.auto != nil {
			ticks = o.toWire(o.subOf(k), ticks)
		}
		for _, p := range to(k) {
			if p == o.self {
				continue
			}
			if _, seen := per[p]; !seen {
				peers = append(peers, p)
			}
			per[p] = append(per[p], &peerv1.OwnerLevel{Key: k, LevelTicks: ticks, AtNs: int64(at)})
		}
	}
	slices.Sort(peers)
	for _, p := range peers {
		o.sendLevels(p, per[p], ack, fx)
	}
}

// sendLevels sends ls to p in messages of at most maxLevelsPerMessage
// levels; with ack, each message gets a seq and is kept until p
// acknowledges it (Leave).
func (o *Owner) sendLevels(p strategy.NodeID, ls []*peerv1.OwnerLevel, ack bool, fx *strategy.Effects) {
	for len(ls) > 0 {
		n := min(len(ls), maxLevelsPerMessage)
		msg := &peerv1.OwnerMessage{Body: &peerv1.OwnerMessage_Levels{Levels: &peerv1.OwnerLevels{Levels: ls[:n]}}}
		if ack {
			o.nextSeq++
			msg.GetLevels().Seq = o.nextSeq
			o.unacked[o.nextSeq] = msg
			o.ackTo[o.nextSeq] = p
		}
		fx.Send(p, wire.MustMarshal(msg))
		ls = ls[n:]
	}
}

// replicasOf returns key's first K nodes in rendezvous order among members
// (a sub-key's under split_placement=distinct: placement, split.go).
func (o *Owner) replicasOf(key string, members []strategy.NodeID) []strategy.NodeID {
	return o.placement(key, members, o.replicas)
}

// syncDirty ships the levels of the keys decided here since the last
// sync to their other replicas, while this node is their primary.
func (o *Owner) syncDirty(fx *strategy.Effects) {
	o.syncAt = -1
	keys := make([]string, 0, len(o.dirty))
	for k := range o.dirty {
		keys = append(keys, k)
	}
	clear(o.dirty)
	slices.Sort(keys)
	o.shipLevels(keys, func(k string) []strategy.NodeID {
		if r := o.replicasOf(k, o.members); len(r) > 0 && r[0] == o.self {
			return r[1:]
		}
		return nil // no longer primary: membership shipped it
	}, false, fx)
}

func (o *Owner) resendUnacked(now time.Duration, fx *strategy.Effects) {
	for _, s := range slices.Sorted(maps.Keys(o.unacked)) {
		fx.Send(o.ackTo[s], wire.MustMarshal(o.unacked[s]))
	}
	o.resend = now + o.retryEvery
	fx.WakeAt(o.resend)
}

// Leave ships every level this node holds to the key's first K nodes among
// the other members, each shipment to be acknowledged (strategy.Leaver).
func (o *Owner) Leave(now time.Duration, fx *strategy.Effects) {
	if o.leaving {
		return
	}
	o.leaving = true
	o.clampAll(now)
	others := o.others()
	if len(others) == 0 {
		return
	}
	o.shipLevels(o.sortedKeys(), func(k string) []strategy.NodeID { return o.replicasOf(k, others) }, true, fx)
	if len(o.unacked) > 0 {
		o.resend = now + o.retryEvery
		fx.WakeAt(o.resend)
	}
}

// Left reports whether every level shipped by Leave was acknowledged.
func (o *Owner) Left() bool { return o.leaving && len(o.unacked) == 0 }

var _ strategy.Leaver = (*Owner)(nil)
