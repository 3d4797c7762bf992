package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"

	"github.com/tokenmesh/tokenmesh/bucket"
)

// FaultKind is one kind of fault the random nemesis draws.
type FaultKind string

// The fault kinds of the random nemesis. Each hits one node for the
// fault's window [Start, End).
const (
	// FaultPartition cuts the node from every other node, both ways, and
	// heals at End.
	FaultPartition FaultKind = "partition"
	// FaultOneWay loses the frames one way only: the node's frames to
	// the others (Inbound false) or the others' frames to it (Inbound
	// true); healed at End.
	FaultOneWay FaultKind = "oneway"
	// FaultFlap cuts the node from the others and heals it Flaps times,
	// each cut and each gap 0.3-1.5 s, inside the window.
	FaultFlap FaultKind = "flap"
	// FaultKill sends SIGKILL at Start and restarts the node (same name
	// and addresses) at End.
	FaultKill FaultKind = "kill"
	// FaultPause sends SIGSTOP at Start and SIGCONT at End.
	FaultPause FaultKind = "pause"
)

// FaultKinds are every kind the nemesis draws from, in a fixed order (the
// draw depends on it).
var FaultKinds = []FaultKind{FaultPartition, FaultOneWay, FaultFlap, FaultKill, FaultPause}

// Fault is one drawn fault.
type Fault struct {
	Kind       FaultKind
	Node       int
	Start, End time.Duration
	Inbound    bool               // FaultOneWay: the others' frames to Node are lost
	Cuts       [][2]time.Duration // FaultFlap: the cuts, [from, to) each
}

func (f Fault) String() string {
	w := fmt.Sprintf("[%v, %v) n%d %s", f.Start.Round(time.Millisecond), f.End.Round(time.Millisecond), f.Node, f.Kind)
	switch f.Kind {
	case FaultOneWay:
		if f.Inbound {
			return w + " (others -> n" + fmt.Sprint(f.Node) + " lost)"
		}
		return w + " (n" + fmt.Sprint(f.Node) + " -> others lost)"
	case FaultFlap:
		return fmt.Sprintf("%s (%d cuts)", w, len(f.Cuts))
	}
	return w
}

// Schedule is a random nemesis's plan for a run: faults one after the
// other (never overlapping), each followed by Settle and a quiet gap, and
// the quiet windows in which the envelope is checked exactly.
type Schedule struct {
	Seed     uint64
	Nodes    int
	Duration time.Duration // the load's length
	Settle   time.Duration
	Faults   []Fault
}

// ScheduleOptions bound what NewSchedule draws.
type ScheduleOptions struct {
	Kinds                []FaultKind   // nil: FaultKinds
	Warmup               time.Duration // before the first fault; 0: 5 s
	Settle               time.Duration // after each repair before checking; 0: 10 s
	MinFault, MaxFault   time.Duration // a fault's length; 0: 2 s and 12 s
	MinQuiet, MaxQuiet   time.Duration // checked quiet time after each settle; 0: 3 s and 10 s
	FlapMin, FlapMaxCuts int           // 0: 2 and 5 cuts
}

// NewSchedule draws a schedule for n nodes and a load of length d from
// seed: the same arguments give the same schedule. The kinds come in
// shuffled rounds (every len(Kinds) faults hold each kind once); the node,
// the lengths and the gaps are drawn uniformly.
func NewSchedule(seed uint64, n int, d time.Duration, o ScheduleOptions) (Schedule, error) {
	if n < 2 {
		return Schedule{}, fmt.Errorf("chaos: a random run needs at least 2 nodes, got %d", n)
	}
	o, err := o.withDefaults()
	if err != nil {
		return Schedule{}, err
	}
	dr := drawer{rand.New(rand.NewPCG(seed, 0x6e656d65736973))} // "nemesis"
	s := Schedule{Seed: seed, Nodes: n, Duration: d, Settle: o.Settle}
	t := o.Warmup
	var bag []FaultKind // a shuffled round of every kind: each len(kinds) faults draw each once
	for {
		if len(bag) == 0 {
			bag = slices.Clone(o.Kinds)
			dr.rng.Shuffle(len(bag), func(i, j int) { bag[i], bag[j] = bag[j], bag[i] })
		}
		f := Fault{Kind: bag[0], Node: dr.rng.IntN(n), Start: t}
		bag = bag[1:]
		length := dr.between(o.MinFault, o.MaxFault)
		if f.Kind == FaultFlap {
			f.Cuts = dr.flapCuts(t, o.FlapMin+dr.rng.IntN(o.FlapMaxCuts-o.FlapMin+1))
			length = f.Cuts[len(f.Cuts)-1][1] - t
		}
		f.Inbound = f.Kind == FaultOneWay && dr.rng.IntN(2) == 1
		f.End = t + length
		// The fault, its settle and the shortest quiet window must fit.
		if f.End+o.Settle+o.MinQuiet > d {
			break
		}
		s.Faults = append(s.Faults, f)
		t = f.End + o.Settle + dr.between(o.MinQuiet, o.MaxQuiet)
	}
	return s, nil
}

