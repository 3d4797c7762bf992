// Package localcluster runs a tokenmesh cluster of real processes on one
// machine: N `tokenmesh serve` processes on 127.0.0.1, every listener on
// an ephemeral port, for `tokenmesh replay`, `tokenmesh bench --spawn` and
// end-to-end tests.
//
// Start writes one YAML config per node (n0, n1, ...) into Config.Dir,
// starts n0 (which founds the cluster), reads the addresses it bound
// (serve --addr-file), then starts the others, which join n0's gossip
// address. It returns once every node's gRPC health service answers
// SERVING, every node's /metrics reports all N nodes as members
// (tokenmesh_members), and a settle period has passed.
//
// Each process runs in its own process group (so a Ctrl-C at the terminal
// reaches the parent only, which then stops the cluster in order) and, on
// Linux, is killed by the kernel if the parent dies first. Stop ends every
// node; nothing is registered globally.
//
// Faults: with Config.FaultInjection the nodes run with the hidden serve
// flag --fault-injection, and Partition/Heal cut and restore the links
// between nodes through each node's POST /debug/faults. That cuts the
// data plane only (the strategies' peer frames): gossip still flows, so
// every node still sees the blocked ones as live members.
//
// Regions: with Config.Regions node i is named "<region>.n<i>" and runs
// with node.region set (the strategies read a peer's region from its
// name), and SetWANDelay (FaultInjection needed) delays every peer frame
// between two regions, as a WAN between data centres would; frames inside
// a region keep the loopback's latency. Partition and Heal keep that
// delay.
//
// Namespaces: with Config.Namespaces (root and iproute2 needed, see
// internal/netns), every node runs in its own network namespace (host
// n<i> at 10.251.0.<i+1>, all on one bridge inside the lab's namespaces;
// nothing is added to the caller's namespace), its listeners on fixed
// ports of that address (NamespacePorts), and every node lists every
// other one in node.join, as an operator would. Partition and Heal then
// cut gossip and peer traffic together with blackhole routes, as a real
// network partition does, and need no FaultInjection. The cluster's own
// clients (Client, Metrics, SetFaults) dial each node from inside its
// namespace, so they reach it whatever is cut. Without root or ip, Start
// falls back to 127.0.0.1 with a warning (to Config.Log, or stderr) and
// turns FaultInjection on, so that Partition still cuts the data plane.
package localcluster

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
	"github.com/tokenmesh/tokenmesh/config"
	"github.com/tokenmesh/tokenmesh/internal/netns"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/topology"
)

// Defaults of Config's zero fields.
const (
	DefaultStartTimeout = 30 * time.Second
	DefaultSettle       = 500 * time.Millisecond
	// stopGrace is how long Stop waits after SIGTERM before SIGKILL.
	stopGrace = 10 * time.Second
	// tailBytes is how much of each node's output is kept for errors.
	tailBytes = 8 << 10
)

// NamespacePorts are the ports of a node in namespace mode (each node has
// its own address, so all use the same ones).
var NamespacePorts = struct{ API, GRPC, Peer, Gossip int }{8080, 8081, 7947, 7946}

