package gdrl

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// UnitsPerToken is the resolution of capacity and burst shares: a capacity
// share of UnitsPerToken is one token per second, a burst share of
// UnitsPerToken is one token (ours: micro-tokens, so that shares are exact
// int64 sums).
const UnitsPerToken = 1_000_000

// maxTotalUnits bounds a rule's capacity and burst in units (about 7.2e10
// tokens/s and tokens), so that sums of shares, however inherited, stay far
// from int64 overflow.
const maxTotalUnits = 1 << 56

// Performance indicator names: the values of the indicator parameter (see
// New), the quantity q_i the pairwise updates equalise.
const (
	IndicatorSpare = "spare" // spare bandwidth q = lambda - C, micro-tokens/s (001 eq. (14))
	IndicatorFill  = "fill"  // fill ratio S/D (004 eq. (1)), used as q = -S/D, dimensionless
	// IndicatorDiscard is the discard rate (001 §I-A: q_i = f(D_i, C_i),
	// "discard rate"): q = R/lambda, the tokens refused at the node per
	// second over the tokens requested per second, both low-pass filtered
	// with alpha per interval (001 §III-A), the demand floored as fill's,
	// in [0, 1], dimensionless. Assumption 1 (q_i decreasing in C_i): a
	// larger share refuses fewer tokens of the same demand, so q does not
	// increase with C_i; it is flat at 0 once C_i covers the demand
	// (nothing refused), where the update moves nothing either way, and
	// it is measured, so it follows a share change only through the
	// filter (a lag of about 1/alpha intervals). See indicators.go.
	IndicatorDiscard = "discard"
	// IndicatorUtilisation is the utilisation (001 §I-A, "utilisation"):
	// q = A/C_i, the tokens admitted at the node per second (low-pass
	// filtered with alpha per interval) over its capacity share (floored
	// as fill's demand), capped at 1, dimensionless. Assumption 1: the
	// admitted rate is at most about C_i and at most the demand, so q ~
	// min(lambda/C_i, 1) does not increase with C_i; it is flat at 1 while
	// the share is below the demand, where two saturated nodes look equal
	// whatever their demands (the update cannot tell which needs more: it
	// moves capacity only from nodes with spare share). See indicators.go.
	IndicatorUtilisation = "utilisation"
	// IndicatorResponse is the mean response time (001 §I-A, "mean
	// response time"): q = the mean, over the requests of the key at the
	// node, of the wait a reservation of the request's tokens needs at the
	// node's bucket (C_i, B_i) at its arrival, in seconds, low-pass
	// filtered with alpha per interval with requests, each wait capped at
	// `idle`. In waiting mode (strategy.Waiter, a rule with max_wait; SRTM
	// §5.2) that is exactly an admitted request's wait in this node's
	// queue, its response time (and for a request refused because it
	// would wait beyond max_wait, the wait it would have needed); for a
	// plain check it is the wait the request would have had had it
	// reserved (bucket.Bucket.DelayN: 0 when admitted, the deficit over
	// the refill rate C_i when refused). Assumption 1 (q_i decreasing in
	// C_i): in waiting mode with no refusal, for the same requests a
	// larger C_i refills the same reservations faster from the same
	// burst, so every wait is at most as long (TestResponseDecreasingInShare
	// checks it); for plain checks the wait of one request at a given
	// level is decreasing in C_i, but a larger share also admits more of
	// the earlier requests, leaving less for the later ones, so the
	// decrease holds only on average, not request by request. Ours: the
	// definition for refused requests and plain checks, the cap, the
	// scaling (indicators.go).
	IndicatorResponse = "response"
)

// Communication graph names: the values of the graph parameter (see New
// and Neighbours).
const (
	GraphRing    = "ring"    // predecessor and successor in NodeID order (001 Fig. 2, 004 §2.3)
	GraphRegular = "regular" // degree/2 Hamiltonian cycles (001 §III-C)
	GraphFull    = "full"    // every other member
)

