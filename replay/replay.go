// Package replay replays a trace against a running cluster, in wall time,
// and compares its decisions with central's on the same requests: the live
// counterpart of package eval (which replays through the simulator).
//
// Request i of the trace is sent at origin + (arrival_i - arrival_0)/speed
// by a scheduler goroutine that hands it to a pool of senders, so slow
// answers do not delay later sends. It goes to the node the assigner picks
// (workload.NewAssigner, as in the simulator) among the nodes still alive.
//
// Time scaling: at speed S the cluster's rule must have rate r*S tokens per
// wall second and burst b (ScaledRate). Then a key's bucket refills r*S
// tokens per wall second for requests 1/S apart in wall time as they are in
// trace time, which is r per trace second: the cluster's decisions are
// comparable with central computed on the trace timeline with (r, b).
//
// Decisions are scored with eval's metrics against eval.Central, after
// putting the decisions of identical requests (same key, arrival and
// tokens), which reach the cluster in any order, in trace order.
package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/eval"
	"github.com/tokenmesh/tokenmesh/limiter"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/workload"
)

// Target is the cluster a replay runs against.
type Target interface {
	// Nodes is the number of nodes, indexed from 0.
	Nodes() int
	// Check asks node for hits tokens of key under the replayed rule. It is
	// called from several goroutines at once.
	Check(ctx context.Context, node int, key string, hits int64) (allowed bool, err error)
	// Bytes returns the peer messages and payload bytes sent so far for the
	// replayed rule, summed over the nodes (killed ones included, with the
	// counts they had when killed).
	Bytes(ctx context.Context) (msgs, bytes int64, err error)
}

// Faults is implemented by targets that can inject failures; a replay with
// Events needs it.
type Faults interface {
	Kill(node int) error             // stop node at once (SIGKILL)
	Partition(groups ...[]int) error // cut the data plane between groups
	Heal() error                     // undo Partition
}

// Restarter is implemented by targets that can bring a killed node back; a
// replay with Restart events needs it. Restart starts node again and
// returns once it serves checks (or with the reason it cannot); Run calls it
// from its own goroutine, so requests keep going out on time meanwhile, and
// sends the node requests again only once it has returned.
type Restarter interface {
	Restart(node int) error
}

// StateSampler is implemented by targets that can report the size of the
// replayed rule's strategy state at each live node; Run samples it now and
// then for the report's state columns (0 without it).
type StateSampler interface {
	StateBytes(ctx context.Context) ([]int64, error) // one per live node
}

// EventKind says what an Event does.
type EventKind int

// Event kinds.
const (
	Kill EventKind = iota
	Partition
	Heal
	Restart // a killed node starts again (Restarter)
)

// Event is a fault injected at trace time At (compared with requests'
// arrivals: it happens before the requests that arrive at or after At).
type Event struct {
	At     time.Duration
	Kind   EventKind
	Node   int     // Kill, Restart
	Groups [][]int // Partition
}

func (e Event) String() string {
	switch e.Kind {
	case Kill:
		return fmt.Sprintf("kill %d@%v", e.Node, e.At)
	case Partition:
		gs := make([]string, len(e.Groups))
		for i, g := range e.Groups {
			ns := make([]string, len(g))
			for j, n := range g {
				ns[j] = strconv.Itoa(n)
			}
			gs[i] = strings.Join(ns, ",")
		}
		return fmt.Sprintf("partition %s@%v", strings.Join(gs, "|"), e.At)
	case Heal:
		return fmt.Sprintf("heal@%v", e.At)
	case Restart:
		return fmt.Sprintf("restart %d@%v", e.Node, e.At)
	}
	return fmt.Sprintf("event(%d)@%v", int(e.Kind), e.At)
}

// ParseKill parses "NODE@TIME" (e.g. "1@30s"): kill node index NODE at
// trace time TIME.
func ParseKill(s string) (Event, error) {
	node, at, ok := strings.Cut(s, "@")
	if !ok {
		return Event{}, fmt.Errorf("%q: want NODE@TIME, e.g. 1@30s", s)
	}
	n, err := strconv.Atoi(strings.TrimSpace(node))
	if err != nil || n < 0 {
		return Event{}, fmt.Errorf("%q: node %q is not a node index (0, 1, ...)", s, node)
	}
	t, err := parseTime(at)
	if err != nil {
		return Event{}, fmt.Errorf("%q: %v", s, err)
	}
	return Event{At: t, Kind: Kill, Node: n}, nil
}