// Config is a cluster to start.
type Config struct {
	Binary         string      // path of the tokenmesh binary
	Nodes          int         // >= 1
	Rules          []rule.Rule // every node's, written into its config file by config.Marshal; a zero Burst or empty Strategy gets config's default (rule.DefaultBurst, owner)
	Dir            string      // configs, addr files and logs go here; "" = a new temp dir removed by Stop
	FaultInjection bool        // pass --fault-injection (enables Partition/Heal)
	// SecretKey is the cluster's secret (16/24/32 bytes): it encrypts
	// gossip and authenticates peer frames. Empty: Start draws a random
	// 32-byte key (a multi-node serve refuses to start without one).
	SecretKey []byte
	// ServeArgs are further flags for every node's serve command
	// (e.g. --envoy-config DIR).
	ServeArgs []string
	// Log, when set, receives every node's stdout and stderr, line by
	// line, each line prefixed "[n0] ". Writes to it are serialized.
	// (Each node's output also goes to Dir/n<i>.log.)
	Log          io.Writer
	StartTimeout time.Duration // bounds Start; default DefaultStartTimeout
	// Settle is the wait after every node sees every member, for the
	// strategies' first exchanges (gdrl's hellos); default DefaultSettle,
	// negative: none.
	Settle time.Duration
	// Namespaces runs every node in its own network namespace, so that
	// Partition cuts gossip and peer traffic (see the package
	// documentation). Without root or ip: a warning and the 127.0.0.1
	// mode (Cluster.Namespaced reports which).
	Namespaces bool
	// StartPartitioned (namespace mode only) cuts the nodes into these
	// groups before any starts, as Partition would: each group founds a
	// cluster of its own (a partition at first boot), and Start waits
	// until every node sees the members of its group only. Heal then
	// lets them merge.
	StartPartitioned [][]int
	// ReconnectInterval, when set, is every node's
	// node.reconnect_interval; zero: the config default.
	ReconnectInterval time.Duration
	// ProbeInterval, when set, is every node's node.probe_interval (the
	// failure detector's period); zero: the config default.
	ProbeInterval time.Duration
	// Regions, when set, is each node's region (node.region), one per
	// node (len(Regions) == Nodes), each a topology region name (letters,
	// digits, '_', '-'): node i is then named "<Regions[i]>.n<i>"
	// ("eu.n0"). Empty: no regions, nodes named "n<i>".
	Regions []string
}

// Addrs is the bound addresses of one node, "host:port".
type Addrs struct {
	Name   string
	API    string // HTTP/JSON API
	GRPC   string // gRPC API (tokenmesh.v1, grpc.health.v1)
	Peer   string // grpcpeer frames
	Gossip string // memberlist
}

// Cluster is a running local cluster. Its methods are safe for concurrent
// use.
type Cluster struct {
	// Nodes are the nodes, Nodes[i] named "n<i>" (with Config.Regions,
	// "<region>.n<i>"); a killed node keeps its entry.
	Nodes []Addrs

	cfg    Config
	dir    string
	ownDir bool
	logMu  *sync.Mutex // serializes writes to cfg.Log
	http   *http.Client

	lab *netns.Lab // namespace mode; nil otherwise

	mu      sync.Mutex
	procs   []*proc
	conns   map[int]*grpc.ClientConn
	stopped bool
	groups  [][]int // the partition in place (namespace mode), nil: none
	// Fault-injection state that Partition, SetWANDelay and Restart
	// carry over (faults.go): the WAN delay in force on every node, and
	// each node's blocked peers under Partition without namespaces.
	wan     NodeFaults // only WANDelayMS, WANJitterMS
	blocked [][]string // per node; nil: none
}

// proc is one serve process.
type proc struct {
	name string
	cmd  *exec.Cmd
	tail *tail
	out  io.Closer     // the log file
	pw   *prefixer     // nil without Config.Log
	done chan struct{} // closed when the process has exited and been reaped
	err  error         // Wait's result, set before done closes
}