// GDRL is one node of the gdrl strategy for one rule. See the package
// documentation. Not safe for concurrent use (no strategy is).
type GDRL struct {
	self strategy.NodeID
	rnd  *rand.Rand
	cfg  strategy.Config

	// Parameters.
	interval   time.Duration
	indicator  string
	eta        float64 // 0: the default for the graph's degree
	alpha      float64
	graph      string
	degree     int
	idle       time.Duration
	retransmit time.Duration
	maxKeys    int
	maxGap     int // max_probe_gap in intervals, >= 1
	noiseBand  float64
	evidence   float64

	// The rule in units, and the bucket resolution.
	totalC, totalB int64
	unit           int64 // micro-tokens per bucket token
	perToken       int64 // bucket tokens per request token
	demandFloor    float64

	inc        uint64            // this incarnation
	conserve   bool              // partition: conserve (see doc.go, "Split brain")
	expected   []strategy.NodeID // the last agreed members (strategy.Conserver), sorted
	members    []strategy.NodeID
	viewAt     time.Duration // when members last changed (heirSettles)
	neighbours []strategy.NodeID
	nextNb     int
	sent       map[strategy.NodeID]map[string]sentKey // per neighbour: inputs last probed
	heard      map[strategy.NodeID]*heardFrom         // per neighbour: keys it certainly sees (quiet.go)
	probeGap   int                                    // intervals between probes while nothing moves (quiet.go)
	probeWait  int                                    // intervals until the next probe
	moved      bool                                   // capacity moved since the last probe
	refresh    time.Duration
	cursor     string // probe rotation when keys exceed max_keys
	peers      map[strategy.NodeID]*peerInfo
	helloTo    map[strategy.NodeID]bool // members that have not acknowledged this incarnation's hello
	exBuddies  map[strategy.NodeID]bool // buddies that left the view, which may still hold a record of this incarnation
	helloAcked map[strategy.NodeID]bool // members that acknowledged this incarnation's hello
	helloSent  time.Duration

	dc, db int64                    // default shares (keys without an explicit share)
	seen   map[string]time.Duration // keys requested within seenFactor idle windows: the last request
	shares map[string]*share

	// Replication to the buddy (write-ahead).
	buddy      strategy.NodeID
	buddyInc   uint64
	epoch      uint64
	version    uint64
	acked      uint64
	dirty      bool
	changed    map[string]uint64 // key -> version that changed it, not yet acknowledged
	partAt     [numParts]uint64  // version that last changed each other part of the record
	lazy       bool              // a change that may wait for the next interval to be replicated
	recordSent time.Duration
	sentVer    uint64 // the version of the last record sent
	gated      []gatedMsg

	// Transfers.
	seqTo   map[srcKey]uint64 // per destination incarnation: the last sequence number used
	outbox  []*transfer
	applied filters // duplicate filter, per paying incarnation

	// Inheritance.
	tombs []*tombstone
	// retired: tombstones whose incarnation answered a fence alive, kept
	// for what they credited on its behalf until this node is fenced by
	// an heir of a record that held them (see onFenced); replicated
	// (partLocal), and taken over by an heir of this node.
	retired []*tombstone
	// draining: tombstones dropped when an heir fenced this node (its
	// copies took over) that credited transfers after the version the
	// heir took, which no copy knows of; each still fences its
	// incarnation, for those credits only, until answered (see
	// onFenced); they settle nothing. Replicated (partLocal), and taken
	// over by an heir of this node, which drains them in turn.
	draining []*tombstone
	// fenceCredits: per inheritance fenced, the transfers to this
	// incarnation that a fence of it named as credited on its behalf and
	// that were reconciled here (given up, or never credited here), so
	// that copies of one tombstone fencing apart reconcile each credit
	// once.
	fenceCredits map[fenceKey]map[TransferID]bool
	// fenceReported: the transfers to this incarnation that a fence named
	// as credited by an heir (any inheritance): a second inheritance
	// naming one credited it once too many.
	fenceReported map[TransferID]bool
	held          map[strategy.NodeID]*heldRecord
	fencesApplied map[fenceKey]bool
	// proxiesDone: the give-ups of this incarnation's inheritances by
	// later heirs (absorbedInh) that a fence named here and that were
	// reconciled (see onFenced), each once.
	proxiesDone map[proxyKey]bool

	// endRefusals: keys whose refusal window a raise ended during the
	// current call, handed to the driver by flush (allowance.go).
	endRefusals []string

	mem memory // heap and share accounting for MemoryBytes and CapacityShares (memory.go)

	nextTick time.Duration
	tickReq  time.Duration // the interval tick last asked for with WakeAt
	wakeReq  time.Duration // the earlier wake-up last asked for (retransmissions)
	started  bool
	startAt  time.Duration // when Start ran: 0 for a founding member (see Ready)
	leaving  bool          // Leave was called: hand everything to the buddy (see leave.go)

	askNext int // the next member to ask for default share, round robin (see balance.go)
	// offerWait counts the intervals this node has been above its split,
	// its default share not falling and its view not changing (see
	// offerDefault); offerNext is the next member to offer to, round robin.
	offerWait, offerNext int
	offerDC, offerDB     int64 // the default share at the last interval
}

