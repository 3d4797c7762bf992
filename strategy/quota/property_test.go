package quota

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// envoyBucket is a quota client's token bucket as Envoy keeps it (the
// facts in the package doc): a first assignment starts full, a changed one
// keeps the fill ratio, an identical one renews the TTL only, the TTL
// counts from receipt, and after it the client denies (DENY_ALL fallback,
// the setting under which the bound holds).
type envoyBucket struct {
	a       strategy.QuotaAssignment
	has     bool
	level   float64
	last    time.Duration
	expires time.Duration
	acct    bucketAcct // where the tokens went (loss_test.go)
}

func (e *envoyBucket) rate() float64 {
	return float64(e.a.TokensPerFill) / e.a.FillInterval.Seconds()
}

func (e *envoyBucket) advance(now time.Duration) {
	if e.has && now > e.last {
		if e.last < e.expires && now > e.expires {
			e.advance(e.expires) // the refill after the TTL is counted apart
		}
		in := e.rate() * (now - e.last).Seconds()
		if e.last >= e.expires {
			e.acct.expired += in // refilled after its TTL: unusable
		} else {
			e.acct.refill += in
			level := math.Min(float64(e.a.MaxTokens), e.level+in)
			e.acct.overflow += e.level + in - level
			e.level = level
		}
	}
	e.last = max(e.last, now)
}

func (e *envoyBucket) apply(now time.Duration, a strategy.QuotaAssignment) {
	e.advance(now)
	if a.DenyAll() {
		// a blanket rule: any token bucket dropped (the next one starts full)
		if e.has {
			e.acct.dropped += e.level
		}
		e.a, e.has = a, false
		return
	}
	before := e.level
	switch {
	case !e.has || now >= e.expires:
		if e.has {
			e.acct.dropped += e.level
		}
		e.level = float64(a.MaxTokens) // first (or after expiry): full
		e.acct.firstFill += e.level
		before = e.level
	case a.Same(e.a):
	default:
		if e.a.MaxTokens > 0 {
			e.level = e.level / float64(e.a.MaxTokens) * float64(a.MaxTokens)
		} else {
			e.level = float64(a.MaxTokens)
		}
	}
	if d := e.level - before; d > 0 {
		e.acct.ratioGain += d
	} else {
		e.acct.ratioLoss -= d
	}
	e.a, e.has, e.expires = a, true, now+a.TTL
}

func (e *envoyBucket) allow(now time.Duration) bool {
	e.advance(now)
	if !e.has || now >= e.expires || e.level < 1 {
		if e.has && now >= e.expires && e.level > 0 {
			e.acct.dropped += e.level // expired: its level is never used
			e.level = 0
		}
		return false
	}
	e.level--
	return true
}

// event is one step of the test world: a message delivery, an assignment
// reaching its client, a wake-up, a request.
type event struct {
	at   time.Duration
	seq  int
	kind int // 0 deliver, 1 assignment applied, 2 tick, 3 client request, 4 plain request, 5 crash, 6 view, 7 restart
	from strategy.NodeID
	to   strategy.NodeID
	data []byte
	as   strategy.QuotaAssignment
	c    int
	// kind 5 of the key's owner (to ""): when it restarts
	restartAt time.Duration
}

type queue []event

