// Package strategy defines the interface every coordination strategy
// implements: a deterministic state machine that one node of a cluster runs
// for one rule (one (r, b) token bucket per key).
//
// A strategy never reads the clock, sleeps, starts goroutines or touches the
// network. Its driver (the simulator in package sim, or the live cluster
// runtime) hands it the current time and the events (a request, a peer's
// message, a wake-up, a membership change) and carries out what it asks for
// in an Effects value: messages to send, decisions completed asynchronously,
// and times at which to be woken. This is the shape of etcd's raft package
// (docs/ARCHITECTURE.md, "The contract"), and it is what makes the simulator
// and the server run the same code and the simulator reproducible.
//
// Time is a time.Duration since an epoch the driver chooses (virtual time in
// the simulator); it never decreases between calls on one instance.
package strategy

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/tokenmesh/tokenmesh/bucket"
)

// NodeID names a node of the cluster (a memberlist node name in the live
// runtime; "n0", "n1", ... in the simulator).
type NodeID string

// Request is a request for Tokens tokens of Key that reached the cluster at
// Arrival. ID is unique among the requests a driver issues; in the simulator
// it is the request's index in the trace, so ordering by (Arrival, ID)
// reproduces the trace's order.
type Request struct {
	ID      uint64
	Key     string
	Tokens  int64
	Arrival time.Duration
	// Charge marks a cost already incurred (an LLM response's tokens,
	// sent after it by Envoy's apply_on_stream_done; limiter's Settle):
	// under a rule with overdraft (Overdraft) its tokens are taken
	// whatever the key's level, down to the rule's max_debt, and it is
	// decided Allowed when they were there. Without overdraft, and on
	// strategies that do not implement it, it is a request like any other.
	Charge bool
}

// Decision is the answer to one request.
type Decision struct {
	RequestID uint64
	Allowed   bool
	// Delay is, in waiting mode (Waiter), how long after the request's
	// arrival an admitted request may proceed: its tokens are reserved
	// for then. 0 outside waiting mode and for refusals.
	Delay time.Duration
	// Permit is, for an admitted request of a strategy that hands out
	// permits (Releaser: concurrency), the permit's id (not 0), to be
	// given back with Releaser.Release; 0 otherwise.
	Permit uint64
	// Expires is when Permit lapses by itself (strategy time of the node
	// that took the request; a holder must be done by then); 0 without a
	// permit.
	Expires time.Duration
}

// Message is a peer message a strategy asks its driver to send. Payload is
// the strategy's own protobuf encoding (package api/peer/v1); the driver
// counts its length as the bandwidth the strategy uses and delivers it
// unchanged (or loses, duplicates or delays it).
type Message struct {
	To      NodeID
	Payload []byte
}

// Effects collects what a strategy asks of its driver during one call. The
// driver passes a reset Effects to every call and acts on it afterwards.
type Effects struct {
	Messages  []Message       // messages to send, in order
	Decisions []Decision      // decisions on earlier pending requests, now complete
	Wakeups   []time.Duration // times at which to call Tick (absolute; duplicates allowed)
	// Quotas are token-bucket assignments for quota clients attached to
	// this node (Quoter), in order.
	Quotas []QuotaAssignment
	// RefusalsEnded are keys whose driver-held refusal window
	// (Refuser.RefusedUntil) must end now: the strategy may admit their
	// requests again (EndRefusal). Their order carries no meaning (the
	// driver ends each; a strategy may list them in map order).
	RefusalsEnded []string
}

// Send queues a message to a peer.
func (fx *Effects) Send(to NodeID, payload []byte) {
	fx.Messages = append(fx.Messages, Message{To: to, Payload: payload})
}

// Decide completes an earlier pending request.
func (fx *Effects) Decide(id uint64, allowed bool) {
	fx.Decisions = append(fx.Decisions, Decision{RequestID: id, Allowed: allowed})
}

// DecideAfter completes an earlier pending request in waiting mode (Waiter,
// SRTM §5.2): allowed after delay (a duration counted from the
// request's arrival; 0 for a refusal).
func (fx *Effects) DecideAfter(id uint64, allowed bool, delay time.Duration) {
	fx.Decisions = append(fx.Decisions, Decision{RequestID: id, Allowed: allowed, Delay: delay})
}