// share is one key's explicit share at this node.
type share struct {
	c, b       int64
	bkt        bucket.Bucket
	demand     float64 // lambda estimate, units per second
	demandSq   float64 // the same filter over squared samples
	intervals  int64   // intervals closed since the first request
	events     float64 // a filter over 1 per interval with requests, 0 without (see recent)
	hasDemand  bool
	reqTokens  int64   // tokens requested in the current interval
	refTokens  int64   // of those, tokens refused (discard, utilisation)
	refused    float64 // filtered refused tokens, units per second (discard)
	admitted   float64 // filtered admitted tokens, units per second (utilisation)
	waitSum    float64 // waits of this interval's requests, seconds (response)
	waitN      int64   // this interval's requests with a wait counted (response)
	response   float64 // filtered mean wait, seconds (response)
	lastActive time.Duration
	everActive bool
	// inRecord: the key has been in a record sent to the buddy (touched,
	// or listed in a record sent, full or delta: sendRecord) since this
	// share was made explicit; a share that never was is at the default
	// share in the buddy's copy and is dropped without replicating the
	// removal.
	inRecord bool
	// refusing: RefusedUntil opened a refusal window of the key
	// (allowance.go); a raise of its share or tokens added end it
	// (Effects.EndRefusal, from flush) and clear this.
	refusing bool
	// held: the request tokens of bkt the live driver holds in an open
	// allowance (allowance.go; ours): spent as far as the bucket is
	// concerned, which refills only up to its burst less them (clamp).
	held int64
}

type peerInfo struct {
	inc      uint64
	buddy    strategy.NodeID
	buddyInc uint64 // the buddy's incarnation as known when it was last announced (0: unknown)
	// past maps the node's earlier incarnations to the buddy each last
	// announced: the holder of a dead incarnation's record.
	past map[uint64]strategy.NodeID
}

// TransferID names a capacity transfer (a move of capacity and burst share
// from one node to another, 004 §3.1): the paying incarnation (Src,
// SrcInc), the destination incarnation (Dst, DstInc), and the transfer's
// sequence number on that link (Seq: 1, 2, ...).
type TransferID struct {
	Src    strategy.NodeID
	SrcInc uint64
	Dst    strategy.NodeID
	DstInc uint64
	Seq    uint64
}

type srcKey struct {
	src strategy.NodeID
	inc uint64
}

type item struct {
	key  string
	c, b int64
	t    int64 // tokens travelling with the burst (transfers only), units
}

type transfer struct {
	id       TransferID
	items    []item // sorted by key
	gate     uint64 // record version the buddy must hold before the first send
	released bool
	lastSent time.Duration
	newInc   uint64 // a newer incarnation of dst seen: resolve through the heir
	// creditedAt, in a tombstone's onBehalf, is the first version of this
	// node's record that holds the credit (0: it came with a record); not
	// on the wire (see onFenced).
	creditedAt uint64
}

type gatedMsg struct {
	gate    uint64
	to      strategy.NodeID
	payload []byte
}

// tombstone is what an heir keeps of an incarnation it inherited.
type tombstone struct {
	node     strategy.NodeID
	inc      uint64
	version  uint64
	dc, db   int64
	items    []item // inherited explicit shares
	applied  filters
	onBehalf []*transfer
	// absorbed: the earlier inheritances of the same incarnation this
	// tombstone gave up on its behalf, or took over from a tombstone it
	// absorbed (see absorb in heir.go); named to the incarnation when it
	// is fenced, so that it undoes a give-up of its own.
	absorbed []*absorbedInh
	// held: the records the inherited ward held of its own wards out of
	// its view (heldRecord.held), kept until the ward's incarnation is
	// known dead and then learnt (see learnHeld); local.
	held map[strategy.NodeID]heldRef
	// lost: a tombstone of a record lost with its holder (see learnHeld):
	// no amounts, no filter; it settles no transfer and fences no
	// incarnation, and absorbs the fence of an earlier tombstone of its
	// incarnation.
	lost bool
	// givenUp: the inheritances of the incarnation (record versions) that
	// it had given up itself by the version inherited (heldRecord.givenUp):
	// a fence of one of them into this tombstone gives up nothing more.
	givenUp   []uint64
	fenceDone bool
	fencing   bool
	// fencedAway: the fence in flight was sent while the incarnation was
	// out of view (on a frame of it), and is withdrawn if unanswered (see
	// retransmitFences); local.
	fencedAway bool
	fenceSent  time.Duration
	// Split brain (see heir.go): the members that answered they hold no
	// later tombstone of the same incarnation, when they were last asked;
	// the members whose own query showed that they hold a later one
	// (heirLater: an answer to a query does not overrule it, as it may
	// have been made before; see onHeirFenceAck), until a fence into
	// one is answered; and the member this tombstone's fence is in
	// flight to. All local.
	// at is the first version of this node's record that holds this
	// tombstone (0: it came with a record received whole).
	at          uint64
	heirAsked   map[strategy.NodeID]bool
	heirLater   map[strategy.NodeID]bool
	heirQueried time.Duration
	heirTarget  strategy.NodeID
	heirSent    time.Duration
}