func (q queue) Len() int { return len(q) }
func (q queue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q queue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *queue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// fataler is rapid.T or testing.T.
type fataler interface{ Fatalf(string, ...any) }

type world struct {
	t       fataler
	ids     []strategy.NodeID
	nodes   map[strategy.NodeID]*Quota
	q       queue
	seq     int
	rng     *rand.Rand
	hop     time.Duration // peer latency
	push    time.Duration // stream latency to the client
	clients []*client
	// admissions, in time order of decision
	admitted   []time.Duration
	reqID      uint64
	waiting    map[uint64]time.Duration // forwarded plain requests: arrival
	down       map[strategy.NodeID]bool
	cfg        strategy.Config // for a restart (Self and Members set then)
	nextClient strategy.QuotaClient
	// changeMax > 0: at a report, a client's offered rate changes to a random one up to it, one time in four
	changeMax int
	// takeovers adopted, over the nodes' lives (tally)
	adoptedReplicas, adoptedHandovers int
	froze                             int                     // allocations made frozen (Quota.frozeTakeovers)
	crashed                           []crashed               // the crashes, in time order
	statesLost                        int                     // crashes that took the last node holding the key's state (stateAnywhere)
	sample                            func(now time.Duration) // after every event (loss_test.go)
	// holders maps every (node, client) a client had to its index in
	// clients; takeovers are the shares the nodes let a client id's claim
	// take over (clientid.go), collected after every event
	holders   map[holderID]envoyProc
	takeovers []takeover
}

// envoyProc is one Envoy process: a client's index and its restarts
// before (one bucket cache).
type envoyProc struct{ client, gen int }

// wrongTakeovers is what the takeovers of shares by a client id's claim
// may add beyond b + r*T (the package doc, # Client ids): for each one by
// another Envoy process than the share's holder (two clients with one id,
// or an Envoy restarted with its predecessor's), the share's burst twice
// (the taker's bucket may start full, the holder's may still hold it) and
// its rate until the holder's assignment has surely expired (ttl +
// apply_lag); and how many there were.
func (w *world) wrongTakeovers(q *Quota) (tokens float64, n int) {
	for _, t := range w.takeovers {
		if w.holders[t.from] != w.holders[t.to] {
			n++
			tokens += 2*float64(t.burst) + float64(t.units)/q.sh.fill.Seconds()*(q.ttl+q.applyLag).Seconds()
		}
	}
	return tokens, n
}

// collectTakeovers checks (checkTakeovers) and keeps the takeovers node
// self made.
func (w *world) collectTakeovers(now time.Duration, self strategy.NodeID) {
	if n := w.nodes[self]; n != nil && len(n.takeovers) > 0 {
		w.checkTakeovers(now, n.takeovers)
		w.takeovers = append(w.takeovers, n.takeovers...)
		n.takeovers = n.takeovers[:0]
	}
}

// checkTakeovers checks that a share taken over at now by its own Envoy
// (the same process) reaches it while the token bucket it holds is
// unexpired (the resend arrives a hop and a push later): Envoy then only
// renews it (or keeps its fill ratio), else it would start the resend
// full, unpaid.
func (w *world) checkTakeovers(now time.Duration, ts []takeover) {
	for _, t := range ts {
		p, ok := w.holders[t.to]
		if !ok || p != w.holders[t.from] {
			continue
		}
		c := w.clients[p.client]
		if arrive := now + w.hop + w.push; !c.b.has || c.b.expires <= arrive {
			w.t.Fatalf("at %v: client %d's share taken over (from %v to %v), its bucket (has %v) expires at %v, before the resend arrives at %v",
				now, p.client+1, t.from, t.to, c.b.has, c.b.expires, arrive)
		}
	}
}

// crashed is a node's crash, at a time.
type crashed struct {
	at time.Duration
	id strategy.NodeID
}

// lostAll counts the times all k of a key's holders may have lost its
// state together: k distinct nodes (all of them in a smaller cluster)
// crashed within window of the first, counted once per such group. A
// node's warm-up (warmup.go) cannot tell a key whose holders all forgot it
// from a key of a cluster that has just started: it starts such a key
// full.
func lostAll(cs []crashed, k, nodes int, window time.Duration) int {
	k = min(k, nodes)
	n := 0
	for i := 0; i < len(cs); {
		ids := map[strategy.NodeID]bool{}
		j := i
		for ; j < len(cs) && cs[j].at-cs[i].at <= window; j++ {
			ids[cs[j].id] = true
		}
		if k >= 2 && len(ids) >= k {
			n++
			i = j
			continue
		}
		i++
	}
	return n
}

// tally adds the live nodes' adoptions to the world's counts (a crashed
// node's are added at its restart).
func (w *world) tally() {
	for _, id := range w.ids {
		if !w.down[id] {
			w.adoptedReplicas += w.nodes[id].adoptedReplicas
			w.adoptedHandovers += w.nodes[id].adoptedHandovers
			w.froze += w.nodes[id].frozeTakeovers
			w.nodes[id].adoptedReplicas, w.nodes[id].adoptedHandovers, w.nodes[id].frozeTakeovers = 0, 0, 0
		}
	}
}

type client struct {
	node strategy.NodeID
	id   strategy.QuotaClient
	b    envoyBucket
	rate float64 // offered requests/s
	// counts since the last report
	allowed, denied int64
	total           int64 // admitted over the run
	lastReport      time.Duration
	reported        bool
	broken          bool          // its node crashed: a new stream at the next report
	abandoned       bool          // told to forget the key: reports again at its next request
	assignedAt      time.Duration // when it last applied a token bucket
	// cid is the client's own id (strategy.QuotaUsage.ID; "" none): sent
	// with every report. A client with an id keeps reporting time_elapsed
	// since its last report on a new stream, as Envoy does (its bucket
	// cache outlives the stream).
	cid string
	// restartAt > 0: its Envoy restarts then (its buckets and stream lost;
	// a new process with the same id, whose first report of the bucket has
	// time_elapsed 0)
	restartAt time.Duration
	gen       int // its Envoy's restarts so far (a new bucket cache each)
}

func (w *world) at(e event) {
	w.seq++
	e.seq = w.seq
	heap.Push(&w.q, e)
}

func (w *world) effects(now time.Duration, self strategy.NodeID, fx *strategy.Effects) {
	if n := w.nodes[self]; n != nil { // MemoryBytes' counts, kept as the state changed, against a recount
		if err := n.CheckMemory(); err != nil {
			w.t.Fatalf("at %v: %v", now, err)
		}
	}
	w.collectTakeovers(now, self)
	for _, m := range fx.Messages {
		w.at(event{at: now + w.hop, kind: 0, from: self, to: m.To, data: m.Payload})
	}
	for _, d := range fx.Decisions {
		if _, ok := w.waiting[d.RequestID]; ok {
			if d.Allowed {
				w.admitted = append(w.admitted, w.waiting[d.RequestID])
			}
			delete(w.waiting, d.RequestID)
		}
	}
	for _, at := range fx.Wakeups {
		w.at(event{at: max(at, now), kind: 2, to: self})
	}
	for _, a := range fx.Quotas {
		if a.TTL > 0 && !a.DenyAll() && (a.TokensPerFill < 1 || a.MaxTokens < 1) {
			w.t.Fatalf("%s at %v: assignment %+v: Envoy refuses tokens_per_fill 0, and max_tokens 0 admits nothing", self, now, a)
		}
		w.at(event{at: now + w.push, kind: 1, to: self, as: a})
	}
	quotas := slices.Clone(fx.Quotas)
	fx.Reset()
	// The node writes each assignment to its client's stream at once, and
	// confirms it (the RLQS server calls Delivered after the write), if
	// the client's stream is the live one there.
	for _, a := range quotas {
		for _, c := range w.clients {
			if c.node == self && c.id == a.Client && !c.broken && !w.down[self] {
				var dfx strategy.Effects
				w.nodes[self].Delivered(now, a, &dfx)
				w.effects(now, self, &dfx)
			}
		}
	}
}

// check is the conservation invariant at every owner: held units and burst
// are the shares' plus the pending releases', and the reserve's rate and
// burst are what they leave.
func (w *world) check(now time.Duration) {
	for _, id := range w.ids {
		n := w.nodes[id]
		for key, a := range n.allocs {
			var u, b int64
			for _, s := range a.shares {
				u += s.units
				b += s.burst
				if s.units < 0 || s.burst < 0 {
					w.t.Fatalf("%s %s: negative share %+v", id, key, *s)
				}
			}
			for _, r := range a.pending {
				u += r.units
				b += r.burst
			}
			if u != a.heldUnits || b != a.heldBurst {
				w.t.Fatalf("%s %s at %v: held %d units %d burst, shares and releases add up to %d, %d", id, key, now, a.heldUnits, a.heldBurst, u, b)
			}
			if a.heldUnits > n.sh.units || a.heldBurst > n.sh.burst {
				w.t.Fatalf("%s %s at %v: held %d units, %d burst above the key's %d, %d", id, key, now, a.heldUnits, a.heldBurst, n.sh.units, n.sh.burst)
			}
			if got := a.reserve.Burst(); got != n.sh.burst-a.heldBurst {
				w.t.Fatalf("%s %s at %v: reserve burst %d, want %d", id, key, now, got, n.sh.burst-a.heldBurst)
			}
		}
	}
}

// envelope is the largest excess of the admissions over b + r*T in any
// window (eval.EnvelopeViolation's one pass).
func envelope(at []time.Duration, r float64, b int64) float64 {
	slices.Sort(at)
	worst, minPre := 0.0, math.Inf(1)
	for i, t := range at {
		minPre = math.Min(minPre, float64(i)-r*t.Seconds())
		if v := float64(i+1) - r*t.Seconds() - minPre - float64(b); v > worst {
			worst = v
		}
	}
	return worst
}

// TestEnvelopeWithClients: clients attached to random nodes, offering
// random rates that change, reporting every interval, their assignments
// applied within apply_lag of their node's write (a hop and a push), plus
// requests checked at the nodes, nodes crashing and restarting (also
// faster than failure detection), streams breaking: the key's admissions
// stay within
// b + r*T in every window (Envoy's float refill: 1e-6), and the owner's
// units and burst are conserved after every event.
func TestEnvelopeWithClients(t *testing.T) { envelopeWithClients(t, false) }

// TestEnvelopeWithClientsRenewEvery: the same with renewals (and replicas)
// every 300 ms instead of ttl/2: more pinned shares a successor renews at
// once after a crash.
func TestEnvelopeWithClientsRenewEvery(t *testing.T) {
	envelopeWithClients(t, false, "renew_every=300ms")
}

// TestEnvelopeWithClientIDs: the same world, every client naming itself
// (strategy.QuotaUsage.ID) and reporting time_elapsed since its last report
// on a new stream, as Envoy does; in some runs two or three clients share
// an id (duplicated or forged), and some Envoys restart (a new process with
// its predecessor's id and no bucket). A new stream's claim takes over the
// share of its id when its node left the view (clientid.go). The bound:
// b + r*T exactly, plus, per takeover by another Envoy process than the
// share's holder (only possible with a shared id or a restart), twice the
// share's burst and its rate for ttl + apply_lag (world.wrongTakeovers);
// runs with unique ids and no restart allow nothing.
func TestEnvelopeWithClientIDs(t *testing.T) {
	envelopeWithClients(t, true, "ttl=4s", "renew_every=500ms")
}

// envelopeWithClients is TestEnvelopeWithClients with extra params for
// every node; ids gives the clients ids (TestEnvelopeWithClientIDs).
func envelopeWithClients(t *testing.T, ids bool, extra ...string) {
	var adoptions struct{ runs, replicas, handovers, froze, warmed, lost, lostOver int }
	var taken takenTally
	defer func() {
		taken.log(t)
		t.Logf("%d runs: %d takeovers from a crashed owner's replica, %d from a hand-over; %d allocations made frozen (by the replicas=1 runs too); %d keys started full after a warm-up (live nodes); %d runs in which all the key's holders crashed within ttl or the last node holding its state crashed (bound + b + r*(ttl + apply_lag) each; %d of them beyond b + r*T)",
			adoptions.runs, adoptions.replicas, adoptions.handovers, adoptions.froze, adoptions.warmed, adoptions.lost, adoptions.lostOver)
	}()
	rapid.Check(t, func(rt *rapid.T) {
		nNodes := rapid.IntRange(1, 4).Draw(rt, "nodes")
		ratePerSec := rapid.SampledFrom([]int64{1, 7, 100}).Draw(rt, "rate")
		burstTok := rapid.Int64Range(1, 60).Draw(rt, "burst")
		nClients := rapid.IntRange(1, 6).Draw(rt, "clients")
		report := rapid.SampledFrom([]time.Duration{time.Second, 5 * time.Second}).Draw(rt, "report")
		w := &world{t: rt, nodes: map[strategy.NodeID]*Quota{}, rng: rand.New(rand.NewPCG(rapid.Uint64().Draw(rt, "seed"), 1)),
			hop: time.Duration(rapid.IntRange(0, 200).Draw(rt, "hop_ms")) * time.Millisecond, waiting: map[uint64]time.Duration{}}
		w.push = time.Duration(rapid.IntRange(0, int(500*time.Millisecond-w.hop)/int(time.Millisecond)).Draw(rt, "push_ms")) * time.Millisecond
		for i := range nNodes {
			w.ids = append(w.ids, strategy.NodeID(fmt.Sprintf("n%d", i)))
		}
		w.down = map[strategy.NodeID]bool{}
		// replicas 1: every takeover freezes; 2, 3: successors adopt the
		// owner's replica (a crash) or hand-over (a restart, a view
		// change), replica_wait the longest peer hop
		replicas := rapid.IntRange(1, 3).Draw(rt, "replicas")
		params, err := strategy.ParseParams(append([]string{fmt.Sprintf("replicas=%d", replicas), "replica_wait=200ms"}, extra...))
		if err != nil {
			rt.Fatal(err)
		}
		w.cfg = strategy.Config{Rate: bucket.Rate{Tokens: ratePerSec, Per: time.Second}, Burst: burstTok, Rand: rand.New(rand.NewPCG(1, 2)), Params: params}
		for _, id := range w.ids {
			cfg := w.cfg
			cfg.Self, cfg.Members = id, w.ids
			q, err := New(cfg)
			if err != nil {
				rt.Fatal(err)
			}
			w.nodes[id] = q
			var fx strategy.Effects
			q.Start(0, &fx)
			w.effects(0, id, &fx)
		}
		const key = "tenant"
		const horizon = 40 * time.Second
		for i := range nClients {
			c := &client{node: w.ids[rapid.IntRange(0, nNodes-1).Draw(rt, fmt.Sprint("node", i))], id: strategy.QuotaClient(i + 1),
				rate: float64(rapid.IntRange(0, 3*int(ratePerSec)).Draw(rt, fmt.Sprint("rate", i)))}
			w.clients = append(w.clients, c)
			w.at(event{at: time.Duration(rapid.IntRange(0, 3000).Draw(rt, fmt.Sprint("start", i))) * time.Millisecond, kind: 3, c: i})
		}
		if ids {
			drawIDs(rt, w.clients)
		}
		w.nextClient = strategy.QuotaClient(nClients)
		for i := range rapid.IntRange(0, 3).Draw(rt, "crashes") {
			var id strategy.NodeID // "": the key's owner at the time (a takeover)
			if n := rapid.IntRange(0, nNodes).Draw(rt, fmt.Sprint("crash", i)); n < nNodes {
				id = w.ids[n]
			}
			at := time.Duration(rapid.IntRange(1000, 30000).Draw(rt, fmt.Sprint("crash_at", i))) * time.Millisecond
			restartAt := at + time.Duration(rapid.IntRange(0, 8000).Draw(rt, fmt.Sprint("down_for", i)))*time.Millisecond
			w.at(event{at: at, kind: 5, to: id, restartAt: restartAt})
			if id != "" {
				w.at(event{at: restartAt, kind: 7, to: id})
			}
		}
		plainRate := float64(rapid.IntRange(0, int(ratePerSec)).Draw(rt, "plain"))
		if plainRate > 0 {
			w.at(event{at: 0, kind: 4})
		}
		w.changeMax = 3 * int(ratePerSec)
		w.run(key, horizon, report, plainRate, func(format string, args ...any) { rt.Fatalf(format, args...) })
		// Exact, but for b + r*(ttl + apply_lag) per time all the key's
		// holders crashed within ttl of each other (lostAll), or a crash
		// took the last live node holding its state (statesLost): the warm-up
		// then starts the key full, as at a cluster's start, beside what
		// the old owner admitted before its death and its clients until
		// their assignments expire (two histories within b + r*T each,
		// overlapping by at most ttl + apply_lag).
		q0 := w.nodes[w.ids[0]]
		// or the crash of the last live node that held any state of the
		// key, whenever the others crashed (the warm-up asks, finds
		// nothing, starts it full)
		lost := max(lostAll(w.crashed, replicas, nNodes, q0.ttl), w.statesLost)
		allowed := float64(lost) * (float64(burstTok) + float64(ratePerSec)*(q0.ttl+q0.applyLag).Seconds())
		wrongTokens, wrong := w.wrongTakeovers(q0)
		if v := envelope(w.admitted, float64(ratePerSec), burstTok); v > 1e-6+allowed+wrongTokens {
			rt.Fatalf("%d admissions exceed b + r*T by %.6f tokens, %d lost states and %d takeovers by another Envoy allowing %.1f (rate %d/s, burst %d, %d clients, hop %v, push %v, replicas %d, %d replicas and %d hand-overs adopted)",
				len(w.admitted), v, lost, wrong, allowed+wrongTokens, ratePerSec, burstTok, nClients, w.hop, w.push, replicas, w.adoptedReplicas, w.adoptedHandovers)
		}
		taken.add(w, wrong, envelope(w.admitted, float64(ratePerSec), burstTok) > 1e-6+allowed)
		if lost > 0 {
			adoptions.lost++
			if envelope(w.admitted, float64(ratePerSec), burstTok) > 1e-6 {
				adoptions.lostOver++
			}
		}
		for _, id := range w.ids {
			adoptions.warmed += w.nodes[id].warmedFull
		}
		w.tally()
		adoptions.replicas += w.adoptedReplicas
		adoptions.handovers += w.adoptedHandovers
		adoptions.froze += w.froze
		adoptions.runs++
	})
}

// takenTally counts, over runs, the shares taken over by their own Envoy
// (right) and by another Envoy process (wrong), and the runs with wrong
// ones beyond the bound without them (wrongOver).
type takenTally struct{ runs, right, wrong, wrongOver int }

// log logs the tally of runs that made takeovers (none without ids).
func (t *takenTally) log(tb testing.TB) {
	if t.right+t.wrong > 0 {
		tb.Logf("client ids: %d runs; %d shares taken over by their own Envoy on a new stream, %d by another Envoy process with the same id (%d runs with them beyond b + r*T)",
			t.runs, t.right, t.wrong, t.wrongOver)
	}
}

func (t *takenTally) add(w *world, wrong int, over bool) {
	t.runs++
	t.wrong += wrong
	t.right += len(w.takeovers) - wrong
	if wrong > 0 && over {
		t.wrongOver++
	}
}

// drawIDs gives every client an id: its own, or in some runs one of
// fewer ids (shared: duplicated or forged), and makes some Envoys restart
// (a new process with the same id).
func drawIDs(rt *rapid.T, clients []*client) {
	distinct := len(clients)
	if rapid.Bool().Draw(rt, "shared_ids") {
		distinct = rapid.IntRange(1, len(clients)).Draw(rt, "distinct_ids")
	}
	for i, c := range clients {
		c.cid = fmt.Sprintf("envoy-%d", i%distinct)
		if rapid.IntRange(0, 3).Draw(rt, fmt.Sprint("envoy_restart", i)) == 0 {
			c.restartAt = time.Duration(rapid.IntRange(1000, 30000).Draw(rt, fmt.Sprint("envoy_restart_at", i))) * time.Millisecond
		}
	}
}

// run drives the world until horizon: clients report every report
// interval, plain requests arrive at plainRate per second at random nodes.
func (w *world) run(key string, horizon, report time.Duration, plainRate float64, fail func(string, ...any)) {
	for w.q.Len() > 0 {
		e := heap.Pop(&w.q).(event)
		if e.at > horizon {
			heap.Push(&w.q, e) // for a run that continues
			break
		}
		now := e.at
		var fx strategy.Effects
		switch e.kind {
		case 0:
			if w.down[e.to] {
				break // lost with the crashed node
			}
			if err := w.nodes[e.to].Receive(now, e.from, e.data, &fx); err != nil {
				fail("%s from %s: %v", e.to, e.from, err)
			}
			w.effects(now, e.to, &fx)
		case 1:
			for _, c := range w.clients {
				if c.node == e.to && c.id == e.as.Client {
					if e.as.Abandon {
						// Envoy forgets the bucket: its next request
						// creates it again, with a first report
						c.b.has, c.abandoned = false, true
						continue
					}
					c.b.apply(now, e.as)
					if !e.as.DenyAll() {
						c.assignedAt = now
					}
				}
			}
		case 2:
			if w.down[e.to] {
				break
			}
			w.nodes[e.to].Tick(now, &fx)
			w.effects(now, e.to, &fx)
		case 5:
			if e.to == "" {
				e.to = rendezvous.Owner(key, w.live())
				w.at(event{at: e.restartAt, kind: 7, to: e.to})
			}
			held := w.stateAnywhere(key, now)
			w.crash(now, e.to)
			if held && !w.stateAnywhere(key, now) && w.nodes[w.ids[0]].replicas >= 2 {
				w.statesLost++
			}
		case 6:
			if !w.down[e.to] {
				// the failure detector converges on the truth: the view is
				// the live nodes as of its delivery
				w.nodes[e.to].SetMembers(now, w.live(), &fx)
				w.effects(now, e.to, &fx)
			}
		case 7:
			w.restart(now, e.to, fail)
		case 3:
			c := w.clients[e.c]
			if !w.restream(now, e.c, report) {
				break
			}
			if c.abandoned && c.rate > 0 {
				c.abandoned, c.reported, c.allowed, c.denied = false, false, 0, 0
			}
			if !c.abandoned && (!c.reported || now-c.lastReport >= report) {
				u := strategy.QuotaUsage{Client: c.id, Key: key, Allowed: c.allowed, Denied: c.denied, ID: c.cid}
				if c.reported {
					u.Elapsed = now - c.lastReport
				}
				if err := w.nodes[c.node].Usage(now, u, &fx); err != nil {
					fail("%v", err)
				}
				w.effects(now, c.node, &fx)
				c.reported, c.lastReport, c.allowed, c.denied = true, now, 0, 0
				if w.changeMax > 0 && w.rng.IntN(4) == 0 { // demand changes
					c.rate = float64(w.rng.IntN(w.changeMax + 1))
				}
			}
			if c.rate > 0 {
				if c.b.allow(now) {
					c.allowed++
					c.total++
					w.admitted = append(w.admitted, now)
				} else {
					c.denied++
				}
			}
			gap := time.Duration(w.rng.ExpFloat64() / math.Max(c.rate, 0.5) * float64(time.Second))
			w.at(event{at: now + max(gap, time.Millisecond), kind: 3, c: e.c})
		case 4:
			live := w.live()
			node := live[w.rng.IntN(len(live))] // a crashed node takes no request
			w.reqID++
			d, ok := w.nodes[node].Request(now, strategy.Request{ID: w.reqID, Key: key, Tokens: 1, Arrival: now}, &fx)
			if ok {
				if d.Allowed {
					w.admitted = append(w.admitted, now)
				}
			} else {
				w.waiting[w.reqID] = now
			}
			w.effects(now, node, &fx)
			gap := time.Duration(w.rng.ExpFloat64() / plainRate * float64(time.Second))
			w.at(event{at: now + max(gap, time.Millisecond), kind: 4})
		}
		w.check(now)
		if w.sample != nil {
			w.sample(now)
		}
	}
}

// restream opens client i's new stream when its old one broke (at its
// next report: Envoy opens a new one, to another node, a new client there;
// its buckets stay) or its Envoy restarts (a new process with the same id
// and no bucket: its stream ends, and its first report of the bucket has
// time_elapsed 0), and records which Envoy process holds the client's
// (node, client). false: no node is up.
func (w *world) restream(now time.Duration, i int, report time.Duration) bool {
	c := w.clients[i]
	live := w.live()
	if len(live) == 0 {
		return false
	}
	if (w.down[c.node] || c.broken) && (!c.reported || now-c.lastReport >= report) {
		w.nextClient++
		c.node, c.id, c.broken = live[w.rng.IntN(len(live))], w.nextClient, false
		c.reported = c.reported && c.cid != "" // Envoy reports time_elapsed since its last report (the world's clients without an id: 0)
	}
	if c.restartAt > 0 && now >= c.restartAt {
		if !w.down[c.node] && !c.broken {
			var fx strategy.Effects
			w.nodes[c.node].Detach(now, c.id, "", &fx)
			w.effects(now, c.node, &fx)
		}
		c.gen++
		w.nextClient++
		c.node, c.id, c.broken, c.reported, c.restartAt = live[w.rng.IntN(len(live))], w.nextClient, false, false, 0
		c.b, c.allowed, c.denied = envoyBucket{}, 0, 0
	}
	if w.holders == nil {
		w.holders = map[holderID]envoyProc{}
	}
	w.holders[holderID{node: c.node, client: c.id}] = envoyProc{i, c.gen}
	return true
}

// stateAnywhere reports whether a live node holds something of key that
// makes it answer a warm-up query "some" (Quota.onStateQuery): an
// allocation, a replica, a warm-up of its own, or a mark of state dropped
// lately. When a crash takes the last of these, the key's next owner
// starts it full (the package doc's "Not covered" case; with replicas 1
// there is no warm-up: the next owner freezes the key).
func (w *world) stateAnywhere(key string, now time.Duration) bool {
	for _, id := range w.live() {
		n := w.nodes[id]
		if n.allocs[key] != nil || n.records[key] != nil || n.warming[key] != nil || n.goneLately(key, now) {
			return true
		}
	}
	return false
}

// live is the nodes up, sorted.
func (w *world) live() []strategy.NodeID {
	var out []strategy.NodeID
	for _, id := range w.ids {
		if !w.down[id] {
			out = append(out, id)
		}
	}
	return out
}

// views schedules, at every live node, a view of the live nodes within
// 900 ms (the failure detector's delay; quota's takeover assumes <= 1 s).
func (w *world) views(now time.Duration) {
	live := w.live()
	for _, id := range live {
		w.at(event{at: now + time.Duration(w.rng.IntN(900))*time.Millisecond, kind: 6, to: id})
	}
}

// crash loses node id's state and messages to it.
func (w *world) crash(now time.Duration, id strategy.NodeID) {
	if w.down[id] || len(w.live()) < 2 {
		return
	}
	w.down[id] = true
	w.crashed = append(w.crashed, crashed{at: now, id: id})
	for _, c := range w.clients {
		if c.node == id {
			c.broken = true
		}
	}
	w.views(now)
}

// restart starts node id again, empty, at now.
func (w *world) restart(now time.Duration, id strategy.NodeID, fail func(string, ...any)) {
	if !w.down[id] {
		return
	}
	w.down[id] = false
	w.adoptedReplicas += w.nodes[id].adoptedReplicas
	w.adoptedHandovers += w.nodes[id].adoptedHandovers
	w.froze += w.nodes[id].frozeTakeovers
	cfg := w.cfg
	cfg.Self, cfg.Members = id, w.live()
	q, err := New(cfg)
	if err != nil {
		fail("%v", err)
	}
	w.nodes[id] = q
	var fx strategy.Effects
	q.Start(now, &fx)
	w.effects(now, id, &fx)
	w.views(now)
}
