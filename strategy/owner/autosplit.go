package owner

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/buckets"
	"github.com/tokenmesh/tokenmesh/strategy/internal/wire"
)

// Split auto (parameter split=auto with server_quota): K servers that
// follow a tenant's traffic. The throttling article (seed 003, ¶6) keeps "K
// (rather than just one) servers to handle a tenant's traffic", K
// "dynamically adjusted in response to the tenant's real time traffic",
// and its preset variant K = R / per-server quota (¶7). Theirs: K from the
// tenant's traffic and a per-server quota, the K servers from rendezvous
// order. Ours: how K is measured, agreed and changed without creating
// tokens, below.
//
// Measure. The key's coordinator is its first node in rendezvous order
// (the owner of sub-bucket 0 under distinct placement). It counts the
// tokens offered to sub-bucket 0 (decided, admitted or not) over each
// split_window; the key's requests are spread over its live sub-buckets by
// request ID, so the key's offered rate is that count times the live
// sub-buckets, per second. K grows to ceil(rate / server_quota) when that
// is above K, and shrinks to ceil(rate / (3/4 server_quota)) when that is
// below K for the rate of this window and of the one before (hysteresis:
// between (3/4)(K-1) and K quotas K stays, and one quiet window does not
// shrink it), bounded
// to [1, min(64, live nodes, burst)] (a sub-bucket needs a burst of at
// least one token).
//
// State at every node, per key: (K, live): sub-bucket i has the rate r/K
// and the burst SplitBurst(b, K, i) (bucket.SplitBurst, sum = b), and only
// sub-buckets i < live decide: a request forwarded to a sub-bucket at or
// beyond live is refused, and a node routes its own requests over
// sub-buckets [0, live) by request ID. A key no node has split is (1, 1)
// everywhere (the plain owner: no message, no state); a node started after
// time 0 (a restart or a joiner, which may have missed a change) takes an
// unknown key as (maxK, 1): only sub-bucket 0 decides, at r/maxK, until
// the coordinator's next round (membership changes start one).
//
// Agreement (the coordinator decides K and tells every member, in two
// phases; the rule every node keeps whatever the messages' fate):
//   - prepare(K'): every member sets K = max(K, K'), live = min(live,
//     K'), and acknowledges; the coordinator waits for every member of its
//     view (sending again every timeout/(retries+1); a member that leaves
//     the view is no longer waited for);
//   - commit(K'): every member sets (K', K').
//
// Invariant: there is always a K* with live_n <= K* <= K_n at every node
// n (K* = 1 at the start; a prepare lowers live and raises K; once every
// member applied prepare(K'), K* = K'; a commit sets (K', K') only for the
// round the node last prepared). So at most K* sub-buckets decide, each at
// rate <= r/K* and burst <= SplitBurst(b, K*, i): together at most (r, b),
// whatever subset of the members has heard of the change, and whatever
// K the forwarders route with (a stale forwarder sends to a sub-bucket
// that refuses, or leaves capacity unused). Rounds are ordered by (epoch,
// coordinator) with epoch the coordinator's time (above any epoch it has
// seen): a node ignores, and does not acknowledge, a prepare older than
// the last it applied, so a stale coordinator (views differ after a
// membership change) cannot collect the acknowledgements it needs to
// commit, and acknowledges (without applying) a stale commit.
//
// Re-split (a node's (K, live) changes): each sub-bucket i < K' it holds
// is moved to the new table keeping its tokens, capped at the new burst
// (bucket.SetRate: the level never grows); those at i >= K' are dropped
// (their tokens are lost, not handed over); a sub-bucket this node creates
// after the change starts empty at the change and refills at r/K' (not
// full, as a key's first bucket is; also when a warm-up or a replica
// merge asks for one it does not hold: autoAnswer, receiveLevels). A
// growing round from a committed K feeds its new sub-buckets instead: the
// tokens the coordinator's sub-bucket 0 loses to its smaller burst at the
// prepare are split among them in the commit (feedNew). So a re-split
// never creates tokens: the key's total level after it is at most what it
// was, and a shrink drains the removed sub-buckets' tokens (at most one
// burst of false rejections per change, which the hysteresis keeps rare).
//
// Wire. api/peer/v1 has no message for a split round and this change does
// not touch it: a round travels as an OwnerLevels of one entry whose key
// is the parent key + NUL + "p" (prepare) or "c" (commit), level_ticks K
// and at_ns the epoch, with a seq its receiver acknowledges
// (OwnerLevelsAck), as a leave shipment is; a growing commit adds its
// grant as a second entry, parent + NUL + "g" + the K it grows from,
// level_ticks the grant in wire ticks, at_ns its time (feedNew). A sub-key ends in NUL and
// decimal digits, so no sub-key is read as a round. Under split=auto a
// level on the wire is in ticks of the key's whole rate (1/Per of r),
// converted from and to each node's sub-bucket ticks, because the
// sender's and receiver's K may differ.
//
// Fallback (on_timeout=local): a forwarder answers a sub-bucket whose
// owner does not answer from a bucket of that sub-key at (r/(N K), its
// share of the largest sub-burst), K its own for the key (autoLocalOf),
// as a fixed split=K does: the other sub-buckets keep deciding meanwhile.
//
// Memory: a node keeps (K, live) for every key a round has touched, also
// once it is back to (1, 1) (its epoch orders later rounds); not swept.
//
// Limits (ours, refused in New or stated): split=auto with overdraft or
// partition: conserve is refused; waiting mode decides without waiting
// (capWait is 0); a fallback admission's charge that reaches a node where
// its sub-bucket is beyond K is lost (as a lost charge is).