// withDefaults is o with its zero fields at their defaults (Kinds:
// FaultKinds) and FlapMaxCuts at least FlapMin. Errors: an unknown kind, a
// maximum below its minimum.
func (o ScheduleOptions) withDefaults() (ScheduleOptions, error) {
	if len(o.Kinds) == 0 {
		o.Kinds = FaultKinds
	}
	for _, k := range o.Kinds {
		if !slices.Contains(FaultKinds, k) {
			return o, fmt.Errorf("chaos: unknown fault kind %q (want %v)", k, FaultKinds)
		}
	}
	def := func(v *time.Duration, x time.Duration) {
		if *v <= 0 {
			*v = x
		}
	}
	def(&o.Warmup, 5*time.Second)
	def(&o.Settle, 10*time.Second)
	def(&o.MinFault, 2*time.Second)
	def(&o.MaxFault, 12*time.Second)
	def(&o.MinQuiet, 3*time.Second)
	def(&o.MaxQuiet, 10*time.Second)
	if o.FlapMin <= 0 {
		o.FlapMin = 2
	}
	if o.FlapMaxCuts < o.FlapMin {
		o.FlapMaxCuts = max(5, o.FlapMin)
	}
	if o.MaxFault < o.MinFault || o.MaxQuiet < o.MinQuiet {
		return o, errors.New("chaos: schedule: a maximum below its minimum")
	}
	return o, nil
}

// drawer draws a schedule's numbers from one seeded source, in the order
// NewSchedule asks for them (the same seed, the same schedule).
type drawer struct{ rng *rand.Rand }

// between is a duration drawn uniformly in [lo, hi], cut to 100 ms (lo
// when hi <= lo).
func (dr drawer) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(dr.rng.Int64N(int64(hi-lo)+1)).Truncate(100*time.Millisecond)
}

// flapCuts draws a flap's n cuts from at: each cut 0.3-1.5 s long, each
// followed by a heal of 0.3-1.5 s.
func (dr drawer) flapCuts(at time.Duration, n int) [][2]time.Duration {
	var cuts [][2]time.Duration
	for range n {
		on := dr.between(300*time.Millisecond, 1500*time.Millisecond)
		cuts = append(cuts, [2]time.Duration{at, at + on})
		at += on + dr.between(300*time.Millisecond, 1500*time.Millisecond)
	}
	return cuts
}

// Quiet is the windows checked against the envelope exactly: before the
// first fault, and from each repair plus Settle to the next fault's start
// (or the end of the load).
func (s Schedule) Quiet() [][2]time.Duration {
	var w [][2]time.Duration
	from := time.Duration(0)
	for _, f := range s.Faults {
		if f.Start > from {
			w = append(w, [2]time.Duration{from, f.Start})
		}
		from = f.End + s.Settle
	}
	if s.Duration > from {
		w = append(w, [2]time.Duration{from, s.Duration})
	}
	return w
}

// String is the schedule, one fault a line, and the quiet windows.
func (s Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, %d nodes, load %v, settle %v, %d faults:\n", s.Seed, s.Nodes, s.Duration, s.Settle, len(s.Faults))
	for _, f := range s.Faults {
		fmt.Fprintf(&b, "  %s\n", f)
	}
	var q []string
	var total time.Duration
	for _, w := range s.Quiet() {
		q = append(q, fmt.Sprintf("[%v, %v)", w[0], w[1]))
		total += w[1] - w[0]
	}
	fmt.Fprintf(&b, "  checked within b + r*T + slack (quiet, %v in all): %s\n", total, strings.Join(q, " "))
	return b.String()
}

