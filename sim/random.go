package sim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// RandomScenario draws a fault scenario from seed for a cluster of nodes
// (n0..n<nodes-1>) over [0, span): a membership model (detection 100 ms -
// 2 s, with or without jitter, per-peer spacing, join delay and
// reconnects), a network (latency, and with some probability loss,
// duplication and reordering), and faults, one after another so that the
// cluster is whole again between them: a crash of 1..nodes-1 nodes,
// restarted later (or never, the last fault), or a partition into two
// sides, healed later. The same seed gives the same scenario; a failing
// swarm test prints the seed (and Scenario.String reproduces it as YAML
// for `tokenmesh sim --scenario`). Ours, for swarm tests in the style of
// randomised fault injection; the fault kinds are the scenario file's.
//
// Errors: nodes < 1 or span <= 0.
func RandomScenario(seed uint64, nodes int, span time.Duration) (*Scenario, error) {
	if nodes < 1 {
		return nil, fmt.Errorf("sim: random scenario for %d nodes; need at least 1", nodes)
	}
	if span <= 0 {
		return nil, fmt.Errorf("sim: random scenario over %v; need a positive span", span)
	}
	rnd := rand.New(rand.NewPCG(seed, 0x7377726d)) // "swrm"
	sc := randomMembership(rnd)
	sc.Network = randomNet(rnd)
	if nodes < 2 {
		return sc, nil // nothing to cut; a crash of the only node decides nothing
	}
	sc.Events = randomFaults(rnd, nodes, span)
	return sc, nil
}

// drawDur draws a duration uniformly from [lo, hi].
func drawDur(rnd *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rnd.Int64N(int64(hi-lo)+1))
}

// randomMembership draws RandomScenario's membership model: detection,
// and each with some probability jitter, per-peer spacing, a join delay
// and reconnects.
func randomMembership(rnd *rand.Rand) *Scenario {
	sc := &Scenario{Detection: drawDur(rnd, 100*time.Millisecond, 2*time.Second)}
	if rnd.IntN(2) == 0 {
		sc.DetectionJitter = drawDur(rnd, 0, time.Second)
	}
	if rnd.IntN(3) == 0 {
		sc.DetectionSpacing = drawDur(rnd, 100*time.Millisecond, time.Second)
	}
	if rnd.IntN(2) == 0 {
		sc.JoinDelay = drawDur(rnd, 10*time.Millisecond, 500*time.Millisecond)
	}
	if rnd.IntN(2) == 0 {
		sc.ReconnectInterval = drawDur(rnd, 200*time.Millisecond, 5*time.Second)
	}
	return sc
}

// randomNet draws RandomScenario's network: a latency, and each with some
// probability loss, duplication and reordering.
func randomNet(rnd *rand.Rand) *ScenarioNet {
	net := &ScenarioNet{Latency: []string{"1ms", "uniform:1ms-5ms", "exp:1ms+4ms"}[rnd.IntN(3)]}
	prob := func(p float64) *float64 { return &p }
	if rnd.IntN(2) == 0 {
		net.Loss = prob([]float64{0.01, 0.05, 0.2}[rnd.IntN(3)])
	}
	if rnd.IntN(3) == 0 {
		net.Duplicate = prob(0.01)
	}
	if rnd.IntN(3) == 0 {
		net.Reorder = prob(0.05)
	}
	return net
}

// randomFaults draws RandomScenario's faults for nodes >= 2 nodes over
// [0, span): 1 to 3, each in a slot of its own, a crash (restarted later,
// or never for the last) or a partition into two sides (healed later).
func randomFaults(rnd *rand.Rand, nodes int, span time.Duration) []ScenarioEvent {
	names := make([]string, nodes)
	for i := range names {
		names[i] = fmt.Sprintf("n%d", i)
	}
	var events []ScenarioEvent
	faults := 1 + rnd.IntN(3)
	slot := span / time.Duration(faults)
	for f := 0; f < faults; f++ {
		begin := time.Duration(f)*slot + drawDur(rnd, 0, slot/4)
		end := begin + drawDur(rnd, slot/4, slot/2)
		perm := rnd.Perm(nodes)
		if rnd.IntN(2) == 0 {
			k := 1 + rnd.IntN(nodes-1)
			var down []string
			for _, i := range perm[:k] {
				down = append(down, names[i])
			}
			events = append(events, ScenarioEvent{At: begin, Crash: down})
			if f < faults-1 || rnd.IntN(2) == 0 {
				events = append(events, ScenarioEvent{At: end, Restart: down})
			}
			continue
		}
		k := 1 + rnd.IntN(nodes-1)
		var a, b []string
		for j, i := range perm {
			if j < k {
				a = append(a, names[i])
			} else {
				b = append(b, names[i])
			}
		}
		events = append(events, ScenarioEvent{At: begin, Partition: [][]string{a, b}},
			ScenarioEvent{At: end, Heal: true})
	}
	return events
}

// String is s as scenario YAML (what `tokenmesh sim --scenario FILE`
// reads), to reproduce a generated scenario.
func (s *Scenario) String() string {
	if s == nil {
		return ""
	}
	out := fmt.Sprintf("detection: %v\n", s.Detection)
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"detection_jitter", s.DetectionJitter}, {"detection_spacing", s.DetectionSpacing}, {"reconnect_interval", s.ReconnectInterval}, {"join_delay", s.JoinDelay}, {"reconnect_timeout", s.ReconnectTimeout}} {
		if d.v > 0 {
			out += fmt.Sprintf("%s: %v\n", d.name, d.v)
		}
	}
	if n := s.Network; n != nil {
		out += n.yaml()
	}
	if len(s.Events) > 0 {
		out += "events:\n"
	}
	for _, e := range s.Events {
		out += e.yaml()
	}
	return out
}

// yaml is n as the network section of scenario YAML.
func (n *ScenarioNet) yaml() string {
	out := "network:\n"
	if n.Latency != "" {
		out += fmt.Sprintf("  latency: %q\n", n.Latency)
	}
	for _, f := range []struct {
		name string
		v    *float64
	}{{"loss", n.Loss}, {"duplicate", n.Duplicate}, {"reorder", n.Reorder}} {
		if f.v != nil {
			out += fmt.Sprintf("  %s: %g\n", f.name, *f.v)
		}
	}
	return out
}

// yaml is e as an item of the events list of scenario YAML.
func (e ScenarioEvent) yaml() string {
	out := fmt.Sprintf("  - at: %v\n", e.At)
	switch {
	case len(e.Crash) > 0:
		out += "    crash: " + yamlList(e.Crash) + "\n"
	case e.CrashOwnerOfHottest > 0:
		out += fmt.Sprintf("    crash_owner_of_hottest: %d\n", e.CrashOwnerOfHottest)
	case len(e.Restart) > 0:
		out += "    restart: " + yamlList(e.Restart) + "\n"
	case len(e.Partition) > 0:
		gs := make([]string, len(e.Partition))
		for i, g := range e.Partition {
			gs[i] = yamlList(g)
		}
		out += "    partition: [" + strings.Join(gs, ", ") + "]\n"
	case e.Heal:
		out += "    heal: true\n"
	}
	return out
}

// yamlList is names as a YAML flow sequence of quoted strings.
func yamlList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
