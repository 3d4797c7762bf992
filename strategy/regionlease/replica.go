package regionlease

import (
	"slices"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/wire"
	"github.com/tokenmesh/tokenmesh/topology"
)

// Replicas of the global owner (see "# Crashes" in the package doc): the
// global owner G of a key lends its tokens only under a fence its
// replicas hold. A fence is G's promise to a replica: no lease of the key
// that G grants ends after the fence (G's time), until the replica has
// acknowledged a later one. G ships a fence of now + region_ttl +
// 2*ahead (ahead = max(takeover - region_ttl, timeout)) to each replica
// whose acknowledged fence covers less than region_ttl + ahead from now,
// and grants a lease only when every replica's acknowledged fence covers
// its end (else it grants 0 tokens, without a dry hint: the holder asks
// again a little later, and its region relays its requests meanwhile).
// A replica that takes the key over after G left its view refills the
// key's bucket from the fence (or from the move, if later), empty,
// instead of from the move + takeover: every lease G granted has ended by
// then. The level is not replicated: G's tokens are lost with it (a
// replicated level would be stale by what G took since, and starting from
// it would create tokens).

// fenceHolder is what G knows of one replica's fence of a key: the latest
// fence acknowledged and the latest shipped (an acknowledgement counts up
// to what was shipped), and when it was last shipped.
type fenceHolder struct {
	acked, shipped time.Duration
	first          time.Duration // the first fence shipped (-1: none yet)
	shipAt         time.Duration
}

// maxFences bounds the fences a replica holds (keys times owners); beyond
// it a fence is neither kept nor acknowledged (its owner then grants
// nothing that would need it).
const maxFences = 1 << 16

// maxReplicas bounds the replicas parameter.
const maxReplicas = 8

// replicasOf is key's replica set at this node as its global owner: the
// first `replicas` live members after it in rendezvous order, and, when
// none of them is in another region than this node's, the first live
// member that is (so that the state survives the loss of the owner's
// region: a region cut off, under available, moves its keys to another
// region's node).
func (l *RegionLease) replicasOf(key string) []strategy.NodeID {
	if l.replicas == 0 {
		return nil
	}
	rank := rendezvous.Rank(nil, key, l.live, len(l.live))
	var out []strategy.NodeID
	far := false
	for _, n := range rank {
		if n == l.self {
			continue
		}
		if len(out) < l.replicas {
			out = append(out, n)
			far = far || topology.Of(n) != l.region
			continue
		}
		if far {
			break
		}
		if topology.Of(n) != l.region {
			out = append(out, n)
			break
		}
	}
	return out
}

// fenced reports whether G may grant key a lease ending at end: every
// replica's acknowledged fence covers it. It ships fences to the
// replicas whose fence runs short (or does not cover end), at most once
// per retry interval each.
func (l *RegionLease) fenced(now time.Duration, key string, end time.Duration, fx *strategy.Effects) bool {
	reps := l.replicasOf(key)
	if len(reps) == 0 {
		return true
	}
	fs := l.gfences[key]
	if fs == nil {
		fs = map[strategy.NodeID]*fenceHolder{}
		l.gfences[key] = fs
		l.mem.gfences.Add("")
		l.order.gfences.Add(key)
	}
	ok := true
	for _, r := range reps {
		f := fs[r]
		if f == nil {
			f = &fenceHolder{first: -1, shipAt: -l.retryEvery}
			fs[r] = f
			l.mem.fenceRec++
		}
		if (f.acked < end || f.acked < now+l.rttl+l.ahead) && now >= f.shipAt+l.retryEvery {
			f.shipped = max(f.shipped, now+l.rttl+2*l.ahead)
			if f.first < 0 {
				f.first = f.shipped
			}
			f.shipAt = now
			fx.Send(r, wire.MustMarshal(&peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_Replica{Replica: &peerv1.RegionLeaseReplica{
				Key: key, FenceNs: int64(f.shipped)}}}))
		}
		if !l.covers(f, end) {
			ok = false
		}
	}
	return ok
}

