package localcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
)

// NodeFaults are what SetFaults injects into one node's outgoing peer frames
// (the JSON of POST /debug/faults).
type NodeFaults struct {
	Blocked []string `json:"blocked"`  // node names whose frames are lost
	Drop    float64  `json:"drop"`     // loss probability, [0, 1]
	DelayMS int64    `json:"delay_ms"` // extra delay of every frame, ms
	// WANDelayMS is an extra delay, ms, of every frame to a node of
	// another region (Config.Regions), on top of DelayMS; WANJitterMS adds
	// to each such frame a delay drawn uniformly from [0, WANJitterMS) ms.
	// Omitted from the JSON when 0, so that a binary that predates them
	// takes the rest.
	WANDelayMS  int64 `json:"wan_delay_ms,omitempty"`
	WANJitterMS int64 `json:"wan_jitter_ms,omitempty"`
}

// MaxWANDelay bounds SetWANDelay's delay and jitter (the node's bound on
// wan_delay_ms, cluster.MaxFaultDelay).
const MaxWANDelay = time.Hour

// SetWANDelay makes every live node delay each peer frame to a node of
// another region by delay plus a draw from [0, jitter), both whole
// milliseconds in [0, MaxWANDelay] (0, 0: no WAN delay): the latency
// between data centres, emulated in each node's faulty transport (frames
// inside a region are not delayed). The cluster remembers it: Partition
// (without namespaces) and Restart keep it. Errors: Config.FaultInjection
// off, a delay out of range or not whole milliseconds, a node that refused
// it (the others keep theirs).
func (c *Cluster) SetWANDelay(ctx context.Context, delay, jitter time.Duration) error {
	if !c.cfg.FaultInjection {
		return errors.New("localcluster: SetWANDelay needs Config.FaultInjection")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"delay", delay}, {"jitter", jitter}} {
		switch {
		case d.v < 0 || d.v > MaxWANDelay:
			return fmt.Errorf("localcluster: SetWANDelay: %s %v is not between 0 and %v", d.name, d.v, MaxWANDelay)
		case d.v%time.Millisecond != 0:
			return fmt.Errorf("localcluster: SetWANDelay: %s %v is not a whole number of milliseconds", d.name, d.v)
		}
	}
	c.mu.Lock()
	c.wan = NodeFaults{WANDelayMS: delay.Milliseconds(), WANJitterMS: jitter.Milliseconds()}
	c.mu.Unlock()
	var errs []error
	for i := range c.Nodes {
		if c.Alive(i) {
			errs = append(errs, c.SetFaults(ctx, i, c.keptFaults(i)))
		}
	}
	return errors.Join(errs...)
}

// WANDelay is the WAN delay and jitter the last SetWANDelay set.
func (c *Cluster) WANDelay() (delay, jitter time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Duration(c.wan.WANDelayMS) * time.Millisecond, time.Duration(c.wan.WANJitterMS) * time.Millisecond
}

// keptFaults are the faults the cluster keeps on node i: the WAN delay
// and the peers Partition blocked (without namespaces).
func (c *Cluster) keptFaults(i int) NodeFaults {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.wan
	f.Blocked = []string{}
	if i < len(c.blocked) {
		f.Blocked = append(f.Blocked, c.blocked[i]...)
	}
	return f
}