// action is one thing the nemesis does at a time.
type action struct {
	at   time.Duration
	what string // "cut", "heal", "oneway-out", "oneway-in", "kill", "restart", "stop", "cont"
	node int
}

func (s Schedule) actions() []action {
	var as []action
	for _, f := range s.Faults {
		switch f.Kind {
		case FaultPartition:
			as = append(as, action{f.Start, "cut", f.Node}, action{f.End, "heal", f.Node})
		case FaultOneWay:
			w := "oneway-out"
			if f.Inbound {
				w = "oneway-in"
			}
			as = append(as, action{f.Start, w, f.Node}, action{f.End, "heal", f.Node})
		case FaultFlap:
			for _, c := range f.Cuts {
				as = append(as, action{c[0], "cut", f.Node}, action{c[1], "heal", f.Node})
			}
		case FaultKill:
			as = append(as, action{f.Start, "kill", f.Node}, action{f.End, "restart", f.Node})
		case FaultPause:
			as = append(as, action{f.Start, "stop", f.Node}, action{f.End, "cont", f.Node})
		}
	}
	sort.SliceStable(as, func(i, j int) bool { return as[i].at < as[j].at })
	return as
}

// Nemesis is a Cluster the random run can also cut one way and pause.
type Nemesis interface {
	Cluster
	// OneWay loses the peer frames from every node of from to every node
	// of to (the other direction flows); Heal removes it.
	OneWay(from, to []int) error
	// Pause stops node i's process (SIGSTOP); Resume continues it
	// (SIGCONT).
	Pause(i int) error
	Resume(i int) error
}

// ProcSample is one node's process metrics.
type ProcSample struct {
	RSS        float64 // process_resident_memory_bytes (NaN: not read)
	Goroutines float64 // go_goroutines (NaN: not read)
}

// RandomResult is a random run, checked.
type RandomResult struct {
	Schedule Schedule
	// Whole is the whole run checked against b + r*T (informational:
	// during a fault each strategy admits what its split-brain and crash
	// rules say); Quiet the quiet windows, per key the largest excess
	// over all of them, against b + r*T + slack.
	Whole Report
	Quiet Report
	// Central is what one exact token bucket per key would have admitted
	// on the same sends (every check, answered or not); Lost is, summed
	// over keys, how many tokens fewer than that the cluster admitted in
	// the quiet windows (0 when it admitted as many or more).
	Central, Lost int64
	// MaxLatency is the slowest answered check; Timeouts the checks that
	// failed with a deadline.
	MaxLatency time.Duration
	// Before is each node's process metrics after the start and before
	// the load; Warm under the load just before the first fault (its
	// connections and per-key state in place: the baseline of Grown);
	// After once the load stopped and Idle passed.
	Before, Warm, After []ProcSample
	Idle                time.Duration
	StepErrors          []error
	History             *History
}

// RandomOptions is a random run's load and checking.
type RandomOptions struct {
	Load   Load
	Env    Envelope
	Slack  float64       // tokens allowed over b + r*T in the quiet windows
	Idle   time.Duration // after the load, before the last process sample; 0: 10 s
	Output io.Writer     // progress lines (nil: none)
	Label  string        // prefix of progress lines
}

// RunRandom runs the load against c for s.Duration while the nemesis
// applies s's faults, then checks the history: the quiet windows against
// b + r*T + Slack per key, the whole run for information, and samples
// every node's RSS and goroutines before the load and Idle after it. A
// node paused when the run ends (an error or ctx) is continued before
// RunRandom returns.
func RunRandom(ctx context.Context, c Nemesis, s Schedule, o RandomOptions) (RandomResult, error) {
	res := RandomResult{Schedule: s, Idle: o.Idle, History: &History{}}
	if res.Idle <= 0 {
		res.Idle = 10 * time.Second
	}
	l, err := checkRandom(c, s, o)
	if err != nil {
		return res, err
	}
	r, err := newChaosRun(c, Scenario{Name: "random", Nodes: s.Nodes, Duration: s.Duration})
	if err != nil {
		return res, err
	}
	res.Before = sampleProcs(ctx, c, func(int) bool { return false })
	paused := make([]bool, s.Nodes)
	defer resumePaused(c, paused)
	r.start = time.Now()
	loadErr, stopLoad := r.startLoad(ctx, l, res.History)
	// On every return the load has stopped and its checks have ended.
	defer stopLoad()
	if err := sleep(ctx, time.Until(r.start.Add(s.warmAt()))); err != nil {
		return res, err
	}
	res.Warm = sampleProcs(ctx, c, r.isDown)
	if err := r.applyActions(ctx, s.actions(), paused, o, &res); err != nil {
		return res, err
	}
	if err := <-loadErr; err != nil && !errors.Is(err, context.Canceled) {
		return res, err
	}
	end := time.Since(r.start)
	o.say("%v load done; waiting %v to sample the processes idle", end.Round(100*time.Millisecond), res.Idle)
	if err := sleep(ctx, res.Idle); err != nil {
		return res, err
	}
	res.After = sampleProcs(ctx, c, r.isDown)
	return res, res.check(o.Env, o.Slack, end)
}

