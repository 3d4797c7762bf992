package regionlease_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/eval"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/regionlease"
	"github.com/tokenmesh/tokenmesh/topology"
	"github.com/tokenmesh/tokenmesh/workload"
)

// registry holds every incarnation of every node of one run, so that a
// check after any call can look at all of them.
type registry struct {
	current map[strategy.NodeID]*regionlease.RegionLease
	all     []*regionlease.RegionLease
	burst   int64
	down    func(id strategy.NodeID, now time.Duration) bool // nodes crashed at now, if set
	fail    func(format string, args ...any)
	extra   func(now time.Duration) error // another check after every call, if set
}

func (r *registry) check(now time.Duration) {
	var down func(strategy.NodeID) bool
	if r.down != nil {
		down = func(id strategy.NodeID) bool { return r.down(id, now) }
	}
	if err := regionlease.Conserved(r.current, r.all, down, r.burst, now); err != nil {
		r.fail("%v", err)
	}
	for _, n := range r.current {
		if n == nil {
			continue
		}
		if err := n.CheckMemory(); err != nil {
			r.fail("%v", err)
		}
	}
	if r.extra != nil {
		if err := r.extra(now); err != nil {
			r.fail("%v", err)
		}
	}
}

// checked is a RegionLease that, after every call, checks the
// conservation invariant over the whole cluster (regionlease.Conserved).
type checked struct {
	*regionlease.RegionLease
	self strategy.NodeID
	reg  *registry
}

func (c checked) Request(now time.Duration, req strategy.Request, fx *strategy.Effects) (strategy.Decision, bool) {
	d, ok := c.RegionLease.Request(now, req, fx)
	c.reg.check(now)
	return d, ok
}

func (c checked) Receive(now time.Duration, from strategy.NodeID, payload []byte, fx *strategy.Effects) error {
	err := c.RegionLease.Receive(now, from, payload, fx)
	if err != nil {
		c.reg.fail("Receive on %s from %s: %v", c.self, from, err) // peers here are honest
	}
	c.reg.check(now)
	return err
}

func (c checked) Tick(now time.Duration, fx *strategy.Effects) {
	c.RegionLease.Tick(now, fx)
	c.reg.check(now)
}

func (c checked) SetMembers(now time.Duration, members []strategy.NodeID, fx *strategy.Effects) {
	c.RegionLease.SetMembers(now, members, fx)
	c.reg.check(now)
}

func (c checked) SetExpected(now time.Duration, expected []strategy.NodeID, fx *strategy.Effects) {
	c.RegionLease.SetExpected(now, expected, fx)
	c.reg.check(now)
}

// TestEnvelopeUnderFaults runs random clusters of one to three regions
// (or none: node ids without a region) through the simulator with loss,
// duplication and reordering on both link classes, crashes and restarts
// of any node (global and regional owners among them), and under
// partition: conserve cuts of one region and their heals; it checks the
// conservation invariant over both tiers after every call and, at the end,
// that every key's admitted tokens stay within b + r*T in every window,
// exactly: no tokens created by a cut, a heal, a crash or a restart.
func TestEnvelopeUnderFaults(t *testing.T) {
	warmed = [2]uint64{}
	rapid.Check(t, envelopeRun)
	// The restarts must exercise the global owner's warm-up (warmup.go),
	// and some must end with every answer (a start that is not
	// conservative).
	if warmed[0] == 0 || warmed[1] == 0 {
		t.Fatalf("warm-ups over the runs: %d started, %d with every answer; want some of each", warmed[0], warmed[1])
	}
	t.Logf("warm-ups over the runs: %d started, %d with every answer", warmed[0], warmed[1])
}

// warmed counts the warm-ups over TestEnvelopeUnderFaults' runs: started,
// and ended with every answer.
var warmed [2]uint64