// Start starts the cluster (see the package documentation). On any
// failure it kills what it started, removes the directory it made, and
// returns an error with the failing node's log tail. ctx bounds the start
// only; the nodes run until Stop (or Kill/Terminate).
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, logMu: &sync.Mutex{}, http: &http.Client{Timeout: 5 * time.Second},
		Nodes: make([]Addrs, cfg.Nodes), procs: make([]*proc, cfg.Nodes), conns: map[int]*grpc.ClientConn{}}
	if err := c.makeDir(); err != nil {
		return nil, err
	}
	if cfg.Namespaces {
		if err := c.openLab(ctx); err != nil {
			_ = c.Stop()
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	if c.lab != nil && len(cfg.StartPartitioned) > 0 {
		if err := c.Partition(cfg.StartPartitioned...); err != nil {
			_ = c.Stop()
			return nil, err
		}
	}
	if err := c.start(ctx); err != nil {
		_ = c.Stop()
		return nil, err
	}
	return c, nil
}

// withDefaults checks cfg (errors name the field) and fills in its
// defaults: a secret key drawn at random, the start timeout, the settle
// time, the binary's absolute path.
func (cfg Config) withDefaults() (Config, error) {
	switch {
	case cfg.Binary == "":
		return cfg, errors.New("localcluster: Config.Binary is empty")
	case cfg.Nodes < 1:
		return cfg, fmt.Errorf("localcluster: Config.Nodes %d: want at least 1", cfg.Nodes)
	case len(cfg.Rules) == 0:
		return cfg, errors.New("localcluster: Config.Rules is empty")
	}
	if err := checkRegions(cfg.Regions, cfg.Nodes); err != nil {
		return cfg, err
	}
	cfg.Regions = slices.Clone(cfg.Regions)
	var err error
	if cfg.SecretKey, err = secretKey(cfg.SecretKey); err != nil {
		return cfg, err
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.Settle == 0 {
		cfg.Settle = DefaultSettle
	}
	if cfg.Binary, err = filepath.Abs(cfg.Binary); err != nil {
		return cfg, fmt.Errorf("localcluster: Binary: %w", err)
	}
	if _, err := os.Stat(cfg.Binary); err != nil {
		return cfg, fmt.Errorf("localcluster: Binary: %w", err)
	}
	if len(cfg.StartPartitioned) > 0 && !cfg.Namespaces {
		return cfg, errors.New("localcluster: StartPartitioned needs Config.Namespaces")
	}
	if err := checkGroups(cfg.StartPartitioned, cfg.Nodes); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// secretKey is key when it has a valid length (16, 24 or 32 bytes), or 32
// random bytes for none.
func secretKey(key []byte) ([]byte, error) {
	switch len(key) {
	case 16, 24, 32:
		return key, nil
	case 0:
		key = make([]byte, 32)
		if _, err := cryptorand.Read(key); err != nil {
			return nil, fmt.Errorf("localcluster: drawing a secret key: %w", err)
		}
		return key, nil
	}
	return nil, fmt.Errorf("localcluster: Config.SecretKey is %d bytes; want 16, 24 or 32", len(key))
}

// makeDir makes the cluster's directory: Config.Dir, or a temporary one
// of its own (removed by Stop). A relative Config.Dir is made absolute:
// the nodes run in it (exec.Cmd.Dir) and are handed paths inside it.
func (c *Cluster) makeDir() error {
	if c.cfg.Dir != "" {
		dir, err := filepath.Abs(c.cfg.Dir)
		if err != nil {
			return fmt.Errorf("localcluster: Dir: %w", err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("localcluster: Dir: %w", err)
		}
		c.dir = dir
		return nil
	}
	dir, err := os.MkdirTemp("", "tokenmesh-localcluster-")
	if err != nil {
		return fmt.Errorf("localcluster: %w", err)
	}
	c.dir, c.ownDir = dir, true
	return nil
}

// openLab makes the nodes' network namespaces (Config.Namespaces) and
// dials through them; without namespaces on this machine it warns and
// falls back to loopback with fault injection (an error if the cluster
// must start partitioned).
func (c *Cluster) openLab(ctx context.Context) error {
	if err := netns.Available(); err != nil {
		if len(c.cfg.StartPartitioned) > 0 {
			return fmt.Errorf("localcluster: StartPartitioned: %w", err)
		}
		c.warn(fmt.Sprintf("localcluster: WARNING: no network namespaces (%v): nodes on 127.0.0.1, Partition cuts the data plane only (gossip keeps flowing)", err))
		c.cfg.FaultInjection = true
		return nil
	}
	lctx, lcancel := context.WithTimeout(ctx, c.cfg.StartTimeout)
	defer lcancel()
	lab, err := netns.New(lctx, c.cfg.Nodes)
	if err != nil {
		return fmt.Errorf("localcluster: %w", err)
	}
	c.lab = lab
	c.http = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: c.lab.DialContext}}
	return nil
}

// checkRegions checks Config.Regions for n nodes: none, or one valid
// region name per node.
func checkRegions(regions []string, n int) error {
	if len(regions) == 0 {
		return nil
	}
	if len(regions) != n {
		return fmt.Errorf("localcluster: Config.Regions has %d entries for %d nodes; want one region per node (or none)", len(regions), n)
	}
	for i, r := range regions {
		if err := topology.CheckName(r); err != nil {
			return fmt.Errorf("localcluster: Config.Regions[%d]: region name %v", i, err)
		}
	}
	return nil
}

// NodeName is the name of node i of a cluster with regions (Config.Regions,
// nil: none): "<regions[i]>.n<i>", or "n<i>".
func NodeName(regions []string, i int) string {
	if i >= 0 && i < len(regions) {
		return fmt.Sprintf("%s.n%d", regions[i], i)
	}
	return fmt.Sprintf("n%d", i)
}

// name is node i's name (NodeName).
func (c *Cluster) name(i int) string { return NodeName(c.cfg.Regions, i) }

// warn writes msg to Config.Log, or to stderr.
func (c *Cluster) warn(msg string) {
	if c.cfg.Log != nil {
		c.logMu.Lock()
		defer c.logMu.Unlock()
		fmt.Fprintln(c.cfg.Log, msg)
		return
	}
	fmt.Fprintln(os.Stderr, msg)
}

// Namespaced reports whether the nodes run in network namespaces
// (Config.Namespaces and the machine allowed it).
func (c *Cluster) Namespaced() bool { return c.lab != nil }

// nsAddr is node i's address with port in namespace mode.
func (c *Cluster) nsAddr(i, port int) string {
	return net.JoinHostPort(c.lab.Hosts[i].Addr.String(), fmt.Sprint(port))
}

func (c *Cluster) start(ctx context.Context) error {
	if err := c.spawn(0, c.joinOf(0)); err != nil {
		return err
	}
	if err := c.waitAddrsRetry(ctx, 0); err != nil {
		return err
	}
	for i := 1; i < c.cfg.Nodes; i++ {
		if err := c.spawn(i, c.joinOf(i)); err != nil {
			return err
		}
	}
	errs := make([]error, c.cfg.Nodes)
	var wg sync.WaitGroup
	for i := range c.cfg.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i > 0 {
				if errs[i] = c.waitAddrsRetry(ctx, i); errs[i] != nil {
					return
				}
			}
			errs[i] = c.waitServing(ctx, i)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := c.waitMembers(ctx); err != nil {
		return err
	}
	if c.cfg.Settle > 0 {
		t := time.NewTimer(c.cfg.Settle)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("localcluster: settling: %w", ctx.Err())
		}
	}
	for i := range c.cfg.Nodes {
		if !c.Alive(i) {
			return c.nodeErr(i, "exited while the cluster settled")
		}
	}
	return nil
}

// joinOf is node i's node.join: n0's gossip address (none for n0), or in
// namespace mode every other node's.
func (c *Cluster) joinOf(i int) []string {
	if c.lab == nil {
		if i == 0 {
			return nil
		}
		return []string{c.Nodes[0].Gossip}
	}
	var join []string
	for j := range c.cfg.Nodes {
		if j != i {
			join = append(join, c.nsAddr(j, NamespacePorts.Gossip))
		}
	}
	return join
}

// groupSize is how many members node i sees once gossip has converged
// under the partition in place: its group's size (1 if in none), or
// every node's without a partition.
func (c *Cluster) groupSize(i int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.groups) == 0 {
		return c.cfg.Nodes
	}
	for _, g := range c.groups {
		if slices.Contains(g, i) {
			return len(g)
		}
	}
	return 1
}