// autoShrink is the hysteresis: K shrinks only when the rate falls to
// autoShrink of the quotas of K-1 sub-buckets.
const autoShrink = 0.75

// autoKey is this node's split state for one key under split=auto.
type autoKey struct {
	k, live int             // rate divisor and active sub-buckets [0, live)
	epoch   int64           // the round last applied: its epoch...
	from    strategy.NodeID // ... and its coordinator
	prepK   int             // the K of that round's prepare
	emptyAt time.Duration   // when (K, live) last changed here; 0: never
}

// autoRound is a round the coordinator runs for one key.
type autoRound struct {
	k     int
	epoch int64
	// When the round grows the key from a committed K (from): the tokens
	// (wire ticks) each new sub-bucket i in [from, k) starts with at
	// grantAt (the commit), out of those sub-bucket 0 lost to its smaller
	// burst at the prepare.
	from    int
	grant   int64
	grantAt time.Duration
	commit  bool              // phase: false prepare, true commit
	await   []strategy.NodeID // members that have not acknowledged the phase
}

// autoSent is a round message waiting for its acknowledgement.
type autoSent struct {
	to     strategy.NodeID
	key    string
	epoch  int64
	commit bool
	msg    []byte
}

// autoSplit is the state of split=auto (nil otherwise).
type autoSplit struct {
	quota    float64       // server_quota, tokens/s
	window   time.Duration // split_window
	maxK     int           // min(maxSplit, burst)
	void     int           // index in o.tables of the table of sub-buckets beyond K (burst 0)
	pers     []int64       // ticks per token of each table
	basePer  int64         // ticks per token of the key's whole rate (the wire's)
	baseCap  int64         // the key's burst in wire ticks
	unknown  bool          // started after time 0: an unknown key is (maxK, 1)
	keys     map[string]*autoKey
	local    []*buckets.Table   // on_timeout=local fallback tables by K (autoLocalTables); [0] unused
	measured map[string]int64   // tokens offered to sub-bucket 0 here this window
	last     map[string]float64 // the key's rate measured the window before (tokens/s)
	next     map[string]float64 // this window's, to be last
	evalAt   time.Duration      // the next measurement; -1: none
	rounds   map[string]*autoRound
	sent     map[uint64]*autoSent
	resendAt time.Duration // -1: none
	epoch    int64         // the highest epoch seen
}

// autoIdx is the index in o.tables of sub-bucket i of split K.
func autoIdx(k, i int) int { return k*(k-1)/2 + i }

// readSplit reads split, server_quota and split_placement: o.split (K,
// or maxSplit under auto), o.distinct and, under auto, o.auto (readAuto).
// Errors: a split that is neither auto nor an int in [1, maxSplit],
// server_quota with a numeric split, readAuto's and quotaSplit's.
func (o *Owner) readSplit(v *strategy.Values, cfg strategy.Config) error {
	o.distinct = v.Enum("split_placement") == placementDistinct
	window := v.Duration("split_window") // read always: only auto uses it
	s := v.String("split")
	if s == "auto" {
		return o.readAuto(v, window)
	}
	n, err := fmt.Sscanf(s, "%d", &o.split)
	if err != nil || n != 1 || fmt.Sprint(o.split) != s || o.split < 1 || o.split > maxSplit {
		return fmt.Errorf("owner: parameter split=%s must be auto or an int in [1, %d]", s, maxSplit)
	}
	if !v.Has("server_quota") {
		return nil
	}
	if v.Has("split") {
		return fmt.Errorf("owner: parameters split and server_quota: give one (server_quota sets split to ceil(rate / server_quota)), or split=auto")
	}
	o.split, err = quotaSplit(cfg.Rate, v.Float("server_quota"))
	return err
}

