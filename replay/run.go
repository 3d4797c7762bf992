package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/eval"
	"github.com/tokenmesh/tokenmesh/workload"
)

// Defaults of Options.
const (
	DefaultSenders   = 64
	DefaultTimeout   = 5 * time.Second
	DefaultLateAfter = 50 * time.Millisecond
	DefaultLead      = 100 * time.Millisecond
)

// ErrNoLiveNode is the error of requests that arrive when every node has
// been killed.
var ErrNoLiveNode = errors.New("replay: no live node")

// Options is one replay of one strategy.
type Options struct {
	Trace    *workload.Trace // requests to send; not empty
	Strategy string          // the name of the row in the report
	// Rate and Burst are the limit on the trace timeline (central's); the
	// target's rule must have ScaledRate(Rate, Speed) and Burst.
	Rate  bucket.Rate
	Burst int64
	Speed float64 // > 0; 2 replays twice as fast as the trace
	// AssignPolicy and Seed choose the node of each request
	// (workload.NewAssigner), over the live nodes, as the simulator does.
	AssignPolicy string
	Seed         uint64
	// Events are faults at trace times; they need a Target that implements
	// FaultInjector. Events after the last request are not applied.
	Events []Event
	// Central is central's decisions on Trace (eval.Central); nil: computed.
	Central []bool
	// Senders is the number of concurrent requests (default DefaultSenders).
	Senders int
	// Timeout bounds one Check (default DefaultTimeout).
	Timeout time.Duration
	// LateAfter: a request sent more than this after its due time counts
	// as late (default DefaultLateAfter).
	LateAfter time.Duration
	// Lead is the wall time between Run's start and the first request
	// (default DefaultLead).
	Lead time.Duration
	// SampleEvery is the wall interval of state samples (StateSampler);
	// default one second of trace time (as the simulator), at least 250 ms.
	SampleEvery time.Duration
	// EdgeTimes sends each request's due time with it as the time it
	// reached the edge (tokenmesh.v1 CheckItem.created_at_unix_ns), so that
	// a strategy that orders requests by arrival (owner) orders them as the
	// trace does, whatever the client-to-node path does to their order;
	// as the simulator, which stamps every request at its trace time.
	EdgeTimes bool
	// Progress, if set, is told how many requests were dispatched so far.
	Progress func(done, total int)
}

// Outcome is what happened to one request.
type Outcome struct {
	Node     int           // the node it was sent to; -1 if none was alive
	Sent     bool          // false: no live node, or the replay was cancelled
	Allowed  bool          // the decision (false on error)
	Err      error         // the Check's error, ErrNoLiveNode, or nil
	Lateness time.Duration // send time minus due time (wall)
	Latency  time.Duration // client-measured Check time (wall)
}

// Result is one strategy's replay.
type Result struct {
	Row      eval.Result // the report's row, central's metrics and costs
	Outcomes []Outcome   // by request index
	Wall     time.Duration
	// Late counts requests sent more than LateAfter after their due time;
	// MaxLateness is the largest lateness.
	Late        int
	MaxLateness time.Duration
	Errors      int    // requests without a decision (Check errors, no live node)
	FirstError  string // the first of them, for the report
	// Canonicalized counts the decisions moved between identical requests
	// (same key, arrival and tokens) before scoring (see canonicalize).
	Canonicalized int
	// BytesError is why Row.Messages and Row.Bytes could not be read (they
	// are 0 then); "" when they were.
	BytesError string
	// Applied are the events applied, in order (EventNames names them).
	Applied []Event
	// EventTimes[i] is the wall time Applied[i] was applied (for a restart,
	// when the new process was started: it serves a few seconds later).
	EventTimes []time.Time

	allowed []bool // decisions as scored (false for undecided)
}

