package replay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
)

// Cluster is what the live target needs of a running cluster of processes
// (localcluster.Cluster has these methods).
type Cluster interface {
	Kill(i int) error
	Restart(ctx context.Context, i int) error // start a killed node again; returns once it serves
	Partition(groups ...[]int) error
	Heal() error
	Metrics(ctx context.Context, i int) (string, error) // Prometheus text of node i's GET /metrics
}

// LiveTarget is a Target of node processes: checks over each node's gRPC
// API (tokenmesh.v1.RateLimitService/Check), traffic from their /metrics
// (tokenmesh_peer_messages_total and tokenmesh_peer_bytes_total of the rule,
// direction "sent", summed over the nodes; a killed node counts with the
// values read just before it was killed).
type LiveTarget struct {
	c       Cluster
	rule    string
	conns   []*grpc.ClientConn
	clients []tokenmeshv1.RateLimitServiceClient

	mu     sync.Mutex
	killed []bool
	msgs   []int64 // last read, per node (this life of the process)
	bytes  []int64
	// msgsBefore and bytesBefore are the counts of the node's earlier
	// lives (read just before each kill): a restarted process counts from 0.
	msgsBefore  []int64
	bytesBefore []int64
}

// RestartTimeout bounds LiveTarget.Restart: starting a process, joining
// the cluster and waiting until every node sees every member.
const RestartTimeout = time.Minute

// NewLiveTarget connects to the nodes' gRPC API addresses (grpcAddrs[i] is
// node i of c) for rule; opts are added to the dial options (e.g.
// localcluster.Cluster.DialOptions for nodes in network namespaces).
func NewLiveTarget(c Cluster, grpcAddrs []string, rule string, opts ...grpc.DialOption) (*LiveTarget, error) {
	n := len(grpcAddrs)
	l := &LiveTarget{c: c, rule: rule, killed: make([]bool, n), msgs: make([]int64, n), bytes: make([]int64, n),
		msgsBefore: make([]int64, n), bytesBefore: make([]int64, n)}
	for _, addr := range grpcAddrs {
		conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
		if err != nil {
			_ = l.Close()
			return nil, fmt.Errorf("replay: connecting to %s: %w", addr, err)
		}
		l.conns = append(l.conns, conn)
		l.clients = append(l.clients, tokenmeshv1.NewRateLimitServiceClient(conn))
	}
	return l, nil
}

// Warm connects to every node and checks it serves rule (ListRules), so
// that the first requests of a replay do not pay for connection set-up.
func (l *LiveTarget) Warm(ctx context.Context) error {
	for i, c := range l.clients {
		resp, err := c.ListRules(ctx, &tokenmeshv1.ListRulesRequest{})
		if err != nil {
			return fmt.Errorf("replay: node %d: %w", i, err)
		}
		found := false
		for _, r := range resp.GetRules() {
			found = found || r.GetName() == l.rule
		}
		if !found {
			return fmt.Errorf("replay: node %d does not serve rule %q", i, l.rule)
		}
	}
	return nil
}

