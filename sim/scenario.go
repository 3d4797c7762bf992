package sim

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/topology"
)

// Scenario is what happens to the cluster during a run, read from YAML:
//
//	detection: 1s            # how long failure detectors take to see a change
//	detection_jitter: 500ms  # optional: each node sees it after its own extra [0, jitter]
//	detection_spacing: 35s   # optional: a node losing several peers declares them failed one by one
//	reconnect_interval: 5s   # optional: a heal is seen once a reconnect attempt succeeds
//	join_delay: 1s           # optional: a join (restart, merge) reaches each node within U[0, join_delay]
//	reconnect_timeout: 10m   # optional: a failed node stops being expected this long after a node lost it
//	network:                 # optional: overrides --latency/--loss/...
//	  latency: uniform:1ms-5ms
//	  loss: 0.05
//	  duplicate: 0.01
//	  reorder: 0.01
//	events:                  # times since the start of the trace
//	  - at: 60s
//	    crash: [n3]
//	  - at: 60s
//	    crash_owner_of_hottest: 2    # crash the owners of the 2 most requested keys
//	  - at: 120s
//	    restart: [n3]
//	  - at: 200s
//	    partition: [[n0, n1], [n2, n3, n4]]
//	  - at: 260s
//	    heal: true
//
// With regions (Config.Regions, `tokenmesh sim --regions eu:10,us:10,ap:10`;
// regions.go) nodes are named "<region>.n<i>" (eu.n0 .. eu.n9, us.n10 ...),
// the network takes the latency and loss of the links between regions, and
// events may name regions:
//
//	network:
//	  wan_latency: exp:60ms+20ms   # between regions (default: latency)
//	  wan_loss: 0.01               # between regions
//	  pairs:                       # optional: per pair of regions, either order
//	    eu/ap: exp:120ms+20ms
//	events:
//	  - at: 10s
//	    cut: [ap]                  # region ap alone; [ap, us]: each alone
//	  - at: 70s
//	    heal: true
//	  - at: 80s
//	    partition: [[eu, us], [ap]]  # a partition group may list regions
//
// Membership is modelled per node (see the package documentation, "Faults
// and membership views"): every node has its own member list, and a change
// (crash, restart, partition, heal) reaches node i's strategy, as
// SetMembers with node i's view, after node i's own delay, drawn from the
// run's seed: Detection + U[0, DetectionJitter] for a failure (crash,
// partition), U[0, JoinDelay] for a join (restart, heal) when JoinDelay is
// set. A heal first waits for the first reconnect attempt of any live node
// (each node tries every ReconnectInterval from its own seeded phase, as
// serf's reconnector does); only then does that delay start. With only
// `detection: D` (the other three 0) every node sees every change exactly D
// later, which is what the simulator always did.
type Scenario struct {
	// Detection is the failure detector's delay (memberlist: a probe
	// interval plus the suspicion timeout); default DefaultDetection.
	Detection time.Duration `yaml:"detection"`
	// DetectionJitter is the spread of the per-node delay: node i learns of
	// a change after Detection + U[0, DetectionJitter] (gossip reaching the
	// nodes one after another). 0: every node after exactly Detection.
	DetectionJitter time.Duration `yaml:"detection_jitter"`
	// DetectionSpacing turns on per-peer detection of failures: after a
	// crash or a partition, node i declares the peers it lost failed one
	// at a time, in an order drawn from the seed (memberlist's probe list
	// is shuffled and probed round-robin, one target per probe interval),
	// the k-th (k = 1, 2, ...) after Detection + (k-1) x DetectionSpacing
	// + U[0, DetectionJitter] (a draw per peer). The spacing is one probe
	// interval as the declaring node runs it: memberlist's Lifeguard
	// awareness (state.go, probeNode: each failed probe raises the node's
	// health score, and the probe interval is scaled by score+1) lengthens
	// it on a node whose probes all fail, which is why an isolated node
	// declares its peers seconds apart, not one probe interval apart. 0:
	// node i sees all peers of one event fail together, after Detection +
	// U[0, DetectionJitter] (the model before, byte-identical).
	DetectionSpacing time.Duration `yaml:"detection_spacing"`
	// ReconnectInterval is how often each node retries members it holds as
	// failed (serf's ReconnectInterval, 30 s in serf, 5 s in tokenmesh's
	// membership); a heal is visible from the first attempt after it. 0:
	// a heal is visible at once (after the detection delay), as before.
	ReconnectInterval time.Duration `yaml:"reconnect_interval"`
	// JoinDelay bounds how long gossip takes to bring a join to a node: a
	// restarted node, or the other side after a heal's reconnect (memberlist
	// gossips every 200 ms to 3 nodes: well under a second for tens of
	// nodes). Node i hears of it after U[0, JoinDelay]. 0: joins take the
	// failure detector's delay, as before.
	JoinDelay time.Duration `yaml:"join_delay"`
	// ReconnectTimeout is how long a node that left node i's view (a
	// crash, or the far side of a partition: the simulator has no leave)
	// stays among node i's expected members, the last agreed N that
	// `partition: conserve` scales by (cluster/membership's
	// reconnect_timeout, after which the failed member is forgotten). 0:
	// for the whole run (the live default is 24 h).
	ReconnectTimeout time.Duration   `yaml:"reconnect_timeout"`
	Network          *ScenarioNet    `yaml:"network"`
	Events           []ScenarioEvent `yaml:"events"`
}