// waitMembers polls every node's /metrics until each reports all the
// cluster's nodes as members (tokenmesh_members): gossip has converged.
// (Under StartPartitioned: the members of its group.)
func (c *Cluster) waitMembers(ctx context.Context) error {
	for {
		done := true
		for i := range c.cfg.Nodes {
			want := fmt.Sprintf("tokenmesh_members %d\n", c.groupSize(i))
			m, err := c.Metrics(ctx, i)
			if err != nil || !strings.Contains(m, want) {
				done = false
				break
			}
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("localcluster: waiting for every node to see %d members: %w", c.cfg.Nodes, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// NodeConfigYAML returns the YAML config of a node named name on
// 127.0.0.1 with ephemeral ports, joining join (empty: founding), with
// rules and the cluster secret secretKey: what Start writes for each node.
// Tests use it to start extra processes by hand. With a nil secretKey the
// node runs without one and says so (node.insecure: true), as an intruder
// or a test about something else would.
func NodeConfigYAML(name string, join []string, rules []rule.Rule, secretKey []byte) ([]byte, error) {
	return config.Marshal(nodeConfigOf(name, join, rules, secretKey))
}

// nodeConfigOf is the config of a node named name (see NodeConfigYAML),
// in config's own types: what config.Marshal writes and serve parses.
func nodeConfigOf(name string, join []string, rules []rule.Rule, secretKey []byte) *config.File {
	f := &config.File{Node: config.Node{Name: name, APIAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0",
		PeerAddr: "127.0.0.1:0", GossipAddr: "127.0.0.1:0", Join: slices.Clone(join), SecretKey: slices.Clone(secretKey)}}
	if len(secretKey) == 0 {
		f.Node.Insecure = true
	}
	for _, r := range rules {
		if r.Burst == 0 && r.Rate.Tokens > 0 {
			r.Burst = rule.DefaultBurst(r.Rate)
		}
		f.Rules = append(f.Rules, r)
	}
	return f
}

// spawn writes node i's config and starts its process.
func (c *Cluster) spawn(i int, join []string) error {
	name := c.name(i)
	c.Nodes[i].Name = name
	nc := nodeConfigOf(name, join, c.cfg.Rules, c.cfg.SecretKey)
	if len(c.cfg.Regions) > 0 {
		nc.Node.Region = c.cfg.Regions[i]
	}
	switch {
	case c.lab != nil:
		nc.Node.APIAddr = c.nsAddr(i, NamespacePorts.API)
		nc.Node.GRPCAddr = c.nsAddr(i, NamespacePorts.GRPC)
		nc.Node.PeerAddr = c.nsAddr(i, NamespacePorts.Peer)
		nc.Node.GossipAddr = c.nsAddr(i, NamespacePorts.Gossip)
	case c.Nodes[i].Gossip != "":
		// A restart (restart.go): bind the addresses the node had.
		n := c.Nodes[i]
		nc.Node.APIAddr, nc.Node.GRPCAddr, nc.Node.PeerAddr, nc.Node.GossipAddr = n.API, n.GRPC, n.Peer, n.Gossip
	default:
		// ports outside the ephemeral range, so that a restart finds them free (ports.go)
		ps, err := drawPorts(4)
		if err != nil {
			return err
		}
		at := func(p int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)) }
		nc.Node.APIAddr, nc.Node.GRPCAddr, nc.Node.PeerAddr, nc.Node.GossipAddr = at(ps[0]), at(ps[1]), at(ps[2]), at(ps[3])
	}
	if d := c.cfg.ProbeInterval; d > 0 {
		nc.Node.ProbeInterval = d
	}
	if d := c.cfg.ReconnectInterval; d > 0 {
		nc.Node.ReconnectInterval = d
	}
	b, err := config.Marshal(nc)
	if err != nil {
		return fmt.Errorf("localcluster: %s config: %w", name, err)
	}
	cfgPath := filepath.Join(c.dir, name+".yaml")
	addrPath := c.addrPath(i)
	_ = os.Remove(addrPath) // a stale file from an earlier run in the same Dir
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		return fmt.Errorf("localcluster: %s config: %w", name, err)
	}
	logf, err := os.Create(filepath.Join(c.dir, name+".log"))
	if err != nil {
		return fmt.Errorf("localcluster: %s log: %w", name, err)
	}
	args := []string{"serve", "--config", cfgPath, "--addr-file", addrPath}
	if c.cfg.FaultInjection {
		args = append(args, "--fault-injection")
	}
	args = append(args, c.cfg.ServeArgs...)
	cmd := exec.Command(c.cfg.Binary, args...)
	if c.lab != nil {
		// ip netns exec execs the binary: the PID is the node's.
		cmd = c.lab.Command(context.Background(), i, c.cfg.Binary, args...)
	}
	cmd.Dir = c.dir
	cmd.SysProcAttr = sysProcAttr()
	p := &proc{name: name, cmd: cmd, tail: &tail{}, out: logf, done: make(chan struct{})}
	ws := []io.Writer{logf, p.tail}
	if c.cfg.Log != nil {
		p.pw = &prefixer{mu: c.logMu, w: c.cfg.Log, prefix: "[" + name + "] "}
		ws = append(ws, p.pw)
	}
	w := io.MultiWriter(ws...)
	cmd.Stdout, cmd.Stderr = w, w // one writer: one pipe, lines stay whole
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("localcluster: starting %s: %w", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		if p.pw != nil {
			p.pw.flush()
		}
		_ = logf.Close()
		close(p.done)
	}()
	c.mu.Lock()
	c.procs[i] = p
	c.mu.Unlock()
	return nil
}

func (c *Cluster) addrPath(i int) string {
	return filepath.Join(c.dir, fmt.Sprintf("n%d.addr.json", i))
}

// portRetries is how many times a node whose drawn ports were taken
// before it bound them is started again on new ones.
const portRetries = 3

// waitAddrsRetry is waitAddrs for a node just spawned on drawn ports
// (pickPorts): when it exits because one of them was taken meanwhile
// (another process drew and bound it between the draw and the node's
// bind: "address already in use" in its log), it is started again on new
// ports, up to portRetries times. Other failures, and nodes in namespaces,
// fail at once.
func (c *Cluster) waitAddrsRetry(ctx context.Context, i int) error {
	join := c.joinOf(i)
	for attempt := 0; ; attempt++ {
		err := c.waitAddrs(ctx, i)
		p := c.proc(i)
		if err == nil || c.lab != nil || attempt >= portRetries || p == nil || !p.exited() ||
			!strings.Contains(p.tail.String(), "address already in use") {
			return err
		}
		if err := c.spawn(i, join); err != nil {
			return err
		}
	}
}

// waitAddrs waits for node i's addr file and fills c.Nodes[i].
func (c *Cluster) waitAddrs(ctx context.Context, i int) error {
	p := c.proc(i)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(c.addrPath(i)); err == nil {
			var a struct{ Name, API, GRPC, Peer, Gossip string }
			if err := json.Unmarshal(b, &a); err != nil {
				return c.nodeErr(i, fmt.Sprintf("bad --addr-file %s: %v", c.addrPath(i), err))
			}
			c.mu.Lock()
			c.Nodes[i] = Addrs{Name: c.Nodes[i].Name, API: a.API, GRPC: a.GRPC, Peer: a.Peer, Gossip: a.Gossip}
			c.mu.Unlock()
			return nil
		}
		select {
		case <-p.done:
			return c.nodeErr(i, fmt.Sprintf("exited before it was serving (%v)", p.err))
		case <-ctx.Done():
			return c.nodeErr(i, fmt.Sprintf("did not write its addresses: %v", ctx.Err()))
		case <-tick.C:
		}
	}
}