// absorbedInh is one earlier inheritance of a tombstone's incarnation
// (its record version) that a node holding a later tombstone of that
// incarnation gave up as the incarnation would have (see absorb in
// heir.go; ours): what was given up, the inherited amounts (capacity in
// units per second, burst in units) and the transfers credited on the
// incarnation's behalf given up with them (gaveUp), and the credits on its
// behalf that the later record did not show, settled elsewhere by the
// later tombstone and passed on for the incarnation to reconcile
// (passed). by and byInc name the node that gave it up: one give-up,
// however many copies of the tombstone carry it (proxyKey).
type absorbedInh struct {
	version uint64
	by      strategy.NodeID
	byInc   uint64
	dc, db  int64
	items   []item
	gaveUp  []*transfer
	passed  []*transfer
	// creditsOnly: the amounts were given up by another give-up of the
	// same inheritance that the tombstone carries; this one names credits
	// only (dc, db and items are zero).
	creditsOnly bool
	// at is the first version of this node's record that holds it (see
	// tombstone.at); not on the wire.
	at uint64
}

// proxyKey names one give-up of an inheritance by a later heir (see
// absorbedInh).
type proxyKey struct {
	version     uint64
	by          strategy.NodeID
	byInc       uint64
	creditsOnly bool
}

func (a *absorbedInh) key() proxyKey { return proxyKey{a.version, a.by, a.byInc, a.creditsOnly} }

// heldRecord is a ward's replicated share record.
type heldRecord struct {
	inc, epoch, version uint64
	dc, db              int64
	shares              map[string][2]int64
	outbox              []*transfer
	applied             filters
	tombs               []*tombstone
	inView              bool
	// held: the records the ward holds of its own wards out of its view
	// (GdrlRecord.held; none from a build before the field), learnt if
	// this node inherits the ward once it is known dead (learnHeld).
	held map[strategy.NodeID]heldRef
	// givenUp: the ward's inheritances (record versions) it had given up
	// (GdrlRecord.given_up; none from a build before the field).
	givenUp []uint64
	// retired and draining: the ward's (GdrlRecord.retired, .draining;
	// none from a build before the fields), taken over by its heir.
	retired, draining []*tombstone
}

// heldRef names a record a ward holds of its own ward (GdrlRecord.held):
// that ward's incarnation and the record's version.
type heldRef struct{ inc, version uint64 }

// fenceKey names one inheritance: the incarnation inherited and the
// version of its record. Not the heir: a tombstone travels in its heir's
// record, so the heir's heir may hold a copy of it and fence with it too,
// and one inheritance must be given up once (no two buddies hold the same
// version of a record, see heirRanks).
type fenceKey struct {
	inc     uint64
	version uint64
}

// The parts of a record besides the explicit shares (GdrlRecord.parts).
const (
	partDefaults = iota
	partOutbox
	partApplied
	partTombs
	partGivenUp // this incarnation's inheritances given up (GdrlRecord.given_up)
	partHeld    // the records held of wards out of view (GdrlRecord.held)
	partLocal   // the retired and draining tombstones (GdrlRecord.retired, .draining)
	numParts
)

