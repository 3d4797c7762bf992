package replay

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
)

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