// DecidePermit completes an earlier pending request with a granted
// permit (Releaser): id the request, permit its id (not 0), expires when
// it lapses (absolute strategy time).
func (fx *Effects) DecidePermit(id, permit uint64, expires time.Duration) {
	fx.Decisions = append(fx.Decisions, Decision{RequestID: id, Allowed: true, Permit: permit, Expires: expires})
}

// TakeDecision removes the decision on request id from fx.Decisions and
// returns it (false when fx holds none): for a strategy that decides a
// request through its asynchronous path (an ordering buffer with no
// hold) and answers it synchronously from Request. Ours.
func (fx *Effects) TakeDecision(id uint64) (Decision, bool) {
	for i, d := range fx.Decisions {
		if d.RequestID == id {
			fx.Decisions = slices.Delete(fx.Decisions, i, i+1)
			return d, true
		}
	}
	return Decision{}, false
}

// WakeAt asks to be ticked at time at (or as soon after as the driver can).
func (fx *Effects) WakeAt(at time.Duration) { fx.Wakeups = append(fx.Wakeups, at) }

// Reset empties fx, keeping its buffers.
func (fx *Effects) Reset() {
	fx.Messages = fx.Messages[:0]
	fx.Decisions = fx.Decisions[:0]
	fx.Wakeups = fx.Wakeups[:0]
	fx.Quotas = fx.Quotas[:0]
	fx.RefusalsEnded = fx.RefusalsEnded[:0]
}

// Strategy is one node's state machine for one rule. Calls on an instance
// are never concurrent; fx is valid only during the call.
type Strategy interface {
	// Start is called once, before any other call, at time now.
	Start(now time.Duration, fx *Effects)

	// Request decides req at time now (now >= req.Arrival). decided is false
	// when the decision needs the network; it then arrives later in
	// fx.Decisions of some call on this same instance.
	Request(now time.Duration, req Request, fx *Effects) (d Decision, decided bool)

	// Receive handles a peer's message. A payload that does not decode is
	// returned as an error and changes no state.
	Receive(now time.Duration, from NodeID, payload []byte, fx *Effects) error

	// Tick is called at (or after) a time asked for with WakeAt. It may be
	// called at other times too and must then do only what is due.
	Tick(now time.Duration, fx *Effects)

	// SetMembers tells the node the current live members (itself included),
	// as its failure detector sees them, sorted by NodeID.
	SetMembers(now time.Duration, members []NodeID, fx *Effects)

	// StateBytes is the size of the node's state for this rule, in bytes of
	// its wire encoding (the evaluator's memory metric).
	StateBytes() int
}

// Config is what a node's strategy instance is built from.
type Config struct {
	Self    NodeID
	Members []NodeID // initial live members, sorted, Self included
	Rate    bucket.Rate
	Burst   int64 // tokens
	// Rand is the only source of randomness a strategy may use; the driver
	// seeds it, so runs are reproducible.
	Rand *rand.Rand
	// Params are strategy-specific settings ("hold=5ms"); a strategy reads
	// them against its declarations (ReadParams), which rejects names it
	// does not declare and values not of their declared type.
	Params Params
	// LatencyHint is the driver's estimate of the one-way peer latency (the
	// simulator's configured latency; measured in the live runtime). 0 if
	// unknown.
	LatencyHint time.Duration
	// Partition is the rule's split-brain rule (PartitionAvailable, the
	// zero value, or PartitionConserve). A strategy that takes
	// PartitionConserve implements Conserver; the driver refuses conserve
	// for one that does not (CheckPartition).
	Partition PartitionMode
	// Seed, when set, gives the level a key's bucket starts from when a
	// strategy that keeps a bucket per key at the node (owner, local,
	// static: KeyLeveler) creates it, instead of full (KeySeeder). nil: full
	// (the simulator's case).
	Seed KeySeeder
	// Added is true for a rule added to a running node (a reload, an
	// Envoy descriptor's derived rule): its Start's time is not the
	// node's start, and its peers may have seen this node for long. false
	// for the rules a node starts with (and in the simulator, whose nodes
	// start or restart with their rules). owner defers a restarted node's
	// keys (restart.go) only for rules it started with.
	Added bool
}