// New builds one gdrl node for cfg's rule (see the package documentation;
// the node must then be started, at time 0 if it is a founding member).
// Parameters (cfg.Params, unprefixed):
//   - interval (duration > 0, default 100ms): the update interval Δ between
//     a node's exchanges. A departure from 001 §IV ("Communication
//     delays"), which takes several seconds so that the performance
//     indicators are well estimated and message delays negligible beside
//     Δ: a rate limiter's tenants burst within a second, so ours is 100 ms,
//     the demand estimate's noise handled by noise_band and evidence, and
//     the delays by acknowledged transfers (retransmit) instead of the
//     separation of time scales.
//   - indicator (fill | spare | discard | utilisation | response, default
//     fill): the performance indicator, fill ratio S/D (004 eq. (1)), spare
//     bandwidth lambda - C (001 eq. (14)), discard rate, utilisation or mean
//     response time (001 §I-A; IndicatorDiscard, IndicatorUtilisation,
//     IndicatorResponse).
//   - eta (number in (0, 1/(2d)], default 1/(2d) for the graph's degree d,
//     001 eq. (15); for fill, scaled by the pair's smaller demand): the
//     gain; above the stability bound it is refused.
//   - alpha (number in (0, 1], default 0.02): the demand filter per interval
//     (001 §III-A uses 1e-3 per time slot).
//   - graph (ring | regular | full, default ring) and degree (even, >= 2,
//     default 4, for regular): the communication graph (see Neighbours).
//   - idle (duration, default 30s): a key not requested at a node for this
//     long is idle there: it receives capacity only by relaxation, and its
//     explicit share is dropped once back at the default share.
//   - noise_band (number of standard errors in [0, 100], default 2): flows
//     smaller than this many standard errors of their noise are not made.
//   - evidence (number of standard errors in [0, 100], default 2): how
//     significant the evidence that a key's demand is skewed towards one
//     node of a pair must be before the fill indicator moves shares away
//     from the 1/N split (see skewed; 2 is 6 intervals with requests at one
//     node that the other has not seen for 10 idle windows, 0.8 is 3).
//   - retransmit (duration > 0, default max(interval, 4*LatencyHint)): the
//     timeout after which unacknowledged transfers, records and fences are
//     sent again.
//   - max_keys (>= 1, default 1024): the most keys one probe carries.
//   - refresh (duration > 0, default 50 intervals): a key whose inputs did
//     not change is probed to a neighbour again after this long (lost
//     probes, see probe); a key probed for its evidence alone waits twice
//     as long as the previous time, up to 8 idle windows (resendWait).
//   - max_probe_gap (duration >= interval, default 512 intervals): the
//     longest gap between a node's probes while no capacity moves at it
//     (probeDue; ours).
//
// Errors: an invalid Config, Self not among Members, a bad or unknown
// parameter (the error names it), or a rate or burst above about 7.2e10
// tokens(/s).
func New(cfg strategy.Config) (*GDRL, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !slices.Contains(cfg.Members, cfg.Self) {
		return nil, fmt.Errorf("gdrl: %s is not among the members %v", cfg.Self, cfg.Members)
	}
	g := &GDRL{self: cfg.Self, rnd: cfg.Rand, cfg: cfg}
	v, err := strategy.ReadParams("gdrl", Params, cfg.Params)
	if err != nil {
		return nil, err
	}
	if err := g.readExchange(v, cfg); err != nil {
		return nil, err
	}
	if err := g.readTimers(v, cfg); err != nil {
		return nil, err
	}
	if err := g.readCapacity(cfg); err != nil {
		return nil, err
	}
	g.initState(cfg)
	return g, nil
}

// readExchange reads and checks the parameters of the update: interval,
// indicator, eta, alpha, graph and degree (eta within the graph's
// stability bound).
func (g *GDRL) readExchange(v *strategy.Values, cfg strategy.Config) error {
	g.interval = v.Duration("interval")
	if g.interval <= 0 {
		return fmt.Errorf("gdrl: parameter interval must be positive")
	}
	g.indicator = v.Enum("indicator")
	if !slices.Contains(Indicators, g.indicator) {
		return fmt.Errorf("gdrl: parameter indicator=%q: want one of %v", g.indicator, Indicators)
	}
	g.eta = v.FloatOr("eta", -1)
	if g.eta == -1 {
		g.eta = 0 // the default for the degree, once the graph is known
	} else if !(g.eta > 0 && g.eta <= 1) {
		return fmt.Errorf("gdrl: parameter eta=%v: want a gain in (0, 1]", g.eta)
	}
	g.alpha = v.Float("alpha")
	if math.IsNaN(g.alpha) || g.alpha <= 0 || g.alpha > 1 {
		return fmt.Errorf("gdrl: parameter alpha=%v: want a filter gain in (0, 1]", g.alpha)
	}
	g.graph = v.Enum("graph")
	g.degree = v.Int("degree")
	nb, err := Neighbours(g.graph, g.degree, cfg.Members, cfg.Self)
	if err != nil {
		return err
	}
	if d := len(nb); g.eta > DefaultGain(d) {
		return fmt.Errorf("gdrl: parameter eta=%v is above the stability bound 1/(2d) = %v of graph %s (degree d = %d here) (GDRL §III-A eq. (15), from §II-A Theorem 1): leave eta unset to use the bound", g.eta, DefaultGain(d), g.graph, d)
	}
	return nil
}

// readTimers reads and checks idle, retransmit, refresh, max_probe_gap,
// max_keys, noise_band and evidence (after readExchange: the defaults follow the
// interval).
func (g *GDRL) readTimers(v *strategy.Values, cfg strategy.Config) error {
	g.idle = v.Duration("idle")
	g.retransmit = v.DurationOr("retransmit", max(g.interval, 4*cfg.LatencyHint))
	if g.retransmit <= 0 {
		return fmt.Errorf("gdrl: parameter retransmit must be positive")
	}
	g.refresh = v.DurationOr("refresh", 50*g.interval)
	if g.refresh <= 0 {
		return fmt.Errorf("gdrl: parameter refresh must be positive")
	}
	gap := v.DurationOr("max_probe_gap", 512*g.interval)
	if gap < g.interval {
		return fmt.Errorf("gdrl: parameter max_probe_gap=%v: want at least the interval %v", gap, g.interval)
	}
	g.maxGap = int(min(gap/g.interval, 1<<20))
	g.maxKeys = v.Int("max_keys")
	if g.maxKeys < 1 {
		return fmt.Errorf("gdrl: parameter max_keys=%d: want at least 1", g.maxKeys)
	}
	g.noiseBand = v.Float("noise_band")
	if !(g.noiseBand >= 0 && g.noiseBand <= 100) {
		return fmt.Errorf("gdrl: parameter noise_band=%v: want a number of standard errors in [0, 100]", g.noiseBand)
	}
	g.evidence = v.Float("evidence")
	if !(g.evidence >= 0 && g.evidence <= 100) {
		return fmt.Errorf("gdrl: parameter evidence=%v: want a number of standard errors in [0, 100]", g.evidence)
	}
	return nil
}