// checkRandom checks that s is for c's number of nodes and o's envelope
// and load are valid, and returns o's load for s.Duration.
func checkRandom(c Cluster, s Schedule, o RandomOptions) (Load, error) {
	if c.Nodes() != s.Nodes {
		return Load{}, fmt.Errorf("chaos: the schedule is for %d nodes, the cluster has %d", s.Nodes, c.Nodes())
	}
	if err := o.Env.Validate(); err != nil {
		return Load{}, err
	}
	l := o.Load
	l.Duration = s.Duration
	if err := l.Validate(); err != nil {
		return Load{}, err
	}
	return l, nil
}

// say writes one progress line, "chaos: " and o.Label before it, to
// o.Output (if set).
func (o RandomOptions) say(format string, a ...any) {
	if o.Output != nil {
		fmt.Fprintf(o.Output, "chaos: %s"+format+"\n", append([]any{o.Label}, a...)...)
	}
}

// resumePaused continues every node paused marks as stopped (errors
// ignored: the run is ending).
func resumePaused(c Nemesis, paused []bool) {
	for i, p := range paused {
		if p {
			_ = c.Resume(i)
		}
	}
}

// warmAt is when, since the load's start, the processes are sampled under
// load: the first fault's start, or without faults 5 s or half the load,
// whichever is sooner.
func (s Schedule) warmAt() time.Duration {
	if len(s.Faults) > 0 {
		return s.Faults[0].Start
	}
	return min(5*time.Second, s.Duration/2)
}

// startLoad drives l against r's live nodes from r.start, recording into
// h, in the background until ctx ends or the load is done. errc receives
// Drive's error; stop cancels the load and returns once it has stopped and
// its checks have ended.
func (r *chaosRun) startLoad(ctx context.Context, l Load, h *History) (errc <-chan error, stop func()) {
	runCtx, cancel := context.WithCancel(ctx)
	loadErr := make(chan error, 1)
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		loadErr <- Drive(runCtx, l, r.start, r.targets, h)
	}()
	return loadErr, func() { cancel(); <-loadDone }
}

// applyActions carries out as, each at its time since r.start, telling
// o's progress; an action that fails is told and noted in
// res.StepErrors. It returns ctx's error if ctx ends first.
func (r *chaosRun) applyActions(ctx context.Context, as []action, paused []bool, o RandomOptions, res *RandomResult) error {
	for _, a := range as {
		if err := sleep(ctx, time.Until(r.start.Add(a.at))); err != nil {
			return err
		}
		o.say("%v %s n%d", time.Since(r.start).Round(100*time.Millisecond), a.what, a.node)
		if err := r.applyRandom(ctx, a, paused); err != nil {
			o.say("%v %s n%d failed: %v", time.Since(r.start).Round(100*time.Millisecond), a.what, a.node, err)
			res.StepErrors = append(res.StepErrors, fmt.Errorf("%v %s n%d: %w", a.at, a.what, a.node, err))
		}
	}
	return nil
}

// applyRandom carries out a; paused tracks the stopped nodes.
func (r *chaosRun) applyRandom(ctx context.Context, a action, paused []bool) error {
	c := r.c.(Nemesis)
	others := make([]int, 0, r.sc.Nodes-1)
	for j := range r.sc.Nodes {
		if j != a.node {
			others = append(others, j)
		}
	}
	switch a.what {
	case "cut":
		return c.Partition([]int{a.node})
	case "heal":
		return c.Heal()
	case "oneway-out":
		return c.OneWay([]int{a.node}, others)
	case "oneway-in":
		return c.OneWay(others, []int{a.node})
	case "kill":
		r.setDown(a.node, true)
		return c.Kill(a.node)
	case "restart":
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		err := c.Restart(rctx, a.node)
		if err == nil {
			r.setDown(a.node, false)
		}
		return err
	case "stop":
		// The load keeps sending to a paused node (a load balancer cannot
		// tell a stopped process from a slow one): those checks time out
		// or are answered late, at the SIGCONT.
		err := c.Pause(a.node)
		if err == nil {
			paused[a.node] = true
		}
		return err
	case "cont":
		err := c.Resume(a.node)
		if err == nil {
			paused[a.node] = false
		}
		return err
	}
	return fmt.Errorf("chaos: unknown action %q", a.what)
}