// waitServing polls node i's gRPC health service until it says SERVING.
func (c *Cluster) waitServing(ctx context.Context, i int) error {
	p := c.proc(i)
	cc, err := c.conn(i)
	if err != nil {
		return c.nodeErr(i, err.Error())
	}
	hc := healthpb.NewHealthClient(cc)
	var last error
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := hc.Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("health %v", resp.GetStatus())
		}
		last = err
		select {
		case <-p.done:
			return c.nodeErr(i, fmt.Sprintf("exited before it was serving (%v)", p.err))
		case <-ctx.Done():
			return c.nodeErr(i, fmt.Sprintf("gRPC health not SERVING: %v (last: %v)", ctx.Err(), last))
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// nodeErr is an error about node i with its log tail.
func (c *Cluster) nodeErr(i int, msg string) error {
	name, t := c.name(i), ""
	if p := c.proc(i); p != nil {
		t = p.tail.String()
	}
	return fmt.Errorf("localcluster: node %s %s\n--- %s log tail ---\n%s", name, msg, name, t)
}

func (c *Cluster) proc(i int) *proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i < 0 || i >= len(c.procs) {
		return nil
	}
	return c.procs[i]
}

func (c *Cluster) index(i int) (*proc, error) {
	p := c.proc(i)
	if p == nil {
		return nil, fmt.Errorf("localcluster: no node %d (the cluster has %d)", i, len(c.Nodes))
	}
	return p, nil
}