// KeySeeder returns the level a new bucket of key starts from at now, as a
// KeyState valid at now (Level in its own ticks, capped at the new burst
// by the strategy; a state that does not validate, or false, means full).
// The live driver sets it so that a key whose limit changes keeps what it
// spent under its other rules (the rules of one Envoy descriptor's limit
// overrides: cluster's derived rules). It is called from within the
// strategy's own calls (Request, Receive, ...), with their time: it must
// not call this strategy back, and it must depend only on the state of the
// node's other rules (deterministic given the same inputs). Ours .
type KeySeeder func(now time.Duration, key string) (KeyState, bool)

// KeyLeveler is implemented by strategies that keep a bucket per key at
// the node (owner, local, static), for a KeySeeder that reads another
// rule's level of a key.
type KeyLeveler interface {
	// KeyLevel is key's bucket refilled to now, At = now (tokens lent to
	// the driver's fast path counted as spent, as Snapshotter.Snapshot
	// counts them, a debt as 0; Snapshot emits the level at the bucket's
	// last update instead), and false when this node holds no bucket for
	// key or it is full. It changes no state.
	KeyLevel(now time.Duration, key string) (KeyState, bool)
}

// Validate checks the parts of Config every strategy relies on.
func (c *Config) Validate() error {
	if c.Self == "" {
		return fmt.Errorf("config: Self is empty")
	}
	if err := c.Rate.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if c.Burst < 0 {
		return fmt.Errorf("config: burst %d is negative", c.Burst)
	}
	if c.Rand == nil {
		return fmt.Errorf("config: Rand is nil")
	}
	return nil
}

// ErrUnexpectedMessage is the error of a strategy that sends no messages
// (local, central, static) and received one; its Receive wraps it with its
// name and the sender (UnexpectedMessage), so test it with errors.Is.
var ErrUnexpectedMessage = errors.New("unexpected peer message (this strategy sends none)")

// UnexpectedMessage is ErrUnexpectedMessage wrapped with the strategy's
// name and the sender, e.g. "static: unexpected peer message (this
// strategy sends none) from n2".
func UnexpectedMessage(strategyName string, from NodeID) error {
	return fmt.Errorf("%s: %w from %s", strategyName, ErrUnexpectedMessage, from)
}

// Remainer is implemented by strategies that hold a local view of a key's
// bucket. The driver may call Remaining right after a synchronous decision
// (at the same now) to tell the client how many tokens are left; it must
// not change the strategy's state.
type Remainer interface {
	// Remaining is the whole tokens this node's view of key holds at now
	// (for strategies that split the limit, the node's own share), and
	// false when the node has no view of key (it is decided elsewhere).
	Remaining(now time.Duration, key string) (tokens int64, ok bool)
}

// Releaser is implemented by strategies whose admitted requests hold a
// permit until released (concurrency: at most N requests of a key in
// flight, the throttling article's "concurrency" limit): every Decision
// that admits carries a Permit and its Expires. Release gives the permit
// back before it expires; a permit never released lapses at Expires. A
// release of a permit that is unknown, already released or expired
// changes nothing (releases are idempotent). Ours.
type Releaser interface {
	Release(now time.Duration, key string, permit uint64, fx *Effects)
}

// Readier is implemented by strategies whose node, once started, may need
// a moment before it decides as the cluster would (gdrl: a node that
// joins holds no share of the rule until a member pays it its default
// share). The live runtime reports the node ready (health, /readyz) only
// once every rule's strategy is Ready; the simulator does not ask. Ready
// must not change the strategy; once it has reported true the driver need
// not ask again. Ours (the runtime's readiness, not a seed's).
type Readier interface {
	Ready(now time.Duration) bool
}