// check fills Whole, Quiet, Central, Lost and MaxLatency from the
// history, the load having ended at end.
func (res *RandomResult) check(env Envelope, slack float64, end time.Duration) error {
	h := res.History
	var err error
	if res.Whole, err = h.Check(env, 0, end, slack); err != nil {
		return err
	}
	quiet := res.Schedule.Quiet()
	if res.Quiet, err = checkQuiet(h, env, quiet, end, slack); err != nil {
		return err
	}
	return res.compareCentral(env, quiet)
}

// checkQuiet checks h against env with slack tokens in each quiet window
// (cut at end, the load's end; a window starting after it is skipped) and
// sums the windows into one Report: counts and error kinds added, per key
// the largest excess of any window, P50 and P99 the worst window's, From
// and To the first window's start and the last one's end.
func checkQuiet(h *History, env Envelope, quiet [][2]time.Duration, end time.Duration, slack float64) (Report, error) {
	byKey := map[string]*KeyReport{}
	agg := Report{ErrorKinds: map[string]int{}}
	for _, w := range quiet {
		to := min(w[1], end)
		if to <= w[0] {
			continue
		}
		rep, err := h.Check(env, w[0], to, slack)
		if err != nil {
			return Report{}, err
		}
		agg.addWindow(rep, byKey)
	}
	for _, k := range byKey {
		agg.addKey(*k, slack)
	}
	sortKeys(agg.Keys)
	if len(quiet) > 0 {
		agg.From, agg.To = quiet[0][0], quiet[len(quiet)-1][1]
	}
	return agg, nil
}

// addWindow adds one window's report rep to the sum agg: its counts and
// error kinds, its P50 and P99 where worse, and each key's outcome into
// byKey (see KeyReport.merge). The sum keeps maxErrorKinds kinds too, the
// others under "other" (kinds taken in name order: the same run, the same
// sum).
func (agg *Report) addWindow(rep Report, byKey map[string]*KeyReport) {
	agg.Checks += rep.Checks
	agg.Admitted += rep.Admitted
	agg.Errors += rep.Errors
	for _, k := range slices.Sorted(maps.Keys(rep.ErrorKinds)) {
		agg.addErrorKind(k, rep.ErrorKinds[k])
	}
	agg.P50 = max(agg.P50, rep.P50)
	agg.P99 = max(agg.P99, rep.P99) // the worst window's p99
	for _, k := range rep.Keys {
		cur := byKey[k.Key]
		if cur == nil {
			kk := k
			byKey[k.Key] = &kk
			continue
		}
		cur.merge(k)
	}
}

// merge adds another window's outcome k of the same key to kr: the counts
// summed, the worst window the one of the larger Violation.
func (kr *KeyReport) merge(k KeyReport) {
	kr.Checks += k.Checks
	kr.Admitted += k.Admitted
	kr.Errors += k.Errors
	if k.Violation > kr.Violation {
		kr.Violation, kr.WorstFrom, kr.WorstTo, kr.WorstEnd = k.Violation, k.WorstFrom, k.WorstTo, k.WorstEnd
	}
}

// compareCentral replays every decision of the history on one exact token
// bucket per key (env's rate and burst): Central is the tokens those
// buckets admit over the whole run, Lost, summed over keys, how many
// tokens fewer than they the cluster admitted in the quiet windows (0 for
// a key that got as many or more), MaxLatency the slowest answered check.
// Errors: env's rate not a valid bucket rate.
func (res *RandomResult) compareCentral(env Envelope, quiet [][2]time.Duration) error {
	rate, err := bucket.PerSecond(env.RatePerSec)
	if err != nil {
		return err
	}
	central := map[string]*bucket.Bucket{}
	inQuiet := map[string]*quietTokens{}
	for _, d := range res.History.Decisions() {
		if d.Err == nil && d.Latency > res.MaxLatency {
			res.MaxLatency = d.Latency
		}
		b := central[d.Key]
		if b == nil {
			nb := bucket.MustNew(rate, env.Burst, 0)
			b = &nb
			central[d.Key] = b
		}
		ok := b.AllowN(max(d.At, 0), d.Tokens)
		if ok {
			res.Central += d.Tokens
		}
		if !inWindows(d.At, quiet) {
			continue
		}
		e := inQuiet[d.Key]
		if e == nil {
			e = &quietTokens{}
			inQuiet[d.Key] = e
		}
		e.add(d, ok)
	}
	for _, e := range inQuiet {
		res.Lost += max(e.central-e.admitted, 0)
	}
	return nil
}

