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
	// Faults. Events after the last request are not applied.
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
// without Faults), a failed fault injection (it stops the replay) and
// ctx's end. A failure to read the traffic counters is reported in
// Result.BytesError. A request whose Check fails is not an error of Run:
// it is counted as undecided (and so rejected), like the simulator's
// undecided requests.
func Run(ctx context.Context, opts Options, t Target) (*Result, error) {
	if opts.Trace == nil || len(opts.Trace.Requests) == 0 {
		return nil, errors.New("replay: no requests")
	}
	if math.IsNaN(opts.Speed) || math.IsInf(opts.Speed, 0) || opts.Speed <= 0 {
		return nil, fmt.Errorf("replay: speed %v: want a positive number", opts.Speed)
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
	faults, _ := t.(Faults)
	restarter, _ := t.(Restarter)
	killed := map[int]bool{}
	for _, e := range events {
		if faults == nil {
			return nil, fmt.Errorf("replay: %v: the target cannot inject faults", e)
		}
		switch e.Kind {
		case Kill, Restart:
			if e.Node < 0 || e.Node >= n {
				return nil, fmt.Errorf("replay: %v: no node %d (nodes 0..%d)", e, e.Node, n-1)
			}
		}
		switch {
		case e.Kind == Kill && killed[e.Node]:
			return nil, fmt.Errorf("replay: %v: node %d is killed twice (without a restart between)", e, e.Node)
		case e.Kind == Kill:
			killed[e.Node] = true
		case e.Kind == Restart && restarter == nil:
			return nil, fmt.Errorf("replay: %v: the target cannot restart a node", e)
		case e.Kind == Restart && !killed[e.Node]:
			return nil, fmt.Errorf("replay: %v: node %d is not down at that time (restart only a killed node)", e, e.Node)
		case e.Kind == Restart:
			killed[e.Node] = false
		}
		for _, g := range e.Groups {
			for _, x := range g {
				if x < 0 || x >= n {
					return nil, fmt.Errorf("replay: %v: no node %d (nodes 0..%d)", e, x, n-1)
				}
			}
		}
	}
	reqs := opts.Trace.Requests
	central := opts.Central
	if central == nil {
		if central, err = eval.Central(opts.Trace, opts.Rate, opts.Burst); err != nil {
			return nil, err
		}
	}
	if len(central) != len(reqs) {
		return nil, fmt.Errorf("replay: %d central decisions for %d requests", len(central), len(reqs))
	}
	senders := cmpOr(opts.Senders, DefaultSenders)
	timeout := cmpOr(opts.Timeout, DefaultTimeout)
	lateAfter := cmpOr(opts.LateAfter, DefaultLateAfter)
	lead := cmpOr(opts.Lead, DefaultLead)

	type job struct {
		i   int
		due time.Time
	}
	out := make([]Outcome, len(reqs))
	for i := range out {
		out[i].Node = -1
	}
	jobs := make(chan job, 4*senders)
	// inflight[node] counts the requests handed to the senders for node and
	// not answered yet: a kill waits for them (see apply).
	inflight := make([]atomic.Int64, n)
	var wg sync.WaitGroup
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				o := &out[j.i]
				start := time.Now()
				o.Sent, o.Lateness = true, start.Sub(j.due)
				cctx, cancel := context.WithTimeout(ctx, timeout)
				var created time.Time
				if opts.EdgeTimes {
					created = j.due
				}
				o.Allowed, o.Err = t.Check(cctx, o.Node, reqs[j.i].Key, reqs[j.i].Tokens, created)
				cancel()
				o.Latency = time.Since(start)
				inflight[o.Node].Add(-1)
				if o.Err != nil {
					o.Allowed = false
				}
			}
		}()
	}

	var stateMu sync.Mutex
	var statePeak int64
	var stateSum float64
	var stateSamples int
	sample := func() {
		sampler, ok := t.(StateSampler)
		if !ok {
			return
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		sizes, err := sampler.StateBytes(sctx)
		cancel()
		if err != nil || len(sizes) == 0 {
			return
		}
		stateMu.Lock()
		defer stateMu.Unlock()
		var sum int64
		for _, b := range sizes {
			sum += b
			statePeak = max(statePeak, b)
		}
		stateSum += float64(sum) / float64(len(sizes))
		stateSamples++
	}
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		if _, ok := t.(StateSampler); !ok {
			return
		}
		every := opts.SampleEvery
		if every <= 0 {
			every = max(time.Duration(float64(time.Second)/opts.Speed), 250*time.Millisecond)
		}
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				sample()
			case <-stopSampling:
				sample()
				return
			}
		}
	}()

	alive := make([]int, n)
	for i := range alive {
		alive[i] = i
	}
	base := reqs[0].Arrival
	origin := time.Now().Add(lead)
	dueAt := func(at time.Duration) time.Time {
		return origin.Add(time.Duration(float64(max(at-base, 0)) / opts.Speed))
	}
	var runErr error
	var appliedAt []time.Time
	var appliedEvents []Event
	var crashed []string
	// Restarts run in their own goroutines (a process takes wall seconds to
	// come up and join); a node is sent requests again once its Restart
	// returned. pending[node] is closed when it has.
	type restarted struct {
		node int
		err  error
	}
	restartDone := make(chan restarted, len(events))
	pending := map[int]chan struct{}{}
	var restarts sync.WaitGroup
	collect := func(r restarted) error {
		if r.err != nil {
			return fmt.Errorf("replay: restart %d: %w", r.node, r.err)
		}
		alive = append(alive, r.node)
		slices.Sort(alive)
		return nil
	}
	drain := func() error { // the restarts that have returned
		for {
			select {
			case r := <-restartDone:
				if err := collect(r); err != nil {
					return err
				}
			default:
				return nil
			}
		}
	}
	apply := func(e Event) error {
		if err := sleepUntil(ctx, dueAt(e.At)); err != nil {
			return err
		}
		var err error
		switch e.Kind {
		case Kill:
			if ch, ok := pending[e.Node]; ok {
				<-ch // its restart is still under way: let it finish first
				if err := drain(); err != nil {
					return err
				}
			}
			// The requests due before the kill and sent to this node are
			// answered before it (at most timeout): on a loaded machine the
			// senders lag, and a request still queued would otherwise meet a
			// dead node it reached, on the trace's timeline, while it lived.
			for wait := time.Now().Add(timeout); inflight[e.Node].Load() > 0 && time.Now().Before(wait); {
				time.Sleep(time.Millisecond)
			}
			alive = slices.DeleteFunc(alive, func(x int) bool { return x == e.Node })
			crashed = append(crashed, strconv.Itoa(e.Node))
			err = faults.Kill(e.Node)
		case Restart:
			ch := make(chan struct{})
			pending[e.Node] = ch
			restarts.Add(1)
			go func(node int) {
				defer restarts.Done()
				err := restarter.Restart(node)
				restartDone <- restarted{node, err}
				close(ch)
			}(e.Node)
		case Partition:
			err = faults.Partition(e.Groups...)
		case Heal:
			err = faults.Heal()
		}
		if err != nil {
			return fmt.Errorf("replay: %v: %w", e, err)
		}
		appliedAt = append(appliedAt, time.Now())
		appliedEvents = append(appliedEvents, e)
		return nil
	}
	ei := 0
	for i := range reqs {
		for ; runErr == nil && ei < len(events) && events[ei].At <= reqs[i].Arrival; ei++ {
			runErr = apply(events[ei])
		}
		if runErr != nil {
			break
		}
		due := dueAt(reqs[i].Arrival)
		if runErr = sleepUntil(ctx, due); runErr != nil {
			break
		}
		if runErr = drain(); runErr != nil {
			break
		}
		if len(alive) == 0 {
			out[i].Err = ErrNoLiveNode
		} else {
			out[i].Node = alive[assign.Assign(&reqs[i], i, len(alive))]
			inflight[out[i].Node].Add(1)
			select {
			case jobs <- job{i, due}:
			case <-ctx.Done():
				runErr = ctx.Err()
			}
			if runErr != nil {
				inflight[out[i].Node].Add(-1)
				out[i].Node = -1
				break
			}
		}
		if opts.Progress != nil {
			opts.Progress(i+1, len(reqs))
		}
	}
	close(jobs)
	wg.Wait()
	wall := time.Since(origin)
	restarts.Wait()
	close(restartDone)
	for r := range restartDone {
		if r.err != nil && runErr == nil {
			runErr = fmt.Errorf("replay: restart %d: %w", r.node, r.err)
		}
	}
	close(stopSampling)
	<-sampled
	if runErr != nil {
		return nil, runErr
	}

	res := &Result{Outcomes: out, Wall: wall, Applied: appliedEvents, EventTimes: appliedAt}
	allowed := make([]bool, len(reqs))
	lat := make([]time.Duration, 0, len(reqs))
	for i := range out {
		o := &out[i]
		if o.Sent {
			if o.Lateness > lateAfter {
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
	res.Canonicalized = eval.Canonicalize(reqs, allowed)
	res.Row = eval.Score(opts.Strategy, reqs, allowed, central, opts.Rate.PerSec(), opts.Burst, lat)
	// A client cannot see which decisions a node took without a peer:
	// local % is not measured (the reports print n/a, not 0).
	res.Row.NotMeasured = []string{"local_decision_pct"}
	if msgs, bytes, err := t.Bytes(ctx); err != nil {
		res.BytesError = err.Error()
		res.Row.NotMeasured = append(res.Row.NotMeasured, "messages", "bytes", "bytes_per_request")
	} else {
		res.Row.Messages, res.Row.Bytes = msgs, bytes
		res.Row.BytesPerRequest = math.Round(float64(bytes)/float64(len(reqs))*10) / 10
	}
	res.Row.Undecided = res.Errors
	if stateSamples > 0 {
		res.Row.StateBytesPeak = int(statePeak)
		res.Row.StateBytesMean = math.Round(stateSum/float64(stateSamples)*10) / 10
	} else {
		res.Row.NotMeasured = append(res.Row.NotMeasured, "state_bytes_peak")
	}
	res.Row.CrashedNodes = crashed
	res.allowed = allowed
	return res, nil
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