// ParsePartition parses "0,1|2@TIME": from trace time TIME, nodes 0 and 1
// reach each other but not node 2. Nodes left out of every group form no
// group of their own (the target decides; localcluster isolates them).
func ParsePartition(s string) (Event, error) {
	spec, at, ok := strings.Cut(s, "@")
	if !ok {
		return Event{}, fmt.Errorf("%q: want GROUPS@TIME, e.g. 0,1|2@30s", s)
	}
	t, err := parseTime(at)
	if err != nil {
		return Event{}, fmt.Errorf("%q: %v", s, err)
	}
	var groups [][]int
	seen := map[int]bool{}
	for _, g := range strings.Split(spec, "|") {
		var group []int
		for _, f := range strings.Split(g, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 0 {
				return Event{}, fmt.Errorf("%q: %q is not a node index", s, f)
			}
			if seen[n] {
				return Event{}, fmt.Errorf("%q: node %d is in two groups", s, n)
			}
			seen[n] = true
			group = append(group, n)
		}
		groups = append(groups, group)
	}
	if len(groups) < 2 {
		return Event{}, fmt.Errorf("%q: a partition needs at least two groups separated by |", s)
	}
	return Event{At: t, Kind: Partition, Groups: groups}, nil
}

// ParseRestart parses "NODE@TIME" (e.g. "1@2m"): start node index NODE,
// killed before, again at trace time TIME.
func ParseRestart(s string) (Event, error) {
	e, err := ParseKill(s)
	e.Kind = Restart
	return e, err
}

// ParseHeal parses "TIME": heal the partition at trace time TIME.
func ParseHeal(s string) (Event, error) {
	t, err := parseTime(s)
	if err != nil {
		return Event{}, fmt.Errorf("%q: %v", s, err)
	}
	return Event{At: t, Kind: Heal}, nil
}

func parseTime(s string) (time.Duration, error) {
	t, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("time %q is not a duration such as 30s or 1m30s", s)
	}
	if t < 0 {
		return 0, fmt.Errorf("time %q is negative", s)
	}
	return t, nil
}

// ScaledRate is the rate, in tokens per wall second, the cluster's rule
// must have to replay a trace limited at r at the given speed: r*speed.
func ScaledRate(r bucket.Rate, speed float64) float64 { return r.PerSec() * speed }

