package replay

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/limiter"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

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

// StartInProcess starts n nodes "n0".."n<n-1>" sharing one rule named ruleName
// with rate ratePerSec tokens per (wall) second, burst, strategy and its
// params ("name=value", unprefixed).
func StartInProcess(ctx context.Context, n int, ruleName string, ratePerSec float64, burst int64, strat string, params []string) (*InProcess, error) {
	if n < 1 {
		return nil, fmt.Errorf("replay: %d nodes", n)
	}
	net := cluster.NewMemNetwork()
	members := make([]string, n)
	for i := range members {
		members[i] = "n" + strconv.Itoa(i)
	}
	rate, err := bucket.PerSecond(ratePerSec)
	if err != nil {
		return nil, fmt.Errorf("replay: rule %q: %w", ruleName, err)
	}
	epoch := time.Now()
	p := &InProcess{rule: ruleName, killed: make([]bool, n)}
	for i := range n {
		node, err := limiter.Start(ctx, limiter.Config{
			Name:      members[i],
			Rules:     []rule.Rule{{Name: ruleName, Rate: rate, Burst: burst, Strategy: strat, Params: params}},
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
func (p *InProcess) Check(ctx context.Context, node int, key string, hits int64, created time.Time) (bool, error) {
	it := cluster.BatchItem{Rule: p.rule, Key: key, Tokens: hits}
	if !created.IsZero() {
		it.CreatedAtUnixNs = created.UnixNano()
	}
	d, err := p.nodes[node].Cluster().CheckItem(ctx, it)
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

// Kill implements FaultInjector: node stops, and the others drop it from their
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

// Partition implements FaultInjector: not supported in process.
func (p *InProcess) Partition(...[]int) error {
	return errors.New("replay: partitions need a live cluster")
}

// Heal implements FaultInjector: not supported in process.
func (p *InProcess) Heal() error { return errors.New("replay: partitions need a live cluster") }

// Close stops every node.
func (p *InProcess) Close() error {
	var errs []error
	for _, n := range p.nodes {
		errs = append(errs, n.Close())
	}
	return errors.Join(errs...)
}