// quietTokens is one key's tokens in the quiet windows: what its exact
// central bucket admitted and what the cluster admitted.
type quietTokens struct {
	central, admitted int64
}

// add counts decision d, which the central bucket admitted when
// centralOK.
func (q *quietTokens) add(d Decision, centralOK bool) {
	if centralOK {
		q.central += d.Tokens
	}
	if d.Err == nil && d.Allowed {
		q.admitted += d.Tokens
	}
}

// inWindows says whether at lies in one of the windows [from, to], ends
// included.
func inWindows(at time.Duration, windows [][2]time.Duration) bool {
	for _, w := range windows {
		if at >= w[0] && at <= w[1] {
			return true
		}
	}
	return false
}

// sampleProcs reads process_resident_memory_bytes and go_goroutines from
// every node not down.
func sampleProcs(ctx context.Context, c Cluster, isDown func(int) bool) []ProcSample {
	out := make([]ProcSample, c.Nodes())
	var wg sync.WaitGroup
	for i := range out {
		out[i] = ProcSample{RSS: math.NaN(), Goroutines: math.NaN()}
		if isDown(i) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			text, err := c.Metrics(sctx, i)
			if err == nil {
				out[i] = ParseProcMetrics(text)
			}
		}()
	}
	wg.Wait()
	return out
}

// ParseProcMetrics reads process_resident_memory_bytes and go_goroutines
// from Prometheus text (NaN for what is missing or unparsable).
func ParseProcMetrics(text string) ProcSample {
	s := ProcSample{RSS: math.NaN(), Goroutines: math.NaN()}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return s
	}
	if f, ok := fams["process_resident_memory_bytes"]; ok && len(f.GetMetric()) > 0 {
		s.RSS = f.GetMetric()[0].GetGauge().GetValue()
	}
	if f, ok := fams["go_goroutines"]; ok && len(f.GetMetric()) > 0 {
		s.Goroutines = f.GetMetric()[0].GetGauge().GetValue()
	}
	return s
}

// Flat is the tolerance for "no growth after the load": a node's
// goroutines Idle after the load at most GoroutinesAbs above its count
// under the load before the first fault (RandomResult.Warm), its RSS at
// most RSSFactor times that RSS plus RSSAbs bytes.
type Flat struct {
	GoroutinesAbs float64
	RSSFactor     float64
	RSSAbs        float64
}

// DefaultFlat is the soak's tolerance: 20 goroutines (a restarted node's
// and a reconnect's transient ones), RSS 1.5x + 32 MiB (the keys' state,
// which stays until it expires, and the heap the GC has not returned).
var DefaultFlat = Flat{GoroutinesAbs: 20, RSSFactor: 1.5, RSSAbs: 32 << 20}

// Grown lists the nodes whose After exceeds Warm by more than f allows
// (nodes with a sample missing are skipped).
func (res *RandomResult) Grown(f Flat) []string {
	var out []string
	for i := range min(len(res.Warm), len(res.After)) {
		b, a := res.Warm[i], res.After[i]
		if !math.IsNaN(b.Goroutines) && !math.IsNaN(a.Goroutines) && a.Goroutines > b.Goroutines+f.GoroutinesAbs {
			out = append(out, fmt.Sprintf("n%d: goroutines %.0f -> %.0f", i, b.Goroutines, a.Goroutines))
		}
		if !math.IsNaN(b.RSS) && !math.IsNaN(a.RSS) && a.RSS > b.RSS*f.RSSFactor+f.RSSAbs {
			out = append(out, fmt.Sprintf("n%d: RSS %.1f -> %.1f MiB", i, b.RSS/(1<<20), a.RSS/(1<<20)))
		}
	}
	return out
}