// Close closes the connections (not the cluster).
func (l *LiveTarget) Close() error {
	var errs []error
	for _, c := range l.conns {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// Nodes implements Target.
func (l *LiveTarget) Nodes() int { return len(l.clients) }

// Check implements Target.
func (l *LiveTarget) Check(ctx context.Context, node int, key string, hits int64, created time.Time) (bool, error) {
	item := &tokenmeshv1.CheckItem{Rule: l.rule, Key: key, Hits: hits}
	if !created.IsZero() {
		item.CreatedAtUnixNs = created.UnixNano()
	}
	resp, err := l.clients[node].Check(ctx, &tokenmeshv1.CheckRequest{Checks: []*tokenmeshv1.CheckItem{item}})
	if err != nil {
		return false, err
	}
	if len(resp.GetResults()) != 1 {
		return false, fmt.Errorf("replay: node %d answered %d results for 1 check", node, len(resp.GetResults()))
	}
	r := resp.GetResults()[0]
	if r.GetError() != "" {
		return false, fmt.Errorf("replay: node %d: %s", node, r.GetError())
	}
	return r.GetAllowed(), nil
}

// scrape reads node i's counters into the cache.
func (l *LiveTarget) scrape(ctx context.Context, i int) error {
	text, err := l.c.Metrics(ctx, i)
	if err != nil {
		return fmt.Errorf("node %d metrics: %w", i, err)
	}
	want := map[string]string{"rule": l.rule, "direction": "sent"}
	msgs, _ := SumCounter(text, "tokenmesh_peer_messages_total", want)
	bytes, _ := SumCounter(text, "tokenmesh_peer_bytes_total", want)
	l.msgs[i], l.bytes[i] = int64(msgs), int64(bytes)
	return nil
}

// Bytes implements Target.
func (l *LiveTarget) Bytes(ctx context.Context) (msgs, bytes int64, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for i := range l.clients {
		if !l.killed[i] {
			errs = append(errs, l.scrape(ctx, i))
		}
		msgs += l.msgsBefore[i] + l.msgs[i]
		bytes += l.bytesBefore[i] + l.bytes[i]
	}
	return msgs, bytes, errors.Join(errs...)
}

// StateBytes implements StateSampler: tokenmesh_state_bytes{rule} of
// every live node that answers.
func (l *LiveTarget) StateBytes(ctx context.Context) ([]int64, error) {
	l.mu.Lock()
	killed := slices.Clone(l.killed)
	l.mu.Unlock()
	var out []int64
	var errs []error
	for i := range l.clients {
		if killed[i] {
			continue
		}
		text, err := l.c.Metrics(ctx, i)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if v, ok := SumCounter(text, "tokenmesh_state_bytes", map[string]string{"rule": l.rule}); ok {
			out = append(out, int64(v))
		}
	}
	if len(out) == 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// Kill implements FaultInjector: it reads the node's counters, then kills it.
func (l *LiveTarget) Kill(i int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = l.scrape(ctx, i) // best effort: the counters so far
	cancel()
	l.killed[i] = true
	l.msgsBefore[i] += l.msgs[i]
	l.bytesBefore[i] += l.bytes[i]
	l.msgs[i], l.bytes[i] = 0, 0
	return l.c.Kill(i)
}

// Restart implements Restarter: it starts killed node i again
// (Cluster.Restart, within RestartTimeout) and counts its traffic from
// then on, on top of what it sent before its kill. The gRPC connection to
// the node reconnects by itself (same address).
func (l *LiveTarget) Restart(i int) error {
	l.mu.Lock()
	if i < 0 || i >= len(l.killed) {
		l.mu.Unlock()
		return fmt.Errorf("replay: restart: no node %d", i)
	}
	if !l.killed[i] {
		l.mu.Unlock()
		return fmt.Errorf("replay: restart: node %d was not killed", i)
	}
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), RestartTimeout)
	defer cancel()
	if err := l.c.Restart(ctx, i); err != nil {
		return err
	}
	l.mu.Lock()
	l.killed[i] = false
	l.msgs[i], l.bytes[i] = 0, 0
	l.mu.Unlock()
	return nil
}

// Partition implements FaultInjector.
func (l *LiveTarget) Partition(groups ...[]int) error { return l.c.Partition(groups...) }

// Heal implements FaultInjector.
func (l *LiveTarget) Heal() error { return l.c.Heal() }

// SumCounter sums the samples of metric name (a counter, gauge or untyped
// family) in Prometheus text exposition format whose labels include every
// pair of want; found is false when no sample matched. The text is read
// with expfmt up to its first malformed line, if any.
func SumCounter(text, name string, want map[string]string) (sum float64, found bool) {
	var p expfmt.TextParser
	fams, _ := p.TextToMetricFamilies(strings.NewReader(text)) // the families before an error are kept
	mf, ok := fams[name]
	if !ok {
		return 0, false
	}
	for _, m := range mf.GetMetric() {
		labels := map[string]string{}
		for _, lp := range m.GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		match := true
		for k, w := range want {
			if labels[k] != w {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			sum += m.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			sum += m.GetGauge().GetValue()
		case dto.MetricType_UNTYPED:
			sum += m.GetUntyped().GetValue()
		default:
			continue
		}
		found = true
	}
	return sum, found
}
