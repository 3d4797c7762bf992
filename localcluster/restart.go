package localcluster

import (
	"context"
	"fmt"
)

// Restart starts node i again after Kill or Terminate (a new process with
// the same name and config, on the addresses it had: memberlist refuses a
// dead member's name from a new address for a while), joining the gossip address of
// the first other live node, and returns once it serves and every node
// reports all the cluster's nodes as members; the WAN delay and the
// partition in place (SetWANDelay, Partition) are set on it again. Errors: node i is still
// running, no other node is live to join, or the restarted node fails to
// come up within ctx (its log tail is in the error; it is killed).
func (c *Cluster) Restart(ctx context.Context, i int) error {
	if _, err := c.index(i); err != nil {
		return err
	}
	if c.Alive(i) {
		return fmt.Errorf("localcluster: Restart(%d): node %s is still running", i, c.name(i))
	}
	var join []string
	for j := range c.Nodes {
		if j != i && c.Alive(j) {
			join = []string{c.node(j).Gossip}
			break
		}
	}
	if len(join) == 0 {
		return fmt.Errorf("localcluster: Restart(%d): no live node to join", i)
	}
	c.dropConn(i)
	if err := c.spawn(i, join); err != nil {
		return err
	}
	fail := func(err error) error {
		c.proc(i).kill()
		<-c.proc(i).done
		c.dropConn(i)
		return err
	}
	if err := c.waitAddrs(ctx, i); err != nil {
		return fail(err)
	}
	if err := c.waitServing(ctx, i); err != nil {
		return fail(err)
	}
	if err := c.waitMembers(ctx); err != nil {
		return fail(err)
	}
	// The faults the cluster keeps (the WAN delay, a Partition's blocked
	// peers without namespaces) apply to the new process too.
	if f := c.keptFaults(i); c.cfg.FaultInjection && (f.WANDelayMS != 0 || f.WANJitterMS != 0 || len(f.Blocked) > 0) {
		if err := c.SetFaults(ctx, i, f); err != nil {
			return err
		}
	}
	return nil
}

// SetBinary makes later Restarts (and nothing else) run the tokenmesh
// binary at path instead of Config.Binary: a rolling upgrade, node by
// node, from one build to another. The running nodes are not touched.
// Not safe for use concurrently with Restart.
func (c *Cluster) SetBinary(path string) { c.cfg.Binary = path }