// Leaver is implemented by strategies that hold state other nodes need
// when this node leaves the cluster on purpose (gdrl: its capacity
// shares). The driver calls Leave once, when the node is told to leave
// (SIGTERM), and then keeps driving the strategy (messages, ticks) until
// Left reports true or its patience ends; then it stops the node.
type Leaver interface {
	// Leave starts the hand-over of this node's state to its peers.
	Leave(now time.Duration, fx *Effects)
	// Left reports whether the hand-over is complete (acknowledged).
	Left() bool
}

// ShareReporter is implemented by strategies that split each key's rate
// into per-node capacity shares (gdrl, static, adaptive), for metrics.
// Read in the node's loop at every scrape: kept as shares change, never
// a walk of the keys.
type ShareReporter interface {
	// CapacityShares is the sum over the keys this node holds of its
	// capacity share as a fraction of the rule's rate (0..1 each), and the
	// number of those keys. The mean share is sum/keys. O(1).
	CapacityShares() (sum float64, keys int)
}

// KeyState is one key's token bucket as a snapshot keeps it across a
// restart (Snapshotter). The level is exact, in the units of package
// bucket: Level ticks, of which TicksPerToken make one token (the rule's
// Rate.Per in nanoseconds at the time), so a level of 2.5 tokens at a
// rate of 1/min is Level 150e9, TicksPerToken 60e9. Capacity is the
// bucket's burst in the same ticks when the state was taken; for static
// it is the node's share b_i.
//
// At is the time at which Level was valid, in the time base of whoever
// holds the KeyState: the strategy's (a duration since its driver's epoch)
// when Snapshot emits it and Restore takes it. The driver converts it to
// and from the wall clock (cluster: nanoseconds since the Unix epoch), so
// a snapshot survives a restart whose epoch differs. Ours: the bucket's
// state of SRTM §1.1 (level and last update), exported.
type KeyState struct {
	Key           string
	Level         int64 // ticks, MinKeyStateLevel <= Level <= Capacity; below 0: a debt, or tokens reserved ahead
	Capacity      int64 // ticks; > 0
	TicksPerToken int64 // ticks per token (> 0)
	At            time.Duration
}

// MaxKeyStateBytes bounds the length of a KeyState's key (the cluster's
// own limit on request keys).
const MaxKeyStateBytes = 4096

// MinKeyStateLevel is the lowest Level a KeyState may hold: the deepest
// debt a bucket's arithmetic holds (bucket.Bucket.DebtTicks' cap). A
// strategy restoring a state keeps its level no lower than its own rule
// allows (minus the larger of the burst and max_debt).
const MinKeyStateLevel = -(math.MaxInt64 / 2)

// Validate reports what is wrong with s, naming the key: an empty,
// over-long or non-UTF-8 key, a non-positive TicksPerToken or Capacity, a
// Level below MinKeyStateLevel or above Capacity. A state that passes
// never yields a level above the burst; a negative one (a debt, or
// reservations) is kept down to the restoring rule's own floor.
func (s KeyState) Validate() error {
	switch {
	case s.Key == "":
		return fmt.Errorf("key state: empty key")
	case len(s.Key) > MaxKeyStateBytes:
		return fmt.Errorf("key state: key of %d bytes is above the limit of %d", len(s.Key), MaxKeyStateBytes)
	case !utf8.ValidString(s.Key):
		return fmt.Errorf("key state: key %q is not valid UTF-8", s.Key)
	case s.TicksPerToken <= 0:
		return fmt.Errorf("key state %q: ticks per token %d is not positive", s.Key, s.TicksPerToken)
	case s.Capacity <= 0:
		return fmt.Errorf("key state %q: capacity %d ticks is not positive", s.Key, s.Capacity)
	case s.Level < MinKeyStateLevel:
		return fmt.Errorf("key state %q: level %d ticks is below %d (deeper than any bucket's debt)", s.Key, s.Level, int64(MinKeyStateLevel))
	case s.Level > s.Capacity:
		return fmt.Errorf("key state %q: level %d ticks is above its capacity %d", s.Key, s.Level, s.Capacity)
	}
	return nil
}