// readAuto sets up split=auto. Errors: no server_quota, or one not
// positive and finite; split_placement=independent; a split_window not
// positive.
func (o *Owner) readAuto(v *strategy.Values, window time.Duration) error {
	if !v.Has("server_quota") {
		return fmt.Errorf("owner: parameter split=auto needs server_quota (tokens/s a node should decide per key)")
	}
	q := v.Float("server_quota")
	switch {
	case v.Has("split_placement") && !o.distinct:
		return fmt.Errorf("owner: parameter split=auto places sub-buckets on distinct nodes: split_placement=%s is not supported", v.Enum("split_placement"))
	case !(q > 0) || math.IsInf(q, 0):
		return fmt.Errorf("owner: parameter server_quota=%g must be positive and finite", q)
	case window <= 0:
		return fmt.Errorf("owner: parameter split_window must be positive")
	}
	o.split, o.distinct = maxSplit, true
	o.auto = &autoSplit{quota: q, window: window, keys: map[string]*autoKey{},
		measured: map[string]int64{}, last: map[string]float64{}, next: map[string]float64{}, evalAt: -1, rounds: map[string]*autoRound{}, sent: map[uint64]*autoSent{}, resendAt: -1}
	return nil
}

// makeTables makes the sub-bucket tables: split=auto's (autoTables) or a
// fixed split's (splitTables). Errors: theirs, and split=auto with
// overdraft or partition: conserve (not supported).
func (o *Owner) makeTables(cfg strategy.Config) error {
	if o.auto == nil {
		return o.splitTables(cfg)
	}
	if o.od.On || cfg.Partition == strategy.PartitionConserve {
		return fmt.Errorf("owner: parameter split=auto does not support overdraft nor partition: conserve")
	}
	return o.autoTables(cfg)
}

// autoTables makes the tables of split=auto: for every K in [1, maxK]
// and i < K, sub-bucket i of split K, (r/K, SplitBurst(b, K, i)), at
// autoIdx(K, i); then the void table (burst 0, which never admits) for a
// sub-key beyond this node's K. Errors: a rate r/K below the resolution.
func (o *Owner) autoTables(cfg strategy.Config) error {
	a := o.auto
	a.maxK = int(min(int64(maxSplit), max(cfg.Burst, 1)))
	base := bucket.MustNew(cfg.Rate, cfg.Burst, 0)
	_, a.baseCap, a.basePer = base.LevelAt(0)
	add := func(rate bucket.Rate, burst int64) {
		t, _ := buckets.New(rate, burst) // validated by bucket.New below
		b := bucket.MustNew(rate, burst, 0)
		_, capTicks, per := b.LevelAt(0)
		o.tables = append(o.tables, t)
		o.caps = append(o.caps, capTicks)
		o.floors = append(o.floors, -capTicks)
		o.debts = append(o.debts, 0)
		a.pers = append(a.pers, per)
	}
	for k := 1; k <= a.maxK; k++ {
		rate, err := cfg.Rate.Div(int64(k))
		if err != nil {
			return fmt.Errorf("owner: parameter split=auto: %w", err)
		}
		for i := range k {
			burst, _ := bucket.SplitBurst(cfg.Burst, k, i) // k >= 1, burst >= 0
			if _, err := bucket.New(rate, burst, 0); err != nil {
				return fmt.Errorf("owner: parameter split=auto: %w", err)
			}
			add(rate, burst)
		}
	}
	a.void = len(o.tables)
	rate, _ := cfg.Rate.Div(int64(a.maxK)) // checked above
	add(rate, 0)
	o.table = o.tables[0]
	return nil
}

// autoLocalTables makes split=auto's on_timeout=local fallback tables:
// for every K in [1, maxK], (r/(N K), this node's share of the largest
// sub-burst), as a fixed split=K has (localShare). Errors: a rate below
// the resolution.
func (o *Owner) autoLocalTables() error {
	if o.auto == nil {
		return nil
	}
	o.auto.local = make([]*buckets.Table, o.auto.maxK+1)
	for k := 1; k <= o.auto.maxK; k++ {
		r, b, err := o.localShareOf(k)
		if err != nil {
			return err
		}
		if o.auto.local[k], err = buckets.New(r, b); err != nil {
			return fmt.Errorf("owner: local fallback: %w", err)
		}
	}
	return nil
}