// readCapacity sets the rule's rate and burst in units, the bucket's unit
// and the demand floor. Errors: a rate or burst above the supported.
func (g *GDRL) readCapacity(cfg strategy.Config) error {
	var err error
	if g.totalC, err = RateUnits(cfg.Rate); err != nil {
		return err
	}
	if cfg.Burst > maxTotalUnits/UnitsPerToken {
		return fmt.Errorf("gdrl: burst %d tokens is above the supported %d", cfg.Burst, int64(maxTotalUnits/UnitsPerToken))
	}
	g.totalB = cfg.Burst * UnitsPerToken
	// The bucket counts in units of g.unit micro-tokens, the finest power of
	// ten at which the whole burst fits the bucket's tick arithmetic.
	g.unit = 1
	for g.totalB/g.unit > (math.MaxInt64/2)/int64(time.Second) {
		g.unit *= 10
	}
	g.perToken = UnitsPerToken / g.unit
	g.demandFloor = math.Max(1, float64(g.totalC)/(1000*float64(len(cfg.Members))))
	return nil
}

// initState sets the view from cfg's members and makes the empty tables.
func (g *GDRL) initState(cfg strategy.Config) {
	g.members = slices.Clone(cfg.Members)
	g.conserve = cfg.Partition == strategy.PartitionConserve
	g.expected = slices.Sorted(slices.Values(cfg.Members))
	slices.Sort(g.members)
	g.peers = map[strategy.NodeID]*peerInfo{}
	g.helloTo = map[strategy.NodeID]bool{}
	g.exBuddies = map[strategy.NodeID]bool{}
	g.helloAcked = map[strategy.NodeID]bool{}
	g.shares = map[string]*share{}
	g.seen = map[string]time.Duration{}
	g.changed = map[string]uint64{}
	g.mem = memory{}
	g.applied = filters{}
	g.seqTo = map[srcKey]uint64{}
	g.held = map[strategy.NodeID]*heldRecord{}
	g.fencesApplied = map[fenceKey]bool{}
	g.proxiesDone = map[proxyKey]bool{}
	g.fenceCredits = map[fenceKey]map[TransferID]bool{}
	g.fenceReported = map[TransferID]bool{}
}

var _ strategy.Strategy = (*GDRL)(nil)

// RateUnits converts a rate into capacity units (micro-tokens per second),
// rounding down; 0 for a non-positive rate. Errors above about 7.2e10
// tokens/s (the bound that keeps sums of shares far from int64 overflow).
func RateUnits(r bucket.Rate) (int64, error) {
	if r.Tokens <= 0 || r.Per <= 0 {
		return 0, nil
	}
	hi, lo := bits.Mul64(uint64(r.Tokens), uint64(UnitsPerToken)*uint64(time.Second))
	if hi >= uint64(r.Per) {
		return 0, fmt.Errorf("gdrl: rate %v is above the supported %d tokens/s", r, int64(maxTotalUnits/UnitsPerToken))
	}
	q, _ := bits.Div64(hi, lo, uint64(r.Per))
	if q > maxTotalUnits {
		return 0, fmt.Errorf("gdrl: rate %v is above the supported %d tokens/s", r, int64(maxTotalUnits/UnitsPerToken))
	}
	return int64(q), nil
}

// ---- Public read-outs (for tests and the evaluator) ----

// TotalCapacity is the rule's rate C in units (micro-tokens per second).
func (g *GDRL) TotalCapacity() int64 { return g.totalC }

// TotalBurst is the rule's burst B in units (micro-tokens).
func (g *GDRL) TotalBurst() int64 { return g.totalB }

// CapacityShare returns this node's capacity share C_i of key, in units
// (micro-tokens per second). It may be negative after a partition heals (a
// debt, see the package documentation); the bucket then enforces zero.
func (g *GDRL) CapacityShare(key string) int64 {
	if sh := g.shares[key]; sh != nil {
		return sh.c
	}
	return g.dc
}

// BurstShare returns this node's burst share B_i of key, in units
// (micro-tokens).
func (g *GDRL) BurstShare(key string) int64 {
	if sh := g.shares[key]; sh != nil {
		return sh.b
	}
	return g.db
}

// DefaultShare returns the capacity and burst share this node holds of
// every key it holds no explicit share of, in units.
func (g *GDRL) DefaultShare() (capacity, burst int64) { return g.dc, g.db }