// covers reports whether whatever fence of the key replica r may hold
// covers a lease ending at end: its acknowledged fence does; or, in a
// node's first incarnation (no fence of an earlier one can be out), the
// first fence this record shipped does: r holds that one, a later one,
// or none (then it takes the key over conservatively). The record is
// kept as long as r may hold a fence it shipped (sweepFences), so that no
// fence of this incarnation is out that the record does not know of.
func (l *RegionLease) covers(f *fenceHolder, end time.Duration) bool {
	return f.acked >= end || (!l.restarted && f.first >= end)
}

// onReplica keeps a fence of key from its sender (the latest, per owner)
// and acknowledges it; beyond maxFences a new one is neither kept nor
// acknowledged.
func (l *RegionLease) onReplica(from strategy.NodeID, r *peerv1.RegionLeaseReplica, fx *strategy.Effects) {
	fs := l.fences[r.Key]
	if fs == nil {
		if l.nfences >= maxFences {
			return
		}
		fs = map[strategy.NodeID]time.Duration{}
		l.fences[r.Key] = fs
		l.mem.fences.Add(r.Key)
		l.order.fences.Add(r.Key)
	}
	if _, ok := fs[from]; !ok {
		if l.nfences >= maxFences {
			return
		}
		l.nfences++
	}
	fs[from] = max(fs[from], time.Duration(r.FenceNs))
	fx.Send(from, wire.MustMarshal(&peerv1.RegionLeaseMessage{Body: &peerv1.RegionLeaseMessage_ReplicaAck{ReplicaAck: &peerv1.RegionLeaseReplicaAck{
		Key: r.Key, FenceNs: int64(fs[from])}}}))
}

// onReplicaAck takes a replica's acknowledgement, up to the fence shipped
// to it.
func (l *RegionLease) onReplicaAck(from strategy.NodeID, a *peerv1.RegionLeaseReplicaAck) {
	f := l.gfences[a.Key][from]
	if f == nil {
		return
	}
	f.acked = max(f.acked, min(time.Duration(a.FenceNs), f.shipped))
}

// dropFences forgets, at a change of this node's view, the fences held
// from owners that left it, but for the keys this node now owns globally
// (their pools start from them): an owner that left and comes back may
// have granted leases beyond a fence this node kept (it no longer
// counted this node among the replicas), so an old fence must not
// outlive the owner's absence.
func (l *RegionLease) dropFences() {
	for _, key := range sortedKeys(l.fences) {
		fs := l.fences[key]
		g, _ := l.global(key)
		for from := range fs {
			if g != l.self && !slices.Contains(l.live, from) {
				delete(fs, from)
				l.nfences--
			}
		}
		if len(fs) == 0 {
			l.dropFenceKey(key)
		}
	}
}

// fenceOf is the fence this node holds of key from owner o.
func (l *RegionLease) fenceOf(key string, o strategy.NodeID) (time.Duration, bool) {
	f, ok := l.fences[key][o]
	return f, ok
}

// ownPool is pool, and, when it makes the pool of a rule whose regions
// hold stocks (stocks), ships the key's fences to its replicas at once
// (fenced), so that they are acknowledged by the time the first ask for a
// lease comes. A slower rule's key is decided at G through the ordering
// buffer and is almost never lent: its fences go out with its first
// lease (grantPool's fenced), not at every use (ours; on zanbil across 3
// regions the fences shipped at every use cost ~6 WAN bytes per request,
// above owner's: docs/EVALUATION.md, "regionlease: fences of slow keys").
func (l *RegionLease) ownPool(now time.Duration, key string, fx *strategy.Effects) *pool {
	if p := l.pools[key]; p != nil || l.replicas == 0 {
		return l.pool(key, now)
	}
	p := l.pool(key, now)
	if l.stocks {
		l.fenced(now, key, 0, fx)
	}
	return p
}