// ScenarioNet overrides the network model.
type ScenarioNet struct {
	Latency   string   `yaml:"latency"`
	Loss      *float64 `yaml:"loss"`
	Duplicate *float64 `yaml:"duplicate"`
	Reorder   *float64 `yaml:"reorder"`
	// WANLatency, WANLoss and Pairs override Network's (regions only).
	WANLatency string            `yaml:"wan_latency"`
	WANLoss    *float64          `yaml:"wan_loss"`
	Pairs      map[string]string `yaml:"pairs"`
}

// ScenarioEvent is one thing that happens at At. Exactly one action is set.
type ScenarioEvent struct {
	At                  time.Duration `yaml:"at"`
	Crash               []string      `yaml:"crash"`
	CrashOwnerOfHottest int           `yaml:"crash_owner_of_hottest"`
	Restart             []string      `yaml:"restart"`
	Partition           [][]string    `yaml:"partition"`
	Heal                bool          `yaml:"heal"`
	// Cut isolates regions (Config.Regions): each region listed on its
	// own side of a partition, the regions not listed together.
	Cut []string `yaml:"cut"`
}

// DefaultDetection is the failure-detection delay when a scenario sets none
// (memberlist's default probe interval is 1 s).
const DefaultDetection = time.Second

// MaxScenarioDelay bounds detection, detection_jitter, detection_spacing,
// reconnect_interval, join_delay and reconnect_timeout; MaxScenarioTime
// bounds an event's time (both keep virtual time far from overflowing).
const (
	MaxScenarioDelay = time.Hour
	MaxScenarioTime  = 10000 * time.Hour
)

// LoadScenario reads and checks a scenario file. Errors name the file and,
// where yaml.v3 knows it, the line; unknown fields are errors.
func LoadScenario(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	s, err := ParseScenario(data)
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", path, err)
	}
	return s, nil
}

// ParseScenario parses scenario YAML (see Scenario). Node names are checked
// against the cluster when the run starts (Scenario.check).
func ParseScenario(data []byte) (*Scenario, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var s Scenario
	if err := dec.Decode(&s); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"detection", s.Detection}, {"detection_jitter", s.DetectionJitter}, {"detection_spacing", s.DetectionSpacing}, {"reconnect_interval", s.ReconnectInterval}, {"join_delay", s.JoinDelay}, {"reconnect_timeout", s.ReconnectTimeout}} {
		if d.v < 0 {
			return nil, fmt.Errorf("%s %v is negative", d.name, d.v)
		}
		if d.v > MaxScenarioDelay {
			return nil, fmt.Errorf("%s %v is longer than %v", d.name, d.v, MaxScenarioDelay)
		}
	}
	if s.Detection == 0 {
		s.Detection = DefaultDetection
	}
	for i, e := range s.Events {
		actions := 0
		for _, set := range []bool{len(e.Crash) > 0, e.CrashOwnerOfHottest > 0, len(e.Restart) > 0, len(e.Partition) > 0, e.Heal, len(e.Cut) > 0} {
			if set {
				actions++
			}
		}
		if actions != 1 {
			return nil, fmt.Errorf("event %d (at %v): want exactly one of crash, crash_owner_of_hottest, restart, partition, heal, cut; got %d", i+1, e.At, actions)
		}
		if e.At < 0 {
			return nil, fmt.Errorf("event %d: at %v is negative", i+1, e.At)
		}
		if e.At > MaxScenarioTime {
			return nil, fmt.Errorf("event %d: at %v is later than %v", i+1, e.At, MaxScenarioTime)
		}
		if e.CrashOwnerOfHottest < 0 {
			return nil, fmt.Errorf("event %d: crash_owner_of_hottest %d is negative", i+1, e.CrashOwnerOfHottest)
		}
	}
	sort.SliceStable(s.Events, func(i, j int) bool { return s.Events[i].At < s.Events[j].At })
	return &s, nil
}

// String describes e in a few words with its time, e.g.
// "partition n0,n1|n2@5m0s".
func (e ScenarioEvent) String() string { return e.Action() + "@" + e.At.String() }