// Snapshotter is implemented by strategies whose state is one token
// bucket per key held at this node (local, central, static, owner), so
// that a node's limits survive a restart of the whole cluster (the
// node's state_dir). Strategies that do not implement it (gdrl, gcounter,
// tbqueue, adaptive: their state is shares, counters or a queue shared
// with peers) are not persisted and start fresh after a restart.
// Deterministic: neither method reads a clock. Ours.
type Snapshotter interface {
	// Snapshot calls emit once per key whose bucket is not full at now
	// (a full bucket equals an absent one), with the level at the
	// bucket's last update and At that update (at most now, unless the
	// bucket decided at a later arrival time), so that a bucket untouched
	// between two snapshots emits the same state in both (statestore
	// writes only the keys that changed). It changes no state.
	Snapshot(now time.Duration, emit func(KeyState))

	// Restore sets the buckets of states at now: each level is refilled
	// at the rule's current rate for the time from its At to now (none if
	// At is after now), rescaled to the current tick size and capped at the
	// current burst, so it never exceeds it. Every state is validated
	// first (KeyState.Validate; a key given twice is refused too): on
	// error nothing is restored and the error names what was wrong.
	Restore(now time.Duration, states []KeyState) error
}

// ChangeSnapshotter is implemented by Snapshotters that can emit the keys
// whose state changed since their last snapshot instead of every key
// (local, central, static, owner, over strategy/internal/buckets), so that
// a node's periodic snapshot holds its event loop for a time in proportion
// to the keys changed, not to the keys held (issue 28). Deterministic, no
// clock. Ours.
//
// A sequence starts with SnapshotFull and goes on with SnapshotChanges
// calls. Applying them in order to a store (SnapshotFull's states as the
// whole content, then per SnapshotChanges call: a state replaces its key's,
// a gone key is removed) leaves, for every key, a state that refilled to
// the last call's now gives the level Snapshot at that now would (a key
// Snapshot leaves out counting as full): an untouched bucket's state at
// its last update does not change, and refilling is exact (package
// bucket). The store may hold a key Snapshot leaves out only when it is
// full at now: never more tokens than Snapshot's.
type ChangeSnapshotter interface {
	Snapshotter

	// SnapshotFull emits what Snapshot emits (every key not full at now)
	// and makes now the point the next SnapshotChanges reports changes
	// from. It may change the bookkeeping of changed keys, not a level.
	SnapshotFull(now time.Duration, emit func(KeyState))

	// SnapshotChanges calls emit for every key whose bucket changed (or
	// may have: a check, a lend, a peer's level, a restore) since the last
	// SnapshotFull or SnapshotChanges and is not full at now, and gone
	// for every key dropped (swept, deleted, full at now, or no longer
	// this node's to keep) since then; each key at most once per call,
	// keys in no particular order. It returns false, emitting nothing,
	// when it cannot: there was no SnapshotFull since the strategy
	// started, or an event changed every key or which keys the strategy
	// keeps (a rate or membership change, a Restore, more changes than
	// keys held); the caller then calls SnapshotFull.
	SnapshotChanges(now time.Duration, emit func(KeyState), gone func(key string)) bool
}

// MemoryReporter is implemented by strategies that can estimate the Go
// heap their state takes at this node (local, central, static, owner,
// gcounter, tbqueue, gdrl, adaptive, fixed_window, grd, fps, lease, quota, concurrency, regionlease: their maps,
// structs, slices and key strings, with Go's map and allocation
// overheads; package strategy/internal/memsize). The live runtime exports it as
// tokenmesh_state_bytes, read in the node's loop at every scrape, so it
// must not walk the keys: implementations keep their counts as keys are
// created, grown and dropped (O(1) per change). StateBytes stays the wire
// size, the evaluator's metric comparable across strategies. Ours.
type MemoryReporter interface {
	// MemoryBytes is the estimated heap taken by this rule's state, bytes;
	// O(1) or O(members), never O(keys).
	MemoryBytes() int
}

// PartitionMode is a rule's split-brain rule: what a side of a partition
// (or the survivors of a crash, which look the same to them) may admit for
// the keys it cannot coordinate with the members it lost. Ours ;
// conserve applies the static split of SRTM §1.2 (sum r_l = r,
// sum b_l = b) to the sides of a partition.
type PartitionMode uint8