// conn returns a (cached) gRPC client connection to node i's gRPC API.
func (c *Cluster) conn(i int) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i < 0 || i >= len(c.Nodes) || c.Nodes[i].GRPC == "" {
		return nil, fmt.Errorf("localcluster: no node %d with a gRPC address", i)
	}
	if c.stopped {
		return nil, errors.New("localcluster: the cluster is stopped")
	}
	if cc := c.conns[i]; cc != nil {
		return cc, nil
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, c.DialOptions()...)
	cc, err := grpc.NewClient("passthrough:///"+c.Nodes[i].GRPC, opts...)
	if err != nil {
		return nil, fmt.Errorf("localcluster: dialling %s: %w", c.Nodes[i].Name, err)
	}
	c.conns[i] = cc
	return cc, nil
}

func (c *Cluster) dropConn(i int) {
	c.mu.Lock()
	cc := c.conns[i]
	delete(c.conns, i)
	c.mu.Unlock()
	if cc != nil {
		_ = cc.Close()
	}
}

// DialOptions are the gRPC dial options a client of the nodes' gRPC API
// needs besides credentials: in namespace mode a dialer that connects to
// each node from inside its namespace; otherwise none. It reads only
// c.lab, set before Start returns, so it takes no lock (conn calls it
// holding c.mu).
func (c *Cluster) DialOptions() []grpc.DialOption {
	if c.lab == nil {
		return nil
	}
	lab := c.lab
	return []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		return lab.DialContext(ctx, "tcp", addr)
	})}
}

// Client is a tokenmesh.v1 client of node i's gRPC API, over one
// connection per node that Stop (or Kill/Terminate of the node) closes.
func (c *Cluster) Client(i int) (tokenmeshv1.RateLimitServiceClient, error) {
	cc, err := c.conn(i)
	if err != nil {
		return nil, err
	}
	return tokenmeshv1.NewRateLimitServiceClient(cc), nil
}

// Metrics returns node i's GET /metrics text. Errors: node i not
// running, no answer, a non-200 answer (as when the node serves no
// /metrics).
func (c *Cluster) Metrics(ctx context.Context, i int) (string, error) {
	if _, err := c.index(i); err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.node(i).API+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", fmt.Errorf("localcluster: %s: GET /metrics: %w", c.name(i), err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return "", fmt.Errorf("localcluster: %s: GET /metrics: %w", c.name(i), err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("localcluster: %s: GET /metrics: %s", c.name(i), resp.Status)
	}
	return string(b), nil
}