// Action describes what e does, without its time, e.g. "partition
// n0,n1|n2", "crash n3", "heal" (the report's list of faults).
func (e ScenarioEvent) Action() string {
	var what string
	switch {
	case len(e.Crash) > 0:
		what = "crash " + strings.Join(e.Crash, ",")
	case e.CrashOwnerOfHottest > 0:
		what = fmt.Sprintf("crash_owner_of_hottest %d", e.CrashOwnerOfHottest)
	case len(e.Restart) > 0:
		what = "restart " + strings.Join(e.Restart, ",")
	case len(e.Partition) > 0:
		gs := make([]string, len(e.Partition))
		for i, g := range e.Partition {
			gs[i] = strings.Join(g, ",")
		}
		what = "partition " + strings.Join(gs, "|")
	case e.Heal:
		what = "heal"
	case len(e.Cut) > 0:
		what = "cut " + strings.Join(e.Cut, ",")
	}
	return what
}

// DetectionModel describes the membership model of s in one line, e.g.
// "each node after 5s + U[0, 1s]; heal after the first reconnect (every 5s)".
func (s *Scenario) DetectionModel() string {
	if s == nil {
		return ""
	}
	out := "each node after " + s.Detection.String()
	if s.DetectionJitter > 0 {
		out += " + U[0, " + s.DetectionJitter.String() + "]"
	}
	if s.DetectionSpacing > 0 {
		out += ", lost peers one by one " + s.DetectionSpacing.String() + " apart"
	}
	if s.JoinDelay > 0 {
		out += "; joins after U[0, " + s.JoinDelay.String() + "]"
	}
	if s.ReconnectInterval > 0 {
		out += "; heal after the first reconnect (every " + s.ReconnectInterval.String() + ")"
	}
	if s.ReconnectTimeout > 0 {
		out += "; failed nodes expected for " + s.ReconnectTimeout.String()
	}
	return out
}

// ApplyNetwork overrides net with the scenario's network settings, as a
// run does (nil, or no network: net unchanged); errors: a bad latency, a
// probability out of [0, 1].
func (s *Scenario) ApplyNetwork(net *Network) error { return s.apply(net) }

// apply overrides net with the scenario's network settings.
func (s *Scenario) apply(net *Network) error {
	if s == nil || s.Network == nil {
		return nil
	}
	if s.Network.Latency != "" {
		l, err := ParseLatency(s.Network.Latency)
		if err != nil {
			return fmt.Errorf("scenario network: %w", err)
		}
		net.Latency = l
	}
	if s.Network.WANLatency != "" {
		l, err := ParseLatency(s.Network.WANLatency)
		if err != nil {
			return fmt.Errorf("scenario network: wan_latency: %w", err)
		}
		net.WANLatency = l
	}
	if len(s.Network.Pairs) > 0 {
		net.Pairs = map[string]Latency{}
		for k, v := range s.Network.Pairs {
			l, err := ParseLatency(v)
			if err != nil {
				return fmt.Errorf("scenario network: pairs: %s: %w", k, err)
			}
			net.Pairs[k] = l
		}
	}
	for _, o := range []struct {
		src *float64
		dst *float64
	}{{s.Network.Loss, &net.Loss}, {s.Network.Duplicate, &net.Duplicate}, {s.Network.Reorder, &net.Reorder}, {s.Network.WANLoss, &net.WANLoss}} {
		if o.src != nil {
			*o.dst = *o.src
		}
	}
	return net.Validate()
}

// checkIn verifies that every node named exists among nodes, and every
// region named (a cut, a partition group) among regions; a node is in one
// partition group at most, a region's nodes counting as named.
func (s *Scenario) checkIn(nodes map[string]int, regions []topology.Region) error {
	if s == nil {
		return nil
	}
	// A region's node names (topology.NodeID's convention).
	inRegion := func(reg string) []string {
		var out []string
		for n := range nodes {
			if topology.Of(strategy.NodeID(n)) == reg {
				out = append(out, n)
			}
		}
		sort.Strings(out)
		return out
	}
	for i, e := range s.Events {
		if err := checkRegions(i+1, e, regions); err != nil {
			return err
		}
		names := append(append([]string{}, e.Crash...), e.Restart...)
		seen := map[string]bool{}
		for _, g := range e.Partition {
			for _, n := range g {
				members := []string{n}
				if topology.Index(regions, n) >= 0 {
					members = inRegion(n)
				} else {
					names = append(names, n)
				}
				for _, m := range members {
					if seen[m] {
						return fmt.Errorf("scenario event %d: node %s is in two partition groups", i+1, m)
					}
					seen[m] = true
				}
			}
		}
		for _, n := range names {
			if _, ok := nodes[n]; !ok {
				return fmt.Errorf("scenario event %d (at %v): unknown node %q (%s)", i+1, e.At, n, clusterNames(len(nodes), regions))
			}
		}
	}
	return nil
}

// clusterNames says how the cluster's nodes are named, for errors.
func clusterNames(n int, regions []topology.Region) string {
	if len(regions) == 0 {
		return fmt.Sprintf("the cluster has n0..n%d", n-1)
	}
	ids := RegionNodes(regions)
	return fmt.Sprintf("the cluster has %s..%s; regions %s", ids[0], ids[len(ids)-1], strings.Join(topology.Names(regions), ", "))
}