// Run replays opts.Trace against t and scores the decisions against
// central's. Errors: bad options (events out of range or on a target
// without FaultInjector), a failed fault injection (it stops the replay) and
// ctx's end. A failure to read the traffic counters is reported in
// Result.BytesError. A request whose Check fails is not an error of Run:
// it is counted as undecided (and so rejected), like the simulator's
// undecided requests.
//
// Its phases: newRunner checks the options, start launches the senders
// and the state sampler, dispatch sends the requests and applies the
// events at their times, finish waits for the senders, restarts and
// sampler, and result scores the decisions.
func Run(ctx context.Context, opts Options, t Target) (*Result, error) {
	r, err := newRunner(ctx, opts, t)
	if err != nil {
		return nil, err
	}
	r.start()
	wall, err := r.finish(r.dispatch())
	if err != nil {
		return nil, err
	}
	return r.result(wall), nil
}

// runner is the state of one Run.
type runner struct {
	ctx       context.Context
	opts      Options
	t         Target
	faults    FaultInjector // nil: the target cannot inject faults
	restarter Restarter     // nil: the target cannot restart a node
	n         int           // the target's nodes
	assign    workload.Assigner
	events    []Event // opts.Events by time
	reqs      []workload.Request
	central   []bool
	senders   int
	timeout   time.Duration
	lateAfter time.Duration
	lead      time.Duration

	out  []Outcome
	jobs chan job
	// inflight[node] counts the requests handed to the senders for node and
	// not answered yet: a kill waits for them (see kill).
	inflight    []atomic.Int64
	sendersDone sync.WaitGroup

	state        stateStats
	stopSampling chan struct{}
	sampled      chan struct{}

	alive         []int // the nodes requests go to, in order
	base          time.Duration
	origin        time.Time
	appliedAt     []time.Time
	appliedEvents []Event
	crashed       []string
	// Restarts run in their own goroutines (a process takes wall seconds to
	// come up and join); a node is sent requests again once its Restart
	// returned. pending[node] is closed when it has.
	restartDone chan restarted
	pending     map[int]chan struct{}
	restarts    sync.WaitGroup
}

// job is one request handed to the senders: its index and due time.
type job struct {
	i   int
	due time.Time
}

// restarted is the end of one node's Restart.
type restarted struct {
	node int
	err  error
}

// stateStats sums the samples of the strategy state's size.
type stateStats struct {
	mu      sync.Mutex
	peak    int64
	sum     float64
	samples int
}

// newRunner checks opts against t (the options' own errors, then the
// events', then central's decisions) and returns the runner of one Run.
func newRunner(ctx context.Context, opts Options, t Target) (*runner, error) {
	if err := checkOptions(opts); err != nil {
		return nil, err
	}
	n := t.Nodes()
	if n < 1 {
		return nil, fmt.Errorf("replay: target has %d nodes", n)
	}
	assign, err := workload.NewAssigner(opts.AssignPolicy, opts.Seed)
	if err != nil {
		return nil, err
	}
	events := slices.Clone(opts.Events)
	slices.SortStableFunc(events, func(a, b Event) int { return cmp.Compare(a.At, b.At) })
	faults, _ := t.(FaultInjector)
	restarter, _ := t.(Restarter)
	if err := checkEvents(events, n, faults != nil, restarter != nil); err != nil {
		return nil, err
	}
	central, err := centralOf(opts)
	if err != nil {
		return nil, err
	}
	return &runner{
		ctx: ctx, opts: opts, t: t, faults: faults, restarter: restarter, n: n, assign: assign,
		events: events, reqs: opts.Trace.Requests, central: central,
		senders:   cmpOr(opts.Senders, DefaultSenders),
		timeout:   cmpOr(opts.Timeout, DefaultTimeout),
		lateAfter: cmpOr(opts.LateAfter, DefaultLateAfter),
		lead:      cmpOr(opts.Lead, DefaultLead),
	}, nil
}

// checkOptions checks the trace and the speed of opts.
func checkOptions(opts Options) error {
	if opts.Trace == nil || len(opts.Trace.Requests) == 0 {
		return errors.New("replay: no requests")
	}
	if math.IsNaN(opts.Speed) || math.IsInf(opts.Speed, 0) || opts.Speed <= 0 {
		return fmt.Errorf("replay: speed %v: want a positive number", opts.Speed)
	}
	return nil
}