// autoLocalOf is the fallback table of a sub-key under split=auto: the
// one of this node's K for its key. A forwarder answers only for the
// sub-bucket whose owner does not answer, at r/(N K) (the N-1 forwarders
// together at most its rate r/K: the invariant's K_n >= K*), while the
// key's other sub-buckets keep deciding; a table of the whole key's r/N
// let the forwarders of a crashed sub-bucket 0 admit up to r besides them
// (TestSplitAutoCoordinatorCrash).
func (o *Owner) autoLocalOf(key string) *buckets.Table {
	parent, _, ok := splitKey(key)
	if !ok {
		return o.auto.local[o.auto.maxK]
	}
	return o.auto.local[min(o.autoState(parent).k, o.auto.maxK)]
}

// autoState is this node's (K, live) for key (the parent key): recorded,
// or (1, 1), or (maxK, 1) for a node started after time 0.
func (o *Owner) autoState(key string) autoKey {
	if st, ok := o.auto.keys[key]; ok {
		return *st
	}
	if o.auto.unknown {
		return autoKey{k: o.auto.maxK, live: 1}
	}
	return autoKey{k: 1, live: 1}
}

// splitKey is a sub-key's parent and index (ok false for another key).
func splitKey(key string) (parent string, i int, ok bool) {
	j := strings.LastIndexByte(key, 0)
	if j < 0 {
		return "", 0, false
	}
	n, err := fmt.Sscanf(key[j+1:], "%d", &i)
	if err != nil || n != 1 || fmt.Sprint(i) != key[j+1:] || i < 0 {
		return "", 0, false
	}
	return key[:j], i, true
}

// autoTab is the index in o.tables of a sub-key's table under split=auto:
// its sub-bucket of this node's K, or the void table beyond K.
func (o *Owner) autoTab(key string) int {
	parent, i, ok := splitKey(key)
	if !ok {
		return o.auto.void
	}
	if st := o.autoState(parent); i < st.k {
		return autoIdx(st.k, i)
	}
	return o.auto.void
}

// autoLive is the number of sub-buckets this node routes key's requests
// over (split=auto).
func (o *Owner) autoLive(key string) int { return o.autoState(key).live }

// autoNewBucket makes a sub-bucket this node has none of start empty at
// its key's last re-split here (refilled since): a new sub-bucket gets no
// fresh burst (see Re-split).
func (o *Owner) autoNewBucket(key string, b *bucket.Bucket) {
	parent, _, ok := splitKey(key)
	if !ok {
		return
	}
	if st := o.autoState(parent); st.emptyAt > 0 {
		_ = b.MergeLevel(0, st.emptyAt) // 0 is within bounds, emptyAt > 0
	}
}

// autoAnswer is the level, in wire ticks, this node answers a warm-up's
// query for sub-key key with (table sub, ticks its level when it holds
// one): that level, or, when it holds none, the level of a sub-bucket it
// would create now: full, or empty at the key's last re-split here
// (autoNewBucket), so that a sub-bucket new since a re-split is not
// handed over full.
func (o *Owner) autoAnswer(now time.Duration, key string, sub int, ticks int64, t *buckets.Table) int64 {
	if _, ok := t.Lookup(key); !ok {
		rate, burst := t.Shape()
		b := bucket.MustNew(rate, burst, now) // the table's shape, validated
		o.autoNewBucket(key, &b)
		ticks, _ = b.Level() // as of now
		ticks = min(ticks, b.CapacityTicks())
	}
	return o.toWire(sub, ticks)
}

// setAutoState records key's new state at now and moves the sub-buckets
// this node holds to the tables of the new K (Re-split).
func (o *Owner) setAutoState(now time.Duration, key string, st autoKey) {
	old := o.autoState(key)
	if st.k != old.k || st.live != old.live {
		st.emptyAt = now
	}
	if st.k != old.k {
		for i := range old.k {
			sk := subKey(key, i)
			from := o.tables[autoIdx(old.k, i)]
			b, ok := from.Lookup(sk)
			if !ok {
				continue
			}
			moved := *b
			from.Delete(sk)
			delete(o.dirty, sk)
			if i >= st.k {
				continue // drained: its tokens are not handed over
			}
			to := o.tables[autoIdx(st.k, i)]
			rate, burst := to.Shape()
			_ = moved.SetRate(now, rate, burst) // validated in autoTables; keeps the tokens, capped
			*to.Get(sk, now) = moved
		}
	}
	o.auto.keys[key] = &st
}