const (
	// PartitionAvailable: every side enforces what it would with its live
	// members alone (each side may admit up to the whole (r, b) per key:
	// the sides together up to k times the envelope for k sides). The
	// zero value, and what every strategy did before the option existed.
	PartitionAvailable PartitionMode = iota
	// PartitionConserve: a side that sees k of the last agreed N members
	// (Conserver) enforces only k/N of (r, b) for the keys it cannot
	// coordinate, so the sides together stay inside one envelope, at the
	// price of refusing more while k < N.
	PartitionConserve
)

// PartitionParam is the generic parameter that sets Config.Partition where
// a driver takes strategy parameters as name=value pairs (the simulator's
// --param gdrl.partition=conserve): the driver removes it (TakePartition)
// before the strategy checks its own parameters.
const PartitionParam = "partition"

// String is the mode's name in configuration: "available" or "conserve".
func (m PartitionMode) String() string {
	switch m {
	case PartitionAvailable:
		return "available"
	case PartitionConserve:
		return "conserve"
	}
	return fmt.Sprintf("PartitionMode(%d)", uint8(m))
}

// ParsePartitionMode parses "available" or "conserve"; "" is available.
// Anything else is an error naming the value and the two choices.
func ParsePartitionMode(s string) (PartitionMode, error) {
	switch s {
	case "", "available":
		return PartitionAvailable, nil
	case "conserve":
		return PartitionConserve, nil
	}
	return 0, fmt.Errorf("partition %q: want available or conserve", s)
}

// TakePartition removes the generic parameter PartitionParam from p and
// returns the rest and the mode it names (PartitionAvailable when p has
// none). A bad value is an error naming it.
func TakePartition(p Params) (Params, PartitionMode, error) {
	v, ok := p.values[PartitionParam]
	if !ok {
		return p, PartitionAvailable, nil
	}
	mode, err := ParsePartitionMode(v)
	if err != nil {
		return p, 0, fmt.Errorf("parameter %s=%q: want available or conserve", PartitionParam, v)
	}
	rest := Params{values: make(map[string]string, len(p.values))}
	for k, val := range p.values {
		if k != PartitionParam {
			rest.values[k] = val
		}
	}
	return rest, mode, nil
}

// Conserver is implemented by strategies that can enforce
// PartitionConserve (static, adaptive, gdrl, gcounter, tbqueue, owner). The
// driver tells them, besides the live members (SetMembers), the last
// agreed members: the live ones plus those that failed (were declared
// dead, did not leave with a leave intent) less than reconnect_timeout
// ago; a member that leaves stops counting at once, a join adds. The
// driver calls SetExpected whenever that set changes, for every mode (a
// strategy in PartitionAvailable ignores it); until the first call a
// strategy takes Config.Members as the expected set.
//
// The two lists arrive in separate calls and in either order, so a
// strategy counts N over their union (ConserveScale): a member in the
// live view is always expected.
//
// For a strategy whose keys have an owner (rendezvous), implementing it
// takes a few lines: in conserve, a key whose owner is expected but not
// live is decided from a local bucket of (k/N)(r, b), and a key whose
// owner is live is forwarded as usual. Ours (see PartitionMode).
type Conserver interface {
	// SetExpected sets the last agreed members (sorted, Self included) at
	// now.
	SetExpected(now time.Duration, expected []NodeID, fx *Effects)
}

// ConserveScale returns k, the live members, and N, the members of the
// union of live and expected, and that union sorted: a side that sees k of
// N enforces k/N of (r, b) under PartitionConserve. Both inputs may be
// unsorted; self is counted in both.
func ConserveScale(self NodeID, live, expected []NodeID) (k, n int, union []NodeID) {
	l := make([]NodeID, 0, len(live)+1)
	l = append(l, live...)
	l = append(l, self)
	slices.Sort(l)
	l = slices.Compact(l)
	u := make([]NodeID, 0, len(l)+len(expected))
	u = append(u, l...)
	u = append(u, expected...)
	slices.Sort(u)
	u = slices.Compact(u)
	return len(l), len(u), u
}