// InFlight returns the capacity and burst of key in this node's
// unacknowledged transfers, in units. Part of it may already be credited at
// the destination (its acknowledgement not yet back); Pending and Applied
// tell exactly.
func (g *GDRL) InFlight(key string) (capacity, burst int64) {
	for _, p := range g.Pending(key) {
		capacity += p.Capacity
		burst += p.Burst
	}
	return capacity, burst
}

// Pending is one unacknowledged transfer of one key in a node's outbox.
type Pending struct {
	ID       TransferID
	Capacity int64 // capacity share moved, micro-tokens per second
	Burst    int64 // burst share moved, micro-tokens
}

// Pending lists this node's unacknowledged transfers of key (its own and
// those it adopted from incarnations it inherited), in outbox order; nil
// when there are none. A leaver's hand-over moves its default share for
// every key it does not list: it counts for those keys too.
func (g *GDRL) Pending(key string) []Pending {
	var out []Pending
	for _, t := range g.outbox {
		if it, ok := t.itemFor(key); ok {
			out = append(out, Pending{ID: t.id, Capacity: it.c, Burst: it.b})
		}
	}
	return out
}

// Applied reports whether transfer id has been credited as far as this
// node knows: by this node as its destination or as the destination's heir,
// by another heir of the destination whose fence this node's tombstone
// absorbed (see heir.go), or by the destination (or by an heir of the
// destination) according to the record of it this node holds as its buddy
// (a dead node's credit is in its record before anyone hears of it:
// replication is write-ahead).
func (g *GDRL) Applied(id TransferID) bool {
	dst, dstInc := id.Dst, id.DstInc
	if dst == g.self && dstInc == g.inc {
		return g.applied.credited(id)
	}
	if rec := g.held[dst]; rec != nil && rec.inc == dstInc && rec.applied.credited(id) {
		return true
	}
	if applied, tombed := g.tombApplied(id); tombed {
		return applied
	}
	// A ward that inherited the destination (and may have gone since,
	// its record not yet inherited here): its tombstone is in its record.
	for _, w := range g.heldNodes() {
		for _, t := range g.held[w].tombs {
			if t.node == dst && t.inc == dstInc && t.applied.credited(id) {
				return true
			}
		}
	}
	return false
}

// tombApplied reports whether this node holds a tombstone of id's
// destination incarnation (tombed) and, if so, whether one of them credited
// id or names it as credited by another heir (applied).
func (g *GDRL) tombApplied(id TransferID) (applied, tombed bool) {
	for _, t := range g.tombs {
		if t.node == id.Dst && t.inc == id.DstInc {
			if t.applied.credited(id) || t.names(id) {
				return true, true
			}
			tombed = true
		}
	}
	return false, tombed
}

// Replicated reports whether this node's current buddy has acknowledged a
// record of it since it was chosen, so that a crash of this node now loses
// nothing (see Best buddy in the package documentation). False for a node
// with no buddy (alone in its view) or whose new buddy has not answered
// yet: a crash then loses this node's shares ("Limits"). For tests and
// diagnostics.
func (g *GDRL) Replicated() bool { return g.buddy != "" && g.acked > 0 }

// Incarnation returns this node's incarnation number (0 before Start): the
// start time in whole milliseconds in the high bits, 20 random bits below,
// so that a node's later incarnations are larger.
func (g *GDRL) Incarnation() uint64 { return g.inc }

// Buddy returns this node's best buddy, the node it replicates its share
// record to and that inherits its shares if it fails (001 §IV, 004 §3.2):
// its successor in NodeID order ("" when it is alone).
func (g *GDRL) Buddy() strategy.NodeID { return g.buddy }

// Neighbours returns this node's current neighbours in the communication
// graph, sorted (see the package-level Neighbours; nil before Start).
func (g *GDRL) Neighbours() []strategy.NodeID { return slices.Clone(g.neighbours) }

// Keys returns the keys this node holds an explicit share of, sorted.
func (g *GDRL) Keys() []string { return g.sortedKeys() }

// Demand returns this node's demand estimate lambda_i for key, in units
// (micro-tokens per second); 0 for a key it holds no explicit share of.
func (g *GDRL) Demand(key string) float64 {
	if sh := g.shares[key]; sh != nil {
		return sh.demand
	}
	return 0
}

// Indicator returns this node's performance indicator q_i for key: spare
// bandwidth lambda_i - C_i in units (micro-tokens per second, 001 eq.
// (14)), the fill ratio as -S_i/D_i, dimensionless (004 eq. (1); the
// demand floored, see the package documentation), or the measured discard
// rate or utilisation in [0, 1] or mean response time in seconds (001
// §I-A; 0 for a key it holds no explicit share of).
func (g *GDRL) Indicator(key string) float64 {
	if g.measuredIndicator() {
		return g.measured(g.shares[key])
	}
	return g.indicatorOf(g.CapacityShare(key), g.Demand(key))
}

