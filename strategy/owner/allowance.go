package owner

import (
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// Grant hands the driver up to want whole tokens of key's bucket
// (strategy.Allowancer), at most strategy.AllowanceCap of the rule, valid
// for strategy.AllowanceValidity, when this node would decide a request
// for key at once from that bucket alone; otherwise 0. Ours (the
// fast path on the CRDT thesis' one deciding node per key). Nothing is granted
//   - for a key another node owns (rendezvous), or under split > 1 (a
//     request's sub-bucket depends on its ID);
//   - with an ordering buffer (hold > 0: requests are decided in
//     (arrival, ID) order after it; with hold 0 a queued request is one
//     whose arrival, on its forwarder's clock, is still ahead of now, so
//     tokens granted now come before it in that order too);
//   - during a warm-up, or while the key's level is being fetched: the
//     level may still be on its way from the previous holders;
//   - while partition: conserve scales the rule down (the key's conserve
//     bucket must hold every admitted token too), or once leaving.
//
// The tokens granted leave the key's level, which is what the next sync
// ships to its replicas: they see them as spent (a crash of this node
// loses the unused ones, which is safe). Charges of peers' fallback
// admissions keep being debited from the level.
func (o *Owner) Grant(now time.Duration, key string, want int64, fx *strategy.Effects) (int64, time.Duration) {
	if want <= 0 || !o.grantable(now, key) {
		return 0, now
	}
	most := strategy.AllowanceCap(o.rate, o.burst)
	if most <= 0 {
		return 0, now
	}
	g := o.lend.Held.Grant(o.bucketFor(key, now), now, key, want, most)
	if g <= 0 {
		return 0, now
	}
	o.markDirty(now, key, fx)
	return g, now + strategy.AllowanceValidity
}

// grantable reports whether this node decides key at once from its own
// bucket at now (see Grant).
func (o *Owner) grantable(now time.Duration, key string) bool {
	switch {
	case o.split > 1, o.hold > 0, o.leaving, o.scaled != nil:
		return false
	case o.changedAt >= 0 && now < o.changedAt+o.warmup:
		return false
	case o.fetching[key] != nil:
		return false
	}
	return o.owns(key)
}

// Return gives back the unused tokens of key's allowance and closes it
// (strategy.Allowancer). A key whose bucket this node dropped (it no
// longer holds the key) keeps them spent.
func (o *Owner) Return(now time.Duration, key string, unused int64, fx *strategy.Effects) {
	if o.lend.Held.Held(key) <= 0 {
		return
	}
	b, ok := o.table.Lookup(key)
	if !ok {
		o.lend.Held.Drop(key)
		return
	}
	o.lend.Held.Return(b, now, key, unused)
	if unused > 0 && o.owns(key) {
		o.markDirty(now, key, fx)
	}
}

// clampAll lowers every bucket with tokens held to the burst less them, at
// now (before a sweep, a snapshot or a membership change, which read
// every bucket). No-op without allowances: the simulator's case.
func (o *Owner) clampAll(now time.Duration) { o.lend.ClampAll(o.table, now) }

// clampRaw clamps b (key's bucket) at its own last update, without
// advancing it: before its raw level is shipped to a peer.
func (o *Owner) clampRaw(b *bucket.Bucket, key string) {
	if o.lend.Held.Len() == 0 {
		return
	}
	_, at := b.Level()
	o.lend.Held.Clamp(b, at, key)
}

// remaining is the whole tokens of key's bucket at now less the tokens
// held, on a copy.
func (o *Owner) remaining(now time.Duration, key string) int64 {
	return o.lend.Remaining(o.table, now, key)
}

var _ strategy.Allowancer = (*Owner)(nil)
