package replay

import (
	"bufio"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tokenmesh/tokenmesh/cluster/membership"
)

// Detection is how long one live node took to see one fault event in its
// membership: the wall time from the event's application (Result.EventTimes)
// to the first and to the last of the membership changes the event calls
// for in that node's log ("membership: member failed" or "member left" for
// each node it can no longer reach, "membership: member joined" for each it
// reaches again). It is the live counterpart of the simulator's per-node
// view delay (sim.Scenario's detection + U[0, detection_jitter] for a
// failure, the reconnect and join_delay for a heal or restart), in wall
// time: at --speed S it is S times longer in trace time. The measure is
// ours.
type Detection struct {
	Event    string        // Event.String() of the fault
	Kind     EventKind     // its kind
	Observer int           // the node whose log this is
	Expected int           // membership changes the event calls for at Observer
	Seen     int           // how many of them its log shows before the next event
	First    time.Duration // wall time to the first of them (0 if none seen)
	Last     time.Duration // wall time to the last of them (0 if none seen)
}

// MembershipChange is one line of a node's log about its membership.
type MembershipChange struct {
	At     time.Time
	Joined bool // member joined; false: member failed or left
	Node   int  // the member it is about (n<Node>)
}

// ParseMembershipLog reads the membership changes of a node's log
// (log/slog text lines: time=RFC3339 ... msg="membership: member joined"
// ... node=nK ..., or node=<region>.nK in a cluster spread over regions).
// Lines it does not recognise are skipped.
func ParseMembershipLog(log string) []MembershipChange {
	var out []MembershipChange
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		var joined bool
		switch {
		case strings.Contains(line, `msg="`+membership.MsgMemberJoined+`"`):
			joined = true
		case strings.Contains(line, `msg="`+membership.MsgMemberFailed+`"`), strings.Contains(line, `msg="`+membership.MsgMemberLeft+`"`):
		default:
			continue
		}
		at, ok := field(line, "time")
		if !ok {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			continue
		}
		name, ok := field(line, "node")
		if i := strings.LastIndexByte(name, '.'); i >= 0 {
			name = name[i+1:] // <region>.n<K> with regions (topology.NodeID): K is the node's index
		}
		if !ok || !strings.HasPrefix(name, "n") {
			continue
		}
		n, err := strconv.Atoi(name[1:])
		if err != nil || n < 0 {
			continue
		}
		out = append(out, MembershipChange{At: t, Joined: joined, Node: n})
	}
	return out
}

// field returns the value of key=value (unquoted) in a slog text line.
func field(line, key string) (string, bool) {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v, true
		}
	}
	return "", false
}

// MeasureDetection pairs the applied events of a replay (events[i] applied
// at wall time at[i]) with the membership changes in the logs of the nodes
// (logs[i] is node i's log, "" if unknown) and returns, for every event that
// changes what a live node can reach (kill, partition, heal, restart) and
// every node alive after it other than a restarted one, how long that node
// took to see it. A change counts for an event when it is logged at or
// after the event and before the next one. Nodes left out of every group of
// a partition are cut off alone (localcluster's rule). Errors: fewer or
// more times than events, an event naming a node outside 0..nodes-1.
func MeasureDetection(nodes int, events []Event, at []time.Time, logs []string) ([]Detection, error) {
	if len(events) != len(at) {
		return nil, fmt.Errorf("replay: %d events and %d times", len(events), len(at))
	}
	changes := make([][]MembershipChange, nodes)
	for i := range nodes {
		if i < len(logs) {
			changes[i] = ParseMembershipLog(logs[i])
		}
	}
	v := newView(nodes)
	var out []Detection
	for k, e := range events {
		prev := v.clone()
		restarted, err := v.apply(e)
		if err != nil {
			return nil, err
		}
		end := time.Time{}
		if k+1 < len(at) {
			end = at[k+1]
		}
		for o := range nodes {
			// Not o itself come back (restarted now or earlier): not a
			// view change of o.
			if !v.alive[o] || o == restarted || !prev.alive[o] {
				continue
			}
			if d, ok := detect(e, o, prev.reach(o), v.reach(o), changes[o], at[k], end); ok {
				out = append(out, d)
			}
		}
	}
	return out, nil
}

// view is which nodes are alive and the partition group of each (all in
// group 0: no partition).
type view struct {
	alive []bool
	group []int
}

// newView is a view of nodes nodes, all alive, without a partition.
func newView(nodes int) *view {
	v := &view{alive: make([]bool, nodes), group: make([]int, nodes)}
	for i := range v.alive {
		v.alive[i] = true
	}
	return v
}

// clone is a copy of v.
func (v *view) clone() *view {
	return &view{alive: slices.Clone(v.alive), group: slices.Clone(v.group)}
}

// apply changes v by event e and returns the node e restarts (-1: none).
func (v *view) apply(e Event) (restarted int, err error) {
	switch e.Kind {
	case Kill:
		return -1, v.setAlive(e, false)
	case Restart:
		return e.Node, v.setAlive(e, true)
	case Partition:
		return -1, v.partition(e)
	case Heal:
		clear(v.group)
	}
	return -1, nil
}

// setAlive marks e's node alive or dead.
func (v *view) setAlive(e Event, alive bool) error {
	if e.Node < 0 || e.Node >= len(v.alive) {
		return fmt.Errorf("replay: %v: no node %d", e, e.Node)
	}
	v.alive[e.Node] = alive
	return nil
}

// partition puts the nodes in partition e's groups, each node no group
// lists alone.
func (v *view) partition(e Event) error {
	for x := range v.group {
		v.group[x] = len(e.Groups) + x // alone unless listed
	}
	for g, members := range e.Groups {
		for _, x := range members {
			if x < 0 || x >= len(v.group) {
				return fmt.Errorf("replay: %v: no node %d", e, x)
			}
			v.group[x] = g
		}
	}
	return nil
}

// reach is which nodes o reaches in v: alive and in o's group.
func (v *view) reach(o int) []bool {
	r := make([]bool, len(v.alive))
	for x := range r {
		r[x] = x != o && v.alive[x] && v.group[x] == v.group[o]
	}
	return r
}

// detect is how long observer o took to log (changes, o's membership
// changes) that the nodes it reaches went from before to after by event e,
// applied at start; changes at or after end (if not zero) count for the
// next event. ok is false when e changes nothing o reaches.
func detect(e Event, o int, before, after []bool, changes []MembershipChange, start, end time.Time) (d Detection, ok bool) {
	d = Detection{Event: e.String(), Kind: e.Kind, Observer: o}
	want := map[int]bool{} // node -> joined
	for x := range before {
		if before[x] != after[x] {
			want[x] = after[x]
		}
	}
	d.Expected = len(want)
	if d.Expected == 0 {
		return d, false
	}
	for _, c := range changes {
		if c.At.Before(start) || (!end.IsZero() && !c.At.Before(end)) {
			continue
		}
		joined, ok := want[c.Node]
		if !ok || joined != c.Joined {
			continue
		}
		delete(want, c.Node)
		dt := c.At.Sub(start)
		if d.Seen == 0 {
			d.First = dt
		}
		d.Seen++
		d.Last = dt
	}
	return d, true
}