// RuleRate is ScaledRate(r, speed) as a rate of the YAML config
// (config.ParseRate): exact, "N/DURATION", when r.Per/speed is a whole
// number of nanoseconds; otherwise tokens per second to 6 decimals.
func RuleRate(r bucket.Rate, speed float64) string {
	per := float64(r.Per) / speed
	if r.Tokens > 0 && per >= 1 && per == math.Trunc(per) && per < math.MaxInt64 {
		return fmt.Sprintf("%d/%s", r.Tokens, time.Duration(per))
	}
	return strconv.FormatFloat(ScaledRate(r, speed), 'f', 6, 64)
}

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
				o.Allowed, o.Err = t.Check(cctx, o.Node, reqs[j.i].Key, reqs[j.i].Tokens)
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
	res.Canonicalized = canonicalize(reqs, allowed)
	res.Row = eval.Score(opts.Strategy, reqs, allowed, central, opts.Rate.PerSec(), opts.Burst, lat)
	if msgs, bytes, err := t.Bytes(ctx); err != nil {
		res.BytesError = err.Error()
	} else {
		res.Row.Messages, res.Row.Bytes = msgs, bytes
	}
	res.Row.Undecided = res.Errors
	if stateSamples > 0 {
		res.Row.StateBytesPeak = int(statePeak)
		res.Row.StateBytesMean = math.Round(stateSum/float64(stateSamples)*10) / 10
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

// canonicalize reorders the decisions among identical requests (same key,
// arrival and tokens: the trace cannot tell them apart) so that the
// admitted ones come first in trace order, as central, which decides in
// trace order, admits them. Identical requests are sent at the same wall
// time by different senders and reach the cluster in any order; without
// this, a different order of the same decisions would count as one false
// rejection plus one excess admission that cancel out. It returns the
// number of decisions it moved.
func canonicalize(reqs []workload.Request, allowed []bool) int {
	type id struct {
		key    string
		tokens int64
	}
	moved := 0
	groups := map[id][]int{}
	for start := 0; start < len(reqs); {
		end := start
		for end < len(reqs) && reqs[end].Arrival == reqs[start].Arrival {
			end++
		}
		if end-start > 1 {
			clear(groups)
			for i := start; i < end; i++ {
				k := id{reqs[i].Key, reqs[i].Tokens}
				groups[k] = append(groups[k], i)
			}
			for _, idx := range groups {
				n := 0
				for _, i := range idx {
					if allowed[i] {
						n++
					}
				}
				for j, i := range idx {
					if want := j < n; allowed[i] != want {
						allowed[i] = want
						moved++
					}
				}
			}
		}
		start = end
	}
	return moved
}

func cmpOr[T int | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// sleepUntil waits until t or ctx's end (then its error).
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Live describes the replays of a report: the part of the setup the
// simulator's report has no field for.
type Live struct {
	Cluster     string    `json:"cluster"` // "processes" (localcluster) or "in-process"
	Nodes       int       `json:"nodes"`
	Speed       float64   `json:"speed"`
	DurationSec float64   `json:"duration_s,omitempty"` // the trace was cut to its first DurationSec; 0: whole
	RuleRatePS  float64   `json:"rule_rate_per_s"`      // the served rule's rate, per wall second
	LateAfterMs float64   `json:"late_after_ms"`
	Runs        []RunInfo `json:"runs"`
}

// RunInfo is one strategy's replay facts.
type RunInfo struct {
	Strategy      string  `json:"strategy"`
	WallSec       float64 `json:"wall_s"`
	LateSends     int     `json:"late_sends"`
	MaxLatenessMs float64 `json:"max_lateness_ms"`
	Errors        int     `json:"errors"`
	FirstError    string  `json:"first_error,omitempty"`
	BytesError    string  `json:"bytes_error,omitempty"`
	// Canonicalized counts decisions moved between identical requests
	// (same key, arrival, tokens) before scoring: see Result.Canonicalized.
	Canonicalized int      `json:"canonicalized_decisions"`
	Events        []string `json:"events,omitempty"`
}

// Report is eval's report (the same JSON fields as `tokenmesh sim --json`)
// plus the live facts. eval.WriteTable(&r.Report) and friends print it; the
// facts are summarised in Setup.Scenario for them.
type Report struct {
	eval.Report
	Live Live `json:"live"`
}

// NewReport builds the report of runs (one per strategy, in order) over
// trace: central's row first, computed from central (eval.Central), then
// one row per run. setup is copied as is but for Latency, Loss and
// Scenario, which describe the live replay.
func NewReport(trace *workload.Trace, setup eval.Setup, live Live, central []bool, runs []*Result) *Report {
	reqs := trace.Requests
	rep := &Report{Live: live}
	rep.Input = eval.Input{Name: trace.Name, Requests: len(reqs), Keys: trace.Keys(), SpanSec: trace.Span().Seconds(), Skipped: trace.Skipped}
	rep.Series = eval.NewSeries(trace)
	rep.Results = append(rep.Results, eval.Score("central", reqs, central, central, setup.RatePerSec, setup.Burst, nil))
	rep.Series.Add("central", reqs, central)
	var notes []string
	for _, r := range runs {
		rep.Results = append(rep.Results, r.Row)
		rep.Series.Add(r.Row.Strategy, reqs, r.allowed)
		info := RunInfo{Strategy: r.Row.Strategy, WallSec: round3(r.Wall.Seconds()), LateSends: r.Late,
			MaxLatenessMs: round3(float64(r.MaxLateness) / float64(time.Millisecond)), Errors: r.Errors,
			FirstError: r.FirstError, BytesError: r.BytesError, Canonicalized: r.Canonicalized, Events: r.EventNames()}
		rep.Live.Runs = append(rep.Live.Runs, info)
		note := fmt.Sprintf("%s: wall %.1f s, %d late sends", info.Strategy, info.WallSec, info.LateSends)
		if r.Errors > 0 {
			note += fmt.Sprintf(", %d errors", r.Errors)
		}
		if len(r.Applied) > 0 {
			note += ", " + strings.Join(info.Events, ", ")
		}
		if r.BytesError != "" {
			note += ", bytes unknown"
		}
		notes = append(notes, note)
	}
	setup.Latency, setup.Loss, setup.Duplicate, setup.Reorder = "live", 0, 0, 0
	cut := ""
	if live.DurationSec > 0 {
		cut = fmt.Sprintf(", first %g s of the trace", live.DurationSec)
	}
	setup.Scenario = fmt.Sprintf("live %s cluster of %d nodes at speed %gx%s (central simulated); %s",
		live.Cluster, live.Nodes, live.Speed, cut, strings.Join(notes, "; "))
	rep.Setup = setup
	return rep
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// InProcess is a Target of limiter nodes inside this process, on an
// in-memory network: the real strategy code without processes (tests).
// Kill closes a node and tells the others at once (perfect failure
// detection); Partition is not supported.
type InProcess struct {
	rule  string
	nodes []*limiter.Node

	mu     sync.Mutex
	killed []bool
}

// StartInProcess starts n nodes "n0".."n<n-1>" sharing one rule named rule
// with rate ratePerSec tokens per (wall) second, burst, strategy and its
// params ("name=value", unprefixed).
func StartInProcess(ctx context.Context, n int, rule string, ratePerSec float64, burst int64, strat string, params []string) (*InProcess, error) {
	if n < 1 {
		return nil, fmt.Errorf("replay: %d nodes", n)
	}
	net := cluster.NewMemNetwork()
	members := make([]string, n)
	for i := range members {
		members[i] = "n" + strconv.Itoa(i)
	}
	epoch := time.Now()
	p := &InProcess{rule: rule, killed: make([]bool, n)}
	for i := range n {
		node, err := limiter.Start(ctx, limiter.Config{
			Name:      members[i],
			Rules:     []limiter.RuleConfig{{Name: rule, RatePerSec: ratePerSec, Burst: burst, Strategy: strat, Params: params}},
			InProcess: &limiter.InProcess{Network: net, Members: members},
			Epoch:     epoch,
			Seed:      uint64(i + 1),
		})
		if err != nil {
			_ = p.Close()
			return nil, err
		}
		p.nodes = append(p.nodes, node)
	}
	return p, nil
}

// Nodes implements Target.
func (p *InProcess) Nodes() int { return len(p.nodes) }

// Check implements Target.
func (p *InProcess) Check(ctx context.Context, node int, key string, hits int64) (bool, error) {
	d, err := p.nodes[node].Cluster().Check(ctx, p.rule, key, hits)
	return d.Allowed, err
}

// Bytes implements Target: the nodes' sent counters of the rule.
func (p *InProcess) Bytes(context.Context) (msgs, bytes int64, err error) {
	for _, n := range p.nodes {
		st := n.Cluster().Stats().Rules[p.rule]
		msgs += st.MessagesSent
		bytes += st.BytesSent
	}
	return msgs, bytes, nil
}

// Kill implements Faults: node stops, and the others drop it from their
// members.
func (p *InProcess) Kill(node int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if node < 0 || node >= len(p.nodes) || p.killed[node] {
		return fmt.Errorf("replay: no live node %d", node)
	}
	p.killed[node] = true
	_ = p.nodes[node].Close()
	var live []strategy.NodeID
	for i, n := range p.nodes {
		if !p.killed[i] {
			live = append(live, n.Cluster().Self())
		}
	}
	for i, n := range p.nodes {
		if !p.killed[i] {
			if err := n.Cluster().SetMembers(live); err != nil {
				return err
			}
		}
	}
	return nil
}

// Partition implements Faults: not supported in process.
func (p *InProcess) Partition(...[]int) error {
	return errors.New("replay: partitions need a live cluster")
}

// Heal implements Faults: not supported in process.
func (p *InProcess) Heal() error { return errors.New("replay: partitions need a live cluster") }

// Close stops every node.
func (p *InProcess) Close() error {
	var errs []error
	for _, n := range p.nodes {
		errs = append(errs, n.Close())
	}
	return errors.Join(errs...)
}

// Cluster is what the live target needs of a running cluster of processes
// (localcluster.Cluster has these methods).
type Cluster interface {
	Kill(i int) error
	Restart(ctx context.Context, i int) error // start a killed node again; returns once it serves
	Partition(groups ...[]int) error
	Heal() error
	Metrics(ctx context.Context, i int) (string, error) // Prometheus text of node i's GET /metrics
}

// LiveTarget is a Target of node processes: checks over each node's gRPC
// API (tokenmesh.v1.RateLimitService/Check), traffic from their /metrics
// (tokenmesh_peer_messages_total and tokenmesh_peer_bytes_total of the rule,
// direction "sent", summed over the nodes; a killed node counts with the
// values read just before it was killed).
type LiveTarget struct {
	c       Cluster
	rule    string
	conns   []*grpc.ClientConn
	clients []tokenmeshv1.RateLimitServiceClient

	mu     sync.Mutex
	killed []bool
	msgs   []int64 // last read, per node (this life of the process)
	bytes  []int64
	// msgsBefore and bytesBefore are the counts of the node's earlier
	// lives (read just before each kill): a restarted process counts from 0.
	msgsBefore  []int64
	bytesBefore []int64
}

// RestartTimeout bounds LiveTarget.Restart: starting a process, joining
// the cluster and waiting until every node sees every member.
const RestartTimeout = time.Minute

// NewLiveTarget connects to the nodes' gRPC API addresses (grpcAddrs[i] is
// node i of c) for rule; opts are added to the dial options (e.g.
// localcluster.Cluster.DialOptions for nodes in network namespaces).
func NewLiveTarget(c Cluster, grpcAddrs []string, rule string, opts ...grpc.DialOption) (*LiveTarget, error) {
	n := len(grpcAddrs)
	l := &LiveTarget{c: c, rule: rule, killed: make([]bool, n), msgs: make([]int64, n), bytes: make([]int64, n),
		msgsBefore: make([]int64, n), bytesBefore: make([]int64, n)}
	for _, addr := range grpcAddrs {
		conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
		if err != nil {
			_ = l.Close()
			return nil, fmt.Errorf("replay: connecting to %s: %w", addr, err)
		}
		l.conns = append(l.conns, conn)
		l.clients = append(l.clients, tokenmeshv1.NewRateLimitServiceClient(conn))
	}
	return l, nil
}

// Warm connects to every node and checks it serves rule (ListRules), so
// that the first requests of a replay do not pay for connection set-up.
func (l *LiveTarget) Warm(ctx context.Context) error {
	for i, c := range l.clients {
		resp, err := c.ListRules(ctx, &tokenmeshv1.ListRulesRequest{})
		if err != nil {
			return fmt.Errorf("replay: node %d: %w", i, err)
		}
		found := false
		for _, r := range resp.GetRules() {
			found = found || r.GetName() == l.rule
		}
		if !found {
			return fmt.Errorf("replay: node %d does not serve rule %q", i, l.rule)
		}
	}
	return nil
}

// Close closes the connections (not the cluster).
func (l *LiveTarget) Close() error {
	var errs []error
	for _, c := range l.conns {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// Nodes implements Target.
func (l *LiveTarget) Nodes() int { return len(l.clients) }

// Check implements Target.
func (l *LiveTarget) Check(ctx context.Context, node int, key string, hits int64) (bool, error) {
	resp, err := l.clients[node].Check(ctx, &tokenmeshv1.CheckRequest{Checks: []*tokenmeshv1.CheckItem{{Rule: l.rule, Key: key, Hits: hits}}})
	if err != nil {
		return false, err
	}
	if len(resp.GetResults()) != 1 {
		return false, fmt.Errorf("replay: node %d answered %d results for 1 check", node, len(resp.GetResults()))
	}
	r := resp.GetResults()[0]
	if r.GetError() != "" {
		return false, fmt.Errorf("replay: node %d: %s", node, r.GetError())
	}
	return r.GetAllowed(), nil
}

// scrape reads node i's counters into the cache.
func (l *LiveTarget) scrape(ctx context.Context, i int) error {
	text, err := l.c.Metrics(ctx, i)
	if err != nil {
		return fmt.Errorf("node %d metrics: %w", i, err)
	}
	want := map[string]string{"rule": l.rule, "direction": "sent"}
	msgs, _ := SumCounter(text, "tokenmesh_peer_messages_total", want)
	bytes, _ := SumCounter(text, "tokenmesh_peer_bytes_total", want)
	l.msgs[i], l.bytes[i] = int64(msgs), int64(bytes)
	return nil
}

// Bytes implements Target.
func (l *LiveTarget) Bytes(ctx context.Context) (msgs, bytes int64, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for i := range l.clients {
		if !l.killed[i] {
			errs = append(errs, l.scrape(ctx, i))
		}
		msgs += l.msgsBefore[i] + l.msgs[i]
		bytes += l.bytesBefore[i] + l.bytes[i]
	}
	return msgs, bytes, errors.Join(errs...)
}

// StateBytes implements StateSampler: tokenmesh_state_bytes{rule} of
// every live node that answers.
func (l *LiveTarget) StateBytes(ctx context.Context) ([]int64, error) {
	l.mu.Lock()
	killed := slices.Clone(l.killed)
	l.mu.Unlock()
	var out []int64
	var errs []error
	for i := range l.clients {
		if killed[i] {
			continue
		}
		text, err := l.c.Metrics(ctx, i)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if v, ok := SumCounter(text, "tokenmesh_state_bytes", map[string]string{"rule": l.rule}); ok {
			out = append(out, int64(v))
		}
	}
	if len(out) == 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// Kill implements Faults: it reads the node's counters, then kills it.
func (l *LiveTarget) Kill(i int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = l.scrape(ctx, i) // best effort: the counters so far
	cancel()
	l.killed[i] = true
	l.msgsBefore[i] += l.msgs[i]
	l.bytesBefore[i] += l.bytes[i]
	l.msgs[i], l.bytes[i] = 0, 0
	return l.c.Kill(i)
}

// Restart implements Restarter: it starts killed node i again
// (Cluster.Restart, within RestartTimeout) and counts its traffic from
// then on, on top of what it sent before its kill. The gRPC connection to
// the node reconnects by itself (same address).
func (l *LiveTarget) Restart(i int) error {
	l.mu.Lock()
	if i < 0 || i >= len(l.killed) {
		l.mu.Unlock()
		return fmt.Errorf("replay: restart: no node %d", i)
	}
	if !l.killed[i] {
		l.mu.Unlock()
		return fmt.Errorf("replay: restart: node %d was not killed", i)
	}
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), RestartTimeout)
	defer cancel()
	if err := l.c.Restart(ctx, i); err != nil {
		return err
	}
	l.mu.Lock()
	l.killed[i] = false
	l.msgs[i], l.bytes[i] = 0, 0
	l.mu.Unlock()
	return nil
}

// Partition implements Faults.
func (l *LiveTarget) Partition(groups ...[]int) error { return l.c.Partition(groups...) }

// Heal implements Faults.
func (l *LiveTarget) Heal() error { return l.c.Heal() }

// SumCounter sums the samples of metric name (a counter, gauge or untyped
// family) in Prometheus text exposition format whose labels include every
// pair of want; found is false when no sample matched. The text is read
// with expfmt up to its first malformed line, if any.
func SumCounter(text, name string, want map[string]string) (sum float64, found bool) {
	var p expfmt.TextParser
	fams, _ := p.TextToMetricFamilies(strings.NewReader(text)) // the families before an error are kept
	mf, ok := fams[name]
	if !ok {
		return 0, false
	}
	for _, m := range mf.GetMetric() {
		labels := map[string]string{}
		for _, lp := range m.GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		match := true
		for k, w := range want {
			if labels[k] != w {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			sum += m.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			sum += m.GetGauge().GetValue()
		case dto.MetricType_UNTYPED:
			sum += m.GetUntyped().GetValue()
		default:
			continue
		}
		found = true
	}
	return sum, found
}