func envelopeRun(t *rapid.T) {
	nRegions := rapid.IntRange(0, 3).Draw(t, "regions") // 0: no regions
	var regions []topology.Region
	nodes := 0
	var names []string
	if nRegions == 0 {
		nodes = rapid.IntRange(2, 6).Draw(t, "nodes")
		for i := range nodes {
			names = append(names, fmt.Sprintf("n%d", i))
		}
	} else {
		for r := range nRegions {
			k := rapid.IntRange(1, 3).Draw(t, "region_nodes")
			regions = append(regions, topology.Region{Name: fmt.Sprintf("r%d", r), Nodes: k})
			for range k {
				names = append(names, string(topology.NodeID(regions[r].Name, nodes)))
				nodes++
			}
		}
	}
	keys := rapid.IntRange(1, 3).Draw(t, "keys")
	ratePerSec := rapid.IntRange(1, 200).Draw(t, "rate")
	burst := int64(rapid.IntRange(1, 50).Draw(t, "burst"))
	n := rapid.IntRange(1, 1500).Draw(t, "requests")
	spanMs := rapid.IntRange(100, 8000).Draw(t, "span_ms")
	var reqs []workload.Request
	for range n {
		reqs = append(reqs, workload.Request{
			Arrival: time.Duration(rapid.IntRange(0, spanMs).Draw(t, "at")) * time.Millisecond,
			Key:     fmt.Sprintf("k%d", rapid.IntRange(0, keys-1).Draw(t, "key")),
			Tokens:  int64(rapid.IntRange(1, 2).Draw(t, "tokens")),
		})
	}
	slices.SortStableFunc(reqs, func(a, b workload.Request) int { return int(a.Arrival - b.Arrival) })
	trace := &workload.Trace{Name: "rapid", Requests: reqs}

	lat, err := sim.ParseLatency(fmt.Sprintf("uniform:0ms-%dms", rapid.IntRange(1, 10).Draw(t, "latency_ms")))
	if err != nil {
		t.Fatal(err)
	}
	wan, err := sim.ParseLatency(fmt.Sprintf("uniform:%dms-%dms", rapid.IntRange(1, 40).Draw(t, "wan_min_ms"), 40+rapid.IntRange(1, 100).Draw(t, "wan_extra_ms")))
	if err != nil {
		t.Fatal(err)
	}
	net := sim.Network{Latency: lat,
		Loss:      rapid.Float64Range(0, 0.3).Draw(t, "loss"),
		Duplicate: rapid.Float64Range(0, 0.3).Draw(t, "dup"),
		Reorder:   rapid.Float64Range(0, 0.3).Draw(t, "reorder"),
	}
	if nRegions > 0 {
		net.WANLatency = wan
		net.WANLoss = rapid.Float64Range(0, 0.3).Draw(t, "wan_loss")
	}
	sc := &sim.Scenario{
		Detection: time.Duration(rapid.IntRange(1, 100).Draw(t, "detection_ms")) * time.Millisecond,
		JoinDelay: time.Duration(rapid.IntRange(0, 100).Draw(t, "join_ms")) * time.Millisecond,
	}
	mode := strategy.PartitionAvailable
	cutFrom, cutTo := time.Duration(-1), time.Duration(-1)
	if nRegions > 1 && rapid.Bool().Draw(t, "cut") {
		// A cut of one region, healed or not, under conserve: each side
		// keeps only what it holds.
		mode = strategy.PartitionConserve
		cutFrom = time.Duration(rapid.IntRange(0, spanMs).Draw(t, "cut_at")) * time.Millisecond
		cutTo = cutFrom + time.Duration(rapid.IntRange(1, 5000).Draw(t, "cut_ms"))*time.Millisecond
		sc.Events = append(sc.Events, sim.ScenarioEvent{At: cutFrom, Cut: []string{regions[rapid.IntRange(0, nRegions-1).Draw(t, "cut_region")].Name}},
			sim.ScenarioEvent{At: cutTo, Heal: true})
	} else if rapid.Bool().Draw(t, "conserve") {
		mode = strategy.PartitionConserve
	}
	crashes := rapid.IntRange(0, 3).Draw(t, "crashes")
	for e := crashes; e > 0; e-- {
		victim := rapid.SampledFrom(names).Draw(t, "victim")
		at := time.Duration(rapid.IntRange(0, spanMs).Draw(t, "crash_at")) * time.Millisecond
		back := at + time.Duration(rapid.IntRange(1, 3000).Draw(t, "down_ms"))*time.Millisecond
		if cutFrom >= 0 && back >= cutFrom && back < cutTo+sc.Detection+sc.JoinDelay {
			// A node restarted during a cut takes its view for the last
			// agreed members (the simulator's model) and may take the
			// keys of the far side's global owners as available does:
			// not what this test is about.
			back = cutTo + sc.Detection + sc.JoinDelay + time.Millisecond
		}
		sc.Events = append(sc.Events, sim.ScenarioEvent{At: at, Crash: []string{victim}}, sim.ScenarioEvent{At: back, Restart: []string{victim}})
	}
	slices.SortStableFunc(sc.Events, func(a, b sim.ScenarioEvent) int { return int(a.At - b.At) })

	rate, params := drawRule(t, ratePerSec)
	down := downAt(sc.Events)
	reg := &registry{current: map[strategy.NodeID]*regionlease.RegionLease{}, burst: burst, down: down, fail: t.Fatalf}
	if cutFrom < 0 {
		// Without a cut, also across owners, key by key: the levels of the
		// nodes up plus every token held in leases stay within b (two
		// buckets of one key, as a warm-up after a hand-over made, trip it
		// when they hold more than b together).
		reg.extra = func(now time.Duration) error {
			return regionlease.ConservedKeys(reg.current, func(id strategy.NodeID) bool { return down(id, now) }, burst, now)
		}
	}
	assign, err := workload.NewAssigner(rapid.SampledFrom([]string{"roundrobin", "random", "hash"}).Draw(t, "assign"), 1)
	if err != nil {
		t.Fatal(err)
	}
	allowed := runChecked(t, reg, trace, sim.Config{
		Nodes: nodes, Regions: regions, Rate: rate, Burst: burst, Params: params, Network: net, Scenario: sc,
		Assign: assign, Seed: rapid.Uint64().Draw(t, "seed"), Partition: mode,
	})
	for _, l := range reg.all {
		s, f := l.WarmUps()
		warmed[0] += s
		warmed[1] += f
	}
	if v := eval.EnvelopeViolation(reqs, allowed, rate.PerSec(), burst); v > 1e-9 {
		t.Fatalf("admitted tokens exceed b + r*T by %.4f tokens (partition %s)", v, mode)
	}
}