// autoMeasure counts tokens offered to sub-key's sub-bucket 0 here (this
// node is the key's coordinator) and schedules the window's end.
func (o *Owner) autoMeasure(now time.Duration, key string, tokens int64, fx *strategy.Effects) {
	parent, i, ok := splitKey(key)
	if !ok || i != 0 {
		return
	}
	o.auto.measured[parent] += tokens
	o.autoWake(now, fx)
}

func (o *Owner) autoWake(now time.Duration, fx *strategy.Effects) {
	if o.auto.evalAt < 0 {
		o.auto.evalAt = now + o.auto.window
		fx.WakeAt(o.auto.evalAt)
	}
}

// autoGate, under split=auto, counts q's tokens for its key's measure
// (autoMeasure) and refuses it when its sub-bucket does not decide here
// (autoRefuse), reporting whether it did.
func (o *Owner) autoGate(now time.Duration, q queued, v *verdict, fx *strategy.Effects) bool {
	if o.auto == nil || q.refund {
		return false
	}
	o.autoMeasure(now, q.key, q.tokens, fx)
	return o.autoRefuse(q, v, fx)
}

// autoRefuse refuses q when its sub-bucket does not decide here (at or
// beyond live in this node's state) and reports whether it did; refunds
// and charges are taken as usual.
func (o *Owner) autoRefuse(q queued, v *verdict, fx *strategy.Effects) bool {
	if o.auto == nil || q.refund || q.charge {
		return false
	}
	parent, i, ok := splitKey(q.key)
	if ok && i < o.autoState(parent).live {
		return false
	}
	if q.origin == "" {
		fx.Decide(q.id, false)
		return true
	}
	if v != nil {
		v.decided = true
	}
	sendVerdict(q.origin, q.id, false, 0, fx)
	return true
}

// autoTarget is the K for a key measured at rate tokens/s this window and
// last the window before, with state st, among n live members (see
// Measure): K grows on this window's rate, shrinks only when both windows
// are low.
func (o *Owner) autoTarget(st autoKey, rate, last float64, n int) int {
	most := max(min(o.auto.maxK, n), 1)
	up := int(math.Ceil(rate/o.auto.quota - 1e-9))
	down := int(math.Ceil(max(rate, last)/(autoShrink*o.auto.quota) - 1e-9))
	k := st.k
	switch {
	case up > k:
		k = up
	case down < k:
		k = down
	}
	return min(max(k, 1), most)
}