// Gain returns the gain eta in use (dimensionless): the eta parameter, or
// DefaultGain of this node's number of neighbours (001 eq. (15)), and
// never above that bound: New refuses an eta above it, and a graph whose
// degree grew since (graph=full in a cluster that grew) caps it there, so
// that Theorem 1's condition for convergence keeps holding. Theorem 1
// (updates with every neighbour at once), not Theorem 2 (one pair at a
// time, eta < 1/2 for spare): a node here takes part in several
// exchanges per interval (its own probe and its neighbours' probes),
// each computed from indicators that do not see the others' moves. Ours:
// the paper fixes eta for a fixed graph.
func (g *GDRL) Gain() float64 {
	if g.eta > 0 {
		return min(g.eta, DefaultGain(len(g.neighbours)))
	}
	return DefaultGain(len(g.neighbours))
}

// DefaultGain returns the default gain eta, the stability bound 1/(2d) for
// a graph of degree d (001 eq. (15)); 1/2 for d < 1.
func DefaultGain(d int) float64 {
	if d < 1 {
		return 0.5
	}
	return 1 / (2 * float64(d))
}

// JFI returns Jain's fairness index (sum q)^2 / (N sum q^2) of the
// performance indicators q (001 eq. (16)): 1 when all are equal, down to 1/N.
// 1 for an empty or all-zero vector.
func JFI(q []float64) float64 {
	var s, s2 float64
	for _, x := range q {
		s += x
		s2 += x * x
	}
	if len(q) == 0 || s2 == 0 {
		return 1
	}
	return s * s / (float64(len(q)) * s2)
}

func (g *GDRL) sortedKeys() []string {
	keys := make([]string, 0, len(g.shares))
	for k := range g.shares {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (g *GDRL) inView(n strategy.NodeID) bool {
	_, ok := slices.BinarySearch(g.members, n)
	return ok
}

// gone reports whether n is to be treated as departed: out of the view
// and, under conserve, not expected either (a failed member within
// reconnect_timeout keeps its share and its transfers wait for it).
func (g *GDRL) gone(n strategy.NodeID) bool {
	if g.inView(n) {
		return false
	}
	if g.conserve {
		if _, ok := slices.BinarySearch(g.expected, n); ok {
			return false
		}
	}
	return true
}

// maxHoles bounds the holes a duplicate filter keeps per paying incarnation
// (the oldest go first; holes come from transfers settled by an heir while
// their destination was alive but taken for dead, a rare event).
const maxHoles = 64

// filter is a receiver's duplicate filter for one paying incarnation. A
// payer numbers its transfers to one destination incarnation 1, 2, ... and
// has at most one in flight, so every transfer up to seq is settled, and a
// number the receiver never saw (a hole) was settled by its heir.
type filter struct {
	seq   uint64
	holes []uint64 // sorted
}

type filters map[srcKey]*filter

// settled reports whether id is settled (here or elsewhere).
func (f filters) settled(id TransferID) bool {
	e := f[srcKey{id.Src, id.SrcInc}]
	return e != nil && id.Seq <= e.seq
}

// credited reports whether id was credited here.
func (f filters) credited(id TransferID) bool {
	e := f[srcKey{id.Src, id.SrcInc}]
	return e != nil && id.Seq <= e.seq && !slices.Contains(e.holes, id.Seq)
}

// accept records id as credited here, unless it is settled already.
func (f filters) accept(id TransferID) bool {
	if f.settled(id) {
		return false
	}
	e := f.entry(id)
	e.skip(id.Seq)
	e.seq = id.Seq
	return true
}

// settleElsewhere records id as settled but not credited here.
func (f filters) settleElsewhere(id TransferID) {
	e := f.entry(id)
	if id.Seq <= e.seq {
		return
	}
	e.skip(id.Seq)
	e.seq = id.Seq
	e.addHole(id.Seq)
}

func (f filters) entry(id TransferID) *filter {
	k := srcKey{id.Src, id.SrcInc}
	e := f[k]
	if e == nil {
		e = &filter{}
		f[k] = e
	}
	return e
}

// skip records the numbers between the last settled one and seq as holes.
func (e *filter) skip(seq uint64) {
	for s := max(e.seq+1, seq-min(seq, maxHoles)); s < seq; s++ {
		e.addHole(s)
	}
}

func (e *filter) addHole(s uint64) {
	if i, found := slices.BinarySearch(e.holes, s); !found {
		e.holes = slices.Insert(e.holes, i, s)
	}
	if len(e.holes) > maxHoles {
		e.holes = slices.Delete(e.holes, 0, len(e.holes)-maxHoles)
	}
}