// centralOf is opts.Central, or central's decisions computed on opts.Trace,
// checked to have one decision per request.
func centralOf(opts Options) ([]bool, error) {
	reqs := opts.Trace.Requests
	central := opts.Central
	if central == nil {
		var err error
		if central, err = eval.Central(opts.Trace, opts.Rate, opts.Burst); err != nil {
			return nil, err
		}
	}
	if len(central) != len(reqs) {
		return nil, fmt.Errorf("replay: %d central decisions for %d requests", len(central), len(reqs))
	}
	return central, nil
}

// start allocates the outcomes, starts the senders and the state sampler
// and sets the origin of the replay's wall timeline.
func (r *runner) start() {
	n := r.n
	r.out = make([]Outcome, len(r.reqs))
	for i := range r.out {
		r.out[i].Node = -1
	}
	r.jobs = make(chan job, 4*r.senders)
	r.inflight = make([]atomic.Int64, n)
	for range r.senders {
		r.sendersDone.Add(1)
		go r.sendLoop()
	}
	r.stopSampling = make(chan struct{})
	r.sampled = make(chan struct{})
	go r.sampleLoop()

	r.alive = make([]int, n)
	for i := range r.alive {
		r.alive[i] = i
	}
	r.base = r.reqs[0].Arrival
	r.origin = time.Now().Add(r.lead)
	r.restartDone = make(chan restarted, len(r.events))
	r.pending = map[int]chan struct{}{}
}

// sendLoop is one sender: it sends the jobs' requests until jobs closes.
func (r *runner) sendLoop() {
	defer r.sendersDone.Done()
	for j := range r.jobs {
		r.check(j)
	}
}

// check sends job j's request to its node and records its outcome.
func (r *runner) check(j job) {
	o := &r.out[j.i]
	start := time.Now()
	o.Sent, o.Lateness = true, start.Sub(j.due)
	cctx, cancel := context.WithTimeout(r.ctx, r.timeout)
	var created time.Time
	if r.opts.EdgeTimes {
		created = j.due
	}
	o.Allowed, o.Err = r.t.Check(cctx, o.Node, r.reqs[j.i].Key, r.reqs[j.i].Tokens, created)
	cancel()
	o.Latency = time.Since(start)
	r.inflight[o.Node].Add(-1)
	if o.Err != nil {
		o.Allowed = false
	}
}

// sampleLoop samples the state's size every SampleEvery, and once more
// when stopSampling closes; it closes sampled when done. It returns at
// once if the target is no StateSampler.
func (r *runner) sampleLoop() {
	defer close(r.sampled)
	if _, ok := r.t.(StateSampler); !ok {
		return
	}
	every := r.opts.SampleEvery
	if every <= 0 {
		every = max(time.Duration(float64(time.Second)/r.opts.Speed), 250*time.Millisecond)
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			r.sample()
		case <-r.stopSampling:
			r.sample()
			return
		}
	}
}

// sample adds one sample of the live nodes' state sizes, if the target
// reports them.
func (r *runner) sample() {
	sampler, ok := r.t.(StateSampler)
	if !ok {
		return
	}
	sctx, cancel := context.WithTimeout(r.ctx, time.Second)
	sizes, err := sampler.StateBytes(sctx)
	cancel()
	if err != nil || len(sizes) == 0 {
		return
	}
	s := &r.state
	s.mu.Lock()
	defer s.mu.Unlock()
	var sum int64
	for _, b := range sizes {
		sum += b
		s.peak = max(s.peak, b)
	}
	s.sum += float64(sum) / float64(len(sizes))
	s.samples++
}

// dueAt is the wall time of trace time at.
func (r *runner) dueAt(at time.Duration) time.Time {
	return r.origin.Add(time.Duration(float64(max(at-r.base, 0)) / r.opts.Speed))
}

// dispatch sends every request at its due time, after applying the events
// due at or before its arrival; it stops at the first error.
func (r *runner) dispatch() error {
	ei := 0
	for i := range r.reqs {
		for ; ei < len(r.events) && r.events[ei].At <= r.reqs[i].Arrival; ei++ {
			if err := r.apply(r.events[ei]); err != nil {
				return err
			}
		}
		if err := r.send(i); err != nil {
			return err
		}
		if r.opts.Progress != nil {
			r.opts.Progress(i+1, len(r.reqs))
		}
	}
	return nil
}