// autoEvaluate ends a measurement window: for every key this node
// coordinates that had traffic or is split (or restricted), it starts a
// round when the target K differs from the key's (or the key is
// restricted, live < K), unless one is running.
func (o *Owner) autoEvaluate(now time.Duration, fx *strategy.Effects) {
	a := o.auto
	if a.evalAt < 0 || now < a.evalAt {
		return
	}
	a.evalAt = -1
	var keys []string
	for k := range a.measured {
		keys = append(keys, k)
	}
	for k, st := range a.keys {
		if (st.k > 1 || st.live < st.k) && a.measured[k] == 0 {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if o.ownerIn(subKey(k, 0), o.members) != o.self {
			continue
		}
		st := o.autoState(k)
		rate := float64(a.measured[k]) * float64(st.live) / a.window.Seconds()
		target := o.autoTarget(st, rate, a.last[k], len(o.members))
		a.next[k] = rate
		if a.rounds[k] == nil && (target != st.k || st.live < st.k) {
			o.startRound(now, k, target, fx)
		}
		if st := o.autoState(k); st.k > 1 || a.rounds[k] != nil {
			o.autoWake(now, fx)
		}
	}
	clear(a.measured)
	a.last, a.next = a.next, a.last
	clear(a.next)
}

// startRound starts a round to K k for key: prepare here, then at every
// other member.
func (o *Owner) startRound(now time.Duration, key string, k int, fx *strategy.Effects) {
	a := o.auto
	st := o.autoState(key)
	epoch := max(int64(now), st.epoch+1, a.epoch+1)
	a.epoch = epoch
	r := &autoRound{k: k, epoch: epoch, from: st.k}
	if k > st.k && st.live == st.k {
		// Growing: the tokens sub-bucket 0 loses to its smaller burst
		// feed the new sub-buckets (Re-split).
		sub0 := subKey(key, 0)
		before := o.toWire(o.subOf(sub0), o.bucketLevel(sub0, now))
		o.applyPrepare(now, key, k, epoch, o.self)
		after := o.toWire(o.subOf(sub0), o.bucketLevel(sub0, now))
		r.grant = max(before-after-1, 0) / int64(k-st.k) // -1: the two roundings down
	} else {
		o.applyPrepare(now, key, k, epoch, o.self)
	}
	r.await = o.others()
	a.rounds[key] = r
	o.sendPhase(now, key, r, fx)
}

// sendPhase sends r's current phase to the members it awaits, or, when
// it awaits none, moves to the next phase (prepare: commit here and send
// the commits; commit: the round is over).
func (o *Owner) sendPhase(now time.Duration, key string, r *autoRound, fx *strategy.Effects) {
	for len(r.await) == 0 {
		if r.commit {
			delete(o.auto.rounds, key)
			return
		}
		// The new sub-buckets refill from now, when every member has
		// lowered its rate to r/k (prepare acknowledged), not from the
		// prepare: before, the live ones may still refill at r/from.
		r.grantAt = now
		o.applyCommit(now, key, r.k, r.epoch, o.self, r.grantOf())
		r.commit = true
		r.await = o.others()
	}
	for _, m := range r.await {
		o.sendRound(now, m, key, r, fx)
	}
}

// sendRound sends r's phase for key to m, kept until acknowledged.
func (o *Owner) sendRound(now time.Duration, m strategy.NodeID, key string, r *autoRound, fx *strategy.Effects) {
	tag := "p"
	if r.commit {
		tag = "c"
	}
	o.nextSeq++
	ls := []*peerv1.OwnerLevel{{Key: key + "\x00" + tag, LevelTicks: int64(r.k), AtNs: r.epoch}}
	if r.commit && r.grant > 0 {
		ls = append(ls, &peerv1.OwnerLevel{Key: key + "\x00g" + strconv.Itoa(r.from), LevelTicks: r.grant, AtNs: int64(r.grantAt)})
	}
	msg := wire.MustMarshal(&peerv1.OwnerMessage{Body: &peerv1.OwnerMessage_Levels{Levels: &peerv1.OwnerLevels{Seq: o.nextSeq, Levels: ls}}})
	o.auto.sent[o.nextSeq] = &autoSent{to: m, key: key, epoch: r.epoch, commit: r.commit, msg: msg}
	fx.Send(m, msg)
	if o.auto.resendAt < 0 {
		o.auto.resendAt = now + o.retryEvery
		fx.WakeAt(o.auto.resendAt)
	}
}

// current reports whether s belongs to the phase its key's round is in.
func (o *Owner) current(s *autoSent) (*autoRound, bool) {
	r := o.auto.rounds[s.key]
	return r, r != nil && r.epoch == s.epoch && r.commit == s.commit && slices.Contains(r.await, s.to)
}

// autoAck takes an acknowledgement of a round message (false: seq is not
// one).
func (o *Owner) autoAck(now time.Duration, from strategy.NodeID, seq uint64, fx *strategy.Effects) bool {
	if o.auto == nil {
		return false
	}
	s, ok := o.auto.sent[seq]
	if !ok || s.to != from {
		return ok
	}
	delete(o.auto.sent, seq)
	if r, ok := o.current(s); ok {
		r.await = slices.DeleteFunc(r.await, func(m strategy.NodeID) bool { return m == from })
		if len(r.await) == 0 {
			o.sendPhase(now, s.key, r, fx)
		}
	}
	return true
}

// autoResend sends again the round messages not yet acknowledged whose
// phase is current, and forgets the others.
func (o *Owner) autoResend(now time.Duration, fx *strategy.Effects) {
	a := o.auto
	if a == nil || a.resendAt < 0 || now < a.resendAt {
		return
	}
	a.resendAt = -1
	for _, seq := range slices.Sorted(maps.Keys(a.sent)) {
		s := a.sent[seq]
		if _, ok := o.current(s); !ok {
			delete(a.sent, seq)
			continue
		}
		fx.Send(s.to, s.msg)
	}
	if len(a.sent) > 0 {
		a.resendAt = now + o.retryEvery
		fx.WakeAt(a.resendAt)
	}
}

// roundCmp orders rounds by (epoch, coordinator).
func roundCmp(e1 int64, f1 strategy.NodeID, e2 int64, f2 strategy.NodeID) int {
	if c := cmp.Compare(e1, e2); c != 0 {
		return c
	}
	return cmp.Compare(f1, f2)
}

// applyPrepare applies prepare(k) of round (epoch, from) and reports
// whether to acknowledge it: a newer round is applied (K = max(K, k),
// live = min(live, k)), the same one acknowledged again, an older one
// ignored. A round of this node's that the new one supersedes is dropped.
func (o *Owner) applyPrepare(now time.Duration, key string, k int, epoch int64, from strategy.NodeID) bool {
	st := o.autoState(key)
	switch c := roundCmp(epoch, from, st.epoch, st.from); {
	case c < 0:
		return false
	case c == 0:
		return st.prepK == k
	}
	o.auto.epoch = max(o.auto.epoch, epoch)
	if r := o.auto.rounds[key]; r != nil && roundCmp(r.epoch, o.self, epoch, from) < 0 {
		delete(o.auto.rounds, key)
	}
	o.setAutoState(now, key, autoKey{k: max(st.k, k), live: min(st.live, k), epoch: epoch, from: from, prepK: k, emptyAt: st.emptyAt})
	return true
}

// autoGrant is the level a commit gives the new sub-buckets [from, K):
// ticks (wire) at time at; the zero grant gives none.
type autoGrant struct {
	from  int
	ticks int64
	at    time.Duration
}

func (r *autoRound) grantOf() autoGrant {
	return autoGrant{from: r.from, ticks: r.grant, at: r.grantAt}
}

// applyCommit applies commit(k) of round (epoch, from) if it is the round
// this node last prepared: (K, live) = (k, k), and each new sub-bucket
// this node owns starts from g (feedNew). Any other commit changes
// nothing (always acknowledged: only the prepares' acknowledgements
// matter).
func (o *Owner) applyCommit(now time.Duration, key string, k int, epoch int64, from strategy.NodeID, g autoGrant) {
	st := o.autoState(key)
	if roundCmp(epoch, from, st.epoch, st.from) != 0 || st.prepK != k {
		return
	}
	st.k, st.live = k, k
	o.setAutoState(now, key, st)
	if g.ticks > 0 {
		o.feedNew(now, key, k, g)
	}
}

// feedNew gives each sub-bucket i in [g.from, k) of key that this node
// owns in its view the grant's level at g.at, refilled since (capped at
// its burst; merged with the level it holds, keeping the lower), instead
// of an empty start. The coordinator took those tokens out of its own
// sub-bucket 0 at its prepare (startRound), so the key's total does not
// grow; from g.at (the coordinator's commit, when every member has
// lowered its rate to r/k) the new sub-buckets refill at r/k, the rate
// the restricted live ones leave unused until this commit reaches them.
func (o *Owner) feedNew(now time.Duration, key string, k int, g autoGrant) {
	for i := g.from; i < k; i++ {
		sk := subKey(key, i)
		if o.ownerIn(sk, o.members) != o.self {
			continue
		}
		sub := autoIdx(k, i)
		t := o.tables[sub]
		b, ok := t.Lookup(sk)
		if !ok {
			b = t.Get(sk, now)
		}
		_ = b.MergeLevelAt(now, o.fromWire(sub, g.ticks), g.at) // within [floor, burst] (fromWire), g.at >= 0
	}
}

// bucketLevel is sub-key key's level in ticks of its table at now (a
// bucket made, as bucketFor does, when this node holds none).
func (o *Owner) bucketLevel(key string, now time.Duration) int64 {
	b := o.bucketFor(key, now)
	level, _, _ := b.LevelAt(now)
	return level
}

// grantIn is a commit's grant: its second entry, parent + NUL "g" + the
// K it grows from (checkRound checked it), or none.
func grantIn(ls *peerv1.OwnerLevels) autoGrant {
	if len(ls.Levels) < 2 {
		return autoGrant{}
	}
	g := ls.Levels[1]
	from, _ := strconv.Atoi(g.Key[strings.LastIndexByte(g.Key, 0)+2:])
	return autoGrant{from: from, ticks: g.LevelTicks, at: time.Duration(g.AtNs)}
}

// isRound reports whether ls is a round message (a first entry whose key
// ends in NUL "p" or NUL "c"; a commit may carry a grant as a second).
func isRound(ls *peerv1.OwnerLevels) bool {
	if len(ls.Levels) < 1 || len(ls.Levels) > 2 {
		return false
	}
	k := ls.Levels[0].Key
	return len(k) >= 2 && k[len(k)-2] == 0 && (k[len(k)-1] == 'p' || k[len(k)-1] == 'c')
}

// checkRound checks a round message: K in [1, maxSplit], a seq, an epoch
// not negative, and a commit's grant (checkGrant).
func (o *Owner) checkRound(now time.Duration, from strategy.NodeID, ls *peerv1.OwnerLevels) error {
	l := ls.Levels[0]
	if len(ls.Levels) == 2 {
		if err := o.checkGrant(now, from, l, ls.Levels[1]); err != nil {
			return err
		}
	}
	switch {
	case l.LevelTicks < 1 || l.LevelTicks > maxSplit:
		return fmt.Errorf("owner: split round from %s: key %q: K %d outside [1, %d]", from, l.Key, l.LevelTicks, maxSplit)
	case l.AtNs < 0:
		return fmt.Errorf("owner: split round from %s: key %q: negative epoch %d", from, l.Key, l.AtNs)
	case ls.Seq == 0:
		return fmt.Errorf("owner: split round from %s: key %q: no seq", from, l.Key)
	}
	return nil
}

// checkGrant checks a commit's grant g: key parent + NUL "g" + a K it
// grows from in [1, the commit's K), a level in [0, the key's burst] in
// wire ticks, a time not negative nor more than slack after now.
func (o *Owner) checkGrant(now time.Duration, from strategy.NodeID, c, g *peerv1.OwnerLevel) error {
	parent := c.Key[:len(c.Key)-2]
	rest, ok := strings.CutPrefix(g.Key, parent+"\x00g")
	k, err := strconv.Atoi(rest)
	switch {
	case c.Key[len(c.Key)-1] != 'c' || !ok || err != nil || strconv.Itoa(k) != rest || k < 1 || int64(k) >= c.LevelTicks:
		return fmt.Errorf("owner: split round from %s: key %q: not a commit with a grant (%q)", from, c.Key, g.Key)
	case g.LevelTicks < 0 || g.LevelTicks > o.auto.baseCap:
		return fmt.Errorf("owner: split round from %s: key %q: grant %d ticks outside [0, %d]", from, c.Key, g.LevelTicks, o.auto.baseCap)
	case g.AtNs < 0 || time.Duration(g.AtNs) > now+o.slack:
		return fmt.Errorf("owner: split round from %s: key %q: grant time %d outside [0, now+slack]", from, c.Key, g.AtNs)
	}
	return nil
}

// receiveRound applies a round message and acknowledges it (a prepare
// only when applied or already applied).
func (o *Owner) receiveRound(now time.Duration, from strategy.NodeID, ls *peerv1.OwnerLevels, fx *strategy.Effects) {
	l := ls.Levels[0]
	key, tag := l.Key[:len(l.Key)-2], l.Key[len(l.Key)-1]
	k := int(l.LevelTicks)
	if tag == 'p' {
		if !o.applyPrepare(now, key, k, l.AtNs, from) {
			return
		}
	} else {
		o.applyCommit(now, key, k, l.AtNs, from, grantIn(ls))
	}
	fx.Send(from, wire.MustMarshal(&peerv1.OwnerMessage{Body: &peerv1.OwnerMessage_LevelsAck{LevelsAck: &peerv1.OwnerLevelsAck{Seq: ls.Seq}}}))
}

// autoMembers, after a membership change: rounds stop waiting for
// members that left; a coordinator drops the rounds of keys it no longer
// coordinates, and starts a round at the key's K for every key it now
// coordinates that is split or restricted (so restarted and returning
// members, which may have missed rounds, hear the key's K).
func (o *Owner) autoMembers(now time.Duration, fx *strategy.Effects) {
	a := o.auto
	if a == nil {
		return
	}
	for _, k := range slices.Sorted(maps.Keys(a.keys)) {
		st := a.keys[k]
		if o.ownerIn(subKey(k, 0), o.members) != o.self {
			delete(a.rounds, k)
			continue
		}
		if st.k > 1 || st.live < st.k || a.rounds[k] != nil {
			o.startRound(now, k, min(st.k, max(min(a.maxK, len(o.members)), 1)), fx)
			o.autoWake(now, fx)
		}
	}
}

// toWire converts ticks of table sub to the wire's (the key's whole
// rate), rounding down.
func (o *Owner) toWire(sub int, ticks int64) int64 {
	return rescaleTicks(ticks, o.auto.pers[sub], o.auto.basePer)
}

// fromWire converts wire ticks to table sub's, rounding down, kept within
// the table's [floor, burst].
func (o *Owner) fromWire(sub int, ticks int64) int64 {
	return min(max(rescaleTicks(ticks, o.auto.basePer, o.auto.pers[sub]), o.floors[sub]), o.caps[sub])
}

// rescaleTicks converts v ticks of 1/from token to ticks of 1/to token,
// rounding towards minus infinity (bucket.Rescale).
func rescaleTicks(v, from, to int64) int64 { return bucket.Rescale(v, from, to) }