// downAt reports whether events (sorted by time) have node id down at
// now, as the simulator applies them: a crash of a node down and a
// restart of a node up change nothing. At an event's own instant the
// node counts as in the state after it (a call at a crash's instant may
// still be its last: it is then not checked, which only makes the check
// looser at that instant).
func downAt(events []sim.ScenarioEvent) func(id strategy.NodeID, now time.Duration) bool {
	type span struct {
		from, to time.Duration
	}
	spans := map[strategy.NodeID][]span{}
	isDown := map[strategy.NodeID]bool{}
	for _, e := range events {
		for _, n := range e.Crash {
			id := strategy.NodeID(n)
			if !isDown[id] {
				isDown[id] = true
				spans[id] = append(spans[id], span{e.At, 1<<63 - 1})
			}
		}
		for _, n := range e.Restart {
			id := strategy.NodeID(n)
			if isDown[id] {
				isDown[id] = false
				spans[id][len(spans[id])-1].to = e.At
			}
		}
	}
	return func(id strategy.NodeID, now time.Duration) bool {
		for _, s := range spans[id] {
			if now >= s.from && now < s.to {
				return true
			}
		}
		return false
	}
}

// runChecked runs trace through cfg with every node's regionlease wrapped
// in checked (reg's invariants after every call; Name and New are set
// here) and returns whether each request was admitted. A run error fails
// t.
func runChecked(t *rapid.T, reg *registry, trace *workload.Trace, cfg sim.Config) []bool {
	cfg.Name = "regionlease"
	cfg.New = func(c strategy.Config) (strategy.Strategy, error) {
		l, err := regionlease.New(c)
		if err != nil {
			return nil, err
		}
		reg.current[c.Self] = l
		reg.all = append(reg.all, l)
		return checked{l, c.Self, reg}, nil
	}
	res, err := sim.Run(trace, cfg)
	if err != nil {
		t.Fatal(err)
	}
	allowed := make([]bool, len(res.Outcomes))
	for i, o := range res.Outcomes {
		allowed[i] = o.Decided && o.Allowed
	}
	return allowed
}

// drawRule is the rule's rate (ratePerSec tokens/s) and drawn parameters
// for a property run: period 20-400 ms, min_lease 1-4, region_period the
// period plus 0-1,000 ms (the draws in this order, as the committed fail
// files recorded them).
func drawRule(t *rapid.T, ratePerSec int) (bucket.Rate, strategy.Params) {
	rate, err := bucket.PerSecond(float64(ratePerSec))
	if err != nil {
		t.Fatal(err)
	}
	period := rapid.IntRange(20, 400).Draw(t, "period_ms")
	settings := []string{
		"min_lease=" + fmt.Sprint(rapid.IntRange(1, 4).Draw(t, "min_lease")),
		"period=" + fmt.Sprint(period) + "ms",
		"region_period=" + fmt.Sprint(period+rapid.IntRange(0, 1000).Draw(t, "region_period_extra_ms")) + "ms",
	}
	params, err := strategy.ParseParams(settings)
	if err != nil {
		t.Fatal(err)
	}
	return rate, params
}