// SetFaults replaces node i's faults (POST /debug/faults), the WAN delay
// included (SetWANDelay and Partition set the remembered one again).
// Errors: Config.FaultInjection off, node i not running, a non-200 answer.
func (c *Cluster) SetFaults(ctx context.Context, i int, f NodeFaults) error {
	if !c.cfg.FaultInjection {
		return errors.New("localcluster: fault injection is off (Config.FaultInjection)")
	}
	if _, err := c.index(i); err != nil {
		return err
	}
	if !c.Alive(i) {
		return fmt.Errorf("localcluster: node %s is not running", c.name(i))
	}
	if f.Blocked == nil {
		f.Blocked = []string{}
	}
	body, err := json.Marshal(f)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+c.node(i).API+"/debug/faults", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("localcluster: %s: POST /debug/faults: %w", c.name(i), err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("localcluster: %s: POST /debug/faults: %s: %s", c.name(i), resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}

func (c *Cluster) node(i int) Addrs {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Nodes[i]
}

// Partition cuts the links between groups of node indices: a node in no
// group is cut off from all. Partition() with no groups heals.
//
// In namespace mode (Namespaced) it cuts the network, gossip and peer
// traffic together, both ways, replacing any earlier partition: each
// side's gossip then declares the other side failed, and after a heal
// the membership's reconnects merge the sides again.
//
// Otherwise it cuts the data plane only: every live node blocks the nodes
// outside its own group, with no other fault but the WAN delay
// (SetWANDelay), which it keeps. Gossip still flows, so every node still
// counts the others as live members.
//
// Errors: neither mode available (Config.FaultInjection off without
// namespaces), an index out of range or in two groups, a failed route
// change or a node that refused the faults (the others keep theirs).
func (c *Cluster) Partition(groups ...[]int) error {
	if err := checkGroups(groups, len(c.Nodes)); err != nil {
		return err
	}
	if c.lab != nil {
		return c.partitionNet(groups)
	}
	if !c.cfg.FaultInjection {
		return errors.New("localcluster: Partition needs Config.FaultInjection (or Config.Namespaces)")
	}
	cut := cutOff(groups, len(c.Nodes))
	blocked := make([][]string, len(c.Nodes))
	for i := range c.Nodes {
		for _, j := range cut[i] {
			blocked[i] = append(blocked[i], c.node(j).Name)
		}
	}
	c.mu.Lock()
	c.blocked = blocked
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errs []error
	for i := range c.Nodes {
		if !c.Alive(i) {
			continue
		}
		if err := c.SetFaults(ctx, i, c.keptFaults(i)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Heal removes every cut (Partition()): in namespace mode the routes, else
// every fault of every live node.
func (c *Cluster) Heal() error { return c.Partition() }

// checkGroups checks Partition's groups over n nodes.
func checkGroups(groups [][]int, n int) error {
	seen := map[int]bool{}
	for _, g := range groups {
		for _, i := range g {
			if i < 0 || i >= n {
				return fmt.Errorf("localcluster: Partition: no node %d (the cluster has %d)", i, n)
			}
			if seen[i] {
				return fmt.Errorf("localcluster: Partition: node %d is in two groups", i)
			}
			seen[i] = true
		}
	}
	return nil
}

// cutOff is, for each of n nodes, the nodes that Partition(groups...)
// cuts it from: those outside its group (all others when it is in none);
// none at all without groups.
func cutOff(groups [][]int, n int) [][]int {
	cut := make([][]int, n)
	if len(groups) == 0 {
		return cut
	}
	group := map[int]int{}
	for g, ids := range groups {
		for _, i := range ids {
			group[i] = g + 1
		}
	}
	for i := range n {
		for j := range n {
			if j != i && (group[i] == 0 || group[j] != group[i]) {
				cut[i] = append(cut[i], j)
			}
		}
	}
	return cut
}

// partitionNet replaces the network cuts with groups'.
func (c *Cluster) partitionNet(groups [][]int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.lab.Heal(ctx); err != nil {
		return fmt.Errorf("localcluster: %w", err)
	}
	c.mu.Lock()
	c.groups = nil
	c.mu.Unlock()
	if len(groups) == 0 {
		return nil
	}
	for i, others := range cutOff(groups, len(c.Nodes)) {
		if err := c.lab.CutOneWay(ctx, []int{i}, others); err != nil {
			return fmt.Errorf("localcluster: %w", err)
		}
	}
	gs := make([][]int, len(groups))
	for k, g := range groups {
		gs[k] = slices.Clone(g)
	}
	c.mu.Lock()
	c.groups = gs
	c.mu.Unlock()
	return nil
}
