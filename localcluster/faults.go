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
}

// SetFaults replaces node i's faults (POST /debug/faults). Errors:
// Config.FaultInjection off, node i not running, a non-200 answer.
func (c *Cluster) SetFaults(ctx context.Context, i int, f NodeFaults) error {
	if !c.cfg.FaultInjection {
		return errors.New("localcluster: fault injection is off (Config.FaultInjection)")
	}
	if _, err := c.index(i); err != nil {
		return err
	}
	if !c.Alive(i) {
		return fmt.Errorf("localcluster: node n%d is not running", i)
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
		return fmt.Errorf("localcluster: n%d: POST /debug/faults: %w", i, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("localcluster: n%d: POST /debug/faults: %s: %s", i, resp.Status, strings.TrimSpace(string(msg)))
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
// outside its own group, with no other fault. Gossip still flows, so
// every node still counts the others as live members.
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errs []error
	for i := range c.Nodes {
		if !c.Alive(i) {
			continue
		}
		f := NodeFaults{Blocked: []string{}}
		for _, j := range cut[i] {
			f.Blocked = append(f.Blocked, c.node(j).Name)
		}
		if err := c.SetFaults(ctx, i, f); err != nil {
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