// send waits for request i's due time and hands it to the senders for the
// node the assigner picks among the live ones (ErrNoLiveNode if none).
func (r *runner) send(i int) error {
	due := r.dueAt(r.reqs[i].Arrival)
	if err := sleepUntil(r.ctx, due); err != nil {
		return err
	}
	if err := r.drain(); err != nil {
		return err
	}
	if len(r.alive) == 0 {
		r.out[i].Err = ErrNoLiveNode
		return nil
	}
	node := r.alive[r.assign.Assign(&r.reqs[i], i, len(r.alive))]
	r.out[i].Node = node
	r.inflight[node].Add(1)
	select {
	case r.jobs <- job{i, due}:
		return nil
	case <-r.ctx.Done():
		r.inflight[node].Add(-1)
		r.out[i].Node = -1
		return r.ctx.Err()
	}
}

// collect takes a node whose restart returned back among the live ones.
func (r *runner) collect(x restarted) error {
	if x.err != nil {
		return fmt.Errorf("replay: restart %d: %w", x.node, x.err)
	}
	r.alive = append(r.alive, x.node)
	slices.Sort(r.alive)
	return nil
}

// drain collects the restarts that have returned.
func (r *runner) drain() error {
	for {
		select {
		case x := <-r.restartDone:
			if err := r.collect(x); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

// apply waits for event e's due time and applies it.
func (r *runner) apply(e Event) error {
	if err := sleepUntil(r.ctx, r.dueAt(e.At)); err != nil {
		return err
	}
	var err error
	switch e.Kind {
	case Kill:
		if err := r.awaitRestart(e.Node); err != nil {
			return err
		}
		err = r.kill(e.Node)
	case Restart:
		r.restart(e.Node)
	case Partition:
		err = r.faults.Partition(e.Groups...)
	case Heal:
		err = r.faults.Heal()
	}
	if err != nil {
		return fmt.Errorf("replay: %v: %w", e, err)
	}
	r.appliedAt = append(r.appliedAt, time.Now())
	r.appliedEvents = append(r.appliedEvents, e)
	return nil
}

// awaitRestart waits, if node's restart is still under way, for it to
// finish, and collects the restarts that have returned.
func (r *runner) awaitRestart(node int) error {
	ch, ok := r.pending[node]
	if !ok {
		return nil
	}
	<-ch
	return r.drain()
}

// kill takes node out of the live ones and kills it.
func (r *runner) kill(node int) error {
	// The requests due before the kill and sent to this node are
	// answered before it (at most timeout): on a loaded machine the
	// senders lag, and a request still queued would otherwise meet a
	// dead node it reached, on the trace's timeline, while it lived.
	for wait := time.Now().Add(r.timeout); r.inflight[node].Load() > 0 && time.Now().Before(wait); {
		time.Sleep(time.Millisecond)
	}
	r.alive = slices.DeleteFunc(r.alive, func(x int) bool { return x == node })
	r.crashed = append(r.crashed, strconv.Itoa(node))
	return r.faults.Kill(node)
}

// restart starts node again in a goroutine of its own; drain takes it back
// among the live nodes once its Restart returned.
func (r *runner) restart(node int) {
	ch := make(chan struct{})
	r.pending[node] = ch
	r.restarts.Add(1)
	go func() {
		defer r.restarts.Done()
		err := r.restarter.Restart(node)
		r.restartDone <- restarted{node, err}
		close(ch)
	}()
}

// finish stops the senders, waits for them, the restarts and the sampler,
// and returns the replay's wall time and runErr, or else the first failed
// restart.
func (r *runner) finish(runErr error) (time.Duration, error) {
	close(r.jobs)
	r.sendersDone.Wait()
	wall := time.Since(r.origin)
	r.restarts.Wait()
	close(r.restartDone)
	for x := range r.restartDone {
		if x.err != nil && runErr == nil {
			runErr = fmt.Errorf("replay: restart %d: %w", x.node, x.err)
		}
	}
	close(r.stopSampling)
	<-r.sampled
	return wall, runErr
}

// result scores the outcomes against central's decisions.
func (r *runner) result(wall time.Duration) *Result {
	res := &Result{Outcomes: r.out, Wall: wall, Applied: r.appliedEvents, EventTimes: r.appliedAt}
	allowed, lat := r.tally(res)
	res.Canonicalized = eval.Canonicalize(r.reqs, allowed)
	res.Row = eval.Score(r.opts.Strategy, r.reqs, allowed, r.central, r.opts.Rate.PerSec(), r.opts.Burst, lat)
	// A client cannot see which decisions a node took without a peer:
	// local % is not measured (the reports print n/a, not 0).
	res.Row.NotMeasured = []string{"local_decision_pct"}
	r.readBytes(res)
	res.Row.Undecided = res.Errors
	if s := &r.state; s.samples > 0 {
		res.Row.StateBytesPeak = int(s.peak)
		res.Row.StateBytesMean = math.Round(s.sum/float64(s.samples)*10) / 10
	} else {
		res.Row.NotMeasured = append(res.Row.NotMeasured, "state_bytes_peak")
	}
	res.Row.CrashedNodes = r.crashed
	res.allowed = allowed
	return res
}

// tally counts the late sends and the errors into res and returns the
// decisions as scored (false for undecided) and the decided requests'
// latencies.
func (r *runner) tally(res *Result) ([]bool, []time.Duration) {
	allowed := make([]bool, len(r.reqs))
	lat := make([]time.Duration, 0, len(r.reqs))
	for i := range r.out {
		o := &r.out[i]
		if o.Sent {
			if o.Lateness > r.lateAfter {
				res.Late++
			}
			res.MaxLateness = max(res.MaxLateness, o.Lateness)
		}
		if o.Err != nil || !o.Sent {
			res.Errors++
			if res.FirstError == "" && o.Err != nil {
				res.FirstError = o.Err.Error()
			}
			continue
		}
		allowed[i] = o.Allowed
		lat = append(lat, o.Latency)
	}
	return allowed, lat
}

// readBytes reads the peer traffic counters into res.Row, or, when they
// cannot be read, says why in res.BytesError and marks them not measured.
func (r *runner) readBytes(res *Result) {
	msgs, bytes, err := r.t.Bytes(r.ctx)
	if err != nil {
		res.BytesError = err.Error()
		res.Row.NotMeasured = append(res.Row.NotMeasured, "messages", "bytes", "bytes_per_request")
		return
	}
	res.Row.Messages, res.Row.Bytes = msgs, bytes
	res.Row.BytesPerRequest = math.Round(float64(bytes)/float64(len(r.reqs))*10) / 10
}

// EventNames is Applied as text (Event.String, e.g. "kill 1@1.2s"); nil
// when no event was applied.
func (r *Result) EventNames() []string {
	var out []string
	for _, e := range r.Applied {
		out = append(out, e.String())
	}
	return out
}

// Allowed is request i's decision as scored: after canonicalize, false
// for an undecided request.
func (r *Result) Allowed(i int) bool { return r.allowed[i] }

func cmpOr[T int | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// spinFor is how long before a request's due time the dispatcher stops
// sleeping and spins: a Go timer on an idle process wakes up through the
// poller, late by up to about a millisecond (measured: sends p50 0.43 ms,
// p90 1.0 ms late on an idle machine with sleeps alone), which at --speed
// 10 is 4-10 ms of trace and reorders the requests of one key sent to
// different nodes (owner's false rejections, docs/REPLAY.md). The spin
// costs the replaying process up to one core while requests fall due less
// than spinFor apart, nothing between sparse ones.
const spinFor = 2 * time.Millisecond

// sleepUntil waits until t or ctx's end (then its error): it sleeps until
// spinFor before t, then yields the processor in a loop until t.
func sleepUntil(ctx context.Context, t time.Time) error {
	if d := time.Until(t) - spinFor; d > 0 {
		timer := time.NewTimer(d)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		}
	}
	for time.Now().Before(t) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		runtime.Gosched()
	}
	return ctx.Err()
}