// CheckPartition refuses PartitionConserve for a strategy that does not
// implement Conserver, naming it (local and central, to
// which it does not apply: see docs/OPERATIONS.md).
func CheckPartition(name string, s Strategy, mode PartitionMode) error {
	if mode != PartitionConserve {
		return nil
	}
	if _, ok := s.(Conserver); !ok {
		return fmt.Errorf("strategy %s does not implement partition: conserve (it takes available only; see docs/OPERATIONS.md, \"Partitions\")", name)
	}
	return nil
}

// Waiter is implemented by strategies that answer in waiting mode (SRTM
// §5.2, SRTM's shaping mode; Appendix A eq. (2)): instead of refusing a
// request the bucket cannot serve now, the node holding the key's bucket
// reserves its tokens in arrival order (bucket.ReserveN, FCFS) and admits
// it with a delay when that delay is at most maxWait; the client waits
// Decision.Delay after the arrival before proceeding. The waiting time is
// the DRL penalty of 000 §2.1. Implemented by local and central (one
// bucket), owner and lease (the key's owner reserves), and static, gdrl
// and adaptive, which reserve in the node's sub-token bucket (the DRL
// penalty of Proposition 1 made a measured wait; each keeps its
// reservations due when promised across re-splits and transfers, see
// their RequestWait). gcounter and tbqueue, whose state every node spends
// from its own view, do not implement it and say why (WaitRefuser,
// CheckWait); their drivers decide a check with max_wait as a plain
// Request (no wait, refusals as usual), and the simulator refuses
// --max-wait with one of them named.
type Waiter interface {
	// RequestWait is Request in waiting mode. maxWait > 0 is the longest
	// wait the client accepts (duration); 0 makes it exactly Request.
	// A decision with Allowed true carries the wait in Delay
	// (0 <= Delay <= maxWait); a refusal means the wait would exceed
	// maxWait (or no wait is enough: tokens above the burst), and
	// nothing was reserved.
	RequestWait(now time.Duration, req Request, maxWait time.Duration, fx *Effects) (d Decision, decided bool)
}

// ArrivalOrderer is implemented by strategies whose Request decides req as
// of req.Arrival also when that is well before now: they order a key's
// requests by arrival in an ordering buffer (owner's `hold`, the throttling article's
// designated server deciding forwards in arrival order) and
// serve a request decided after its turn only from the tokens its bucket
// held all along since its arrival (bucket.Bucket's late decisions), so
// an earlier Arrival never admits more. A live driver may hand them a
// client's own arrival time (tokenmesh.v1 CheckItem.created_at_unix_ns;
// the simulator's --edge-times), clamped by EdgeArrival; every other
// strategy is always given Arrival = now.
type ArrivalOrderer interface {
	// OrdersByArrival marks the capability; it does nothing.
	OrdersByArrival()
}

// MaxCreatedAge bounds how far before a node's now a client's edge time
// counts (an older one counts as now - MaxCreatedAge): a few clock ticks
// of skew and of network between the edge and the node, well inside the
// strategies' forward timeouts, after which a late request is one they
// may have forgotten the bucket for.
const MaxCreatedAge = 100 * time.Millisecond

// EdgeArrival is the arrival a driver hands a strategy.ArrivalOrderer for
// a request that reached the edge at created (strategy time) and the node
// at now: created within [now - MaxCreatedAge, now], and not before 0.
func EdgeArrival(created, now time.Duration) time.Duration {
	return min(max(created, now-MaxCreatedAge, 0), now)
}

// ReserveWithin is the waiting-mode decision on one bucket (SRTM §5.2):
// it reserves n tokens at time at (bucket.ReserveN, FCFS) when the wait
// until the bucket holds them is at most maxWait, and reports that wait;
// otherwise it takes nothing and reports false. maxWait 0 is AllowN.
func ReserveWithin(b *bucket.Bucket, at time.Duration, n int64, maxWait time.Duration) (delay time.Duration, ok bool) {
	if maxWait <= 0 {
		return 0, b.AllowN(at, n)
	}
	d, ok := b.DelayN(at, n) // counted from at, also for a late decision
	if !ok || d > maxWait {
		return 0, false
	}
	if _, ok := b.ReserveN(at, n); !ok {
		return 0, false
	}
	return d, true
}
