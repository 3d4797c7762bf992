// Package limiter is tokenmesh as an embeddable library: start a node
// in-process from a Config, get a Limiter for one of its rules, and call
// Allow, AllowN, Reserve or Wait in the shape Go users know from
// golang.org/x/time/rate, and Reservation.Settle for costs known only
// after the work (an LLM call's tokens). Every decision is the cluster's:
// the rule's strategy (owner, gdrl, ...) coordinates the node with its
// peers, so limiters on different nodes share one limit per key.
//
// # Differences from golang.org/x/time/rate
//
//   - One Limiter serves many keys: every call names the key it limits
//     (rate.Limiter is one bucket). Rate and burst are the rule's, fixed at
//     Start; there is no SetLimit or SetBurst.
//   - Decisions are made by the cluster and may need the network (owner
//     forwards to the key's owner), so AllowN, Reserve and Wait take a
//     context and can fail (closed node, bad key, ctx ended). Allow reports
//     an error as a refusal.
//   - Reserve and Wait are real reservations under owner and lease
//     (waiting mode, SRTM §5.2): the key's owner reserves the tokens
//     in arrival order and answers with the delay until they may be used
//     (at most b/r for Reserve; for Wait, at most the time left until
//     ctx's deadline; lease: at most its max_wait parameter, default 0,
//     which turns waiting mode off). Waiters are then served FIFO.
//   - Under the other strategies (static, gdrl, adaptive, gcounter,
//     tbqueue, local) decisions are in drop mode: nothing can hold tokens
//     ahead across the cluster, so a refused Reservation only says how
//     long to wait before asking again (an estimate, see
//     Reservation.Delay), and the next attempt may be refused again when
//     other callers took the tokens first; Wait retries after each
//     estimated delay until admitted or ctx ends, and returns ctx.Err()
//     then; waiters compete on each retry, with no FIFO order. Like
//     rate.Limiter, Wait fails at once when n exceeds the burst. Cancel
//     returns nothing under any strategy: admitted or reserved tokens are
//     spent; Settle gives back the unused part of a reservation, or
//     charges more than was reserved under a rule with overdraft
//     (strategy.OverdraftSpecs; docs/ENVOY.md, "Costs known after the
//     response: overdraft").
//   - A call whose ctx ends while the cluster decides (owner forwarding
//     to the key's owner) returns ctx.Err(), but the owner may still have
//     charged the tokens.
//   - No time arguments: decisions use the node's clock (AllowN(t, n) with
//     an arbitrary t has no cluster meaning).
package limiter

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/cluster/grpcpeer"
	"github.com/tokenmesh/tokenmesh/cluster/membership"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/statestore"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/registry"
)

// DefaultName is the node id used when Config.Name is empty.
const DefaultName = "node"

// ErrUnknownRule is wrapped by Node.Limiter for a rule the node lacks.
var ErrUnknownRule = errors.New("limiter: unknown rule")

// ErrExceedsBurst is returned (wrapped) by Wait for n above the burst.
var ErrExceedsBurst = errors.New("limiter: tokens exceed the burst")

// PeerConfig makes the node a member of a networked cluster: peer frames
// over gRPC (grpcpeer) at ListenAddr, membership by gossip (memberlist) at
// GossipAddr.
type PeerConfig struct {
	// ListenAddr is the gRPC peer address ("127.0.0.1:0" picks a port;
	// Node.PeerAddr reports it). It is published to the other members.
	ListenAddr string
	// GossipAddr is the memberlist bind address "host:port" (port 0 picks
	// one; Node.GossipAddr reports it). Empty: "0.0.0.0:7946".
	GossipAddr string
	// Join is the gossip addresses of other members. Empty: this node
	// founds the cluster. When none of them answers at start, Start fails,
	// unless FoundIfAlone is set. While running, every Join address that
	// is no live member's is tried again every ReconnectInterval
	// (membership.Config.Seeds), so a node that founded alone merges with
	// the others once they can be reached.
	Join []string
	// FoundIfAlone: when no address in Join answers at start, the node
	// founds the cluster alone (its strategies start as founders, see
	// Config.Join) and merges with the others once one of the Join
	// addresses answers (see Join). A node that did reach a member
	// starts as a joiner. This lets every node of a cluster list all the
	// others (the first one up founds it; a restarted node rejoins) instead
	// of the first node listing none and founding a second cluster alone
	// when it restarts.
	FoundIfAlone bool
	// ReconnectInterval is how often gossip tries to rejoin one failed
	// member and the Join addresses that are no members, so that the
	// sides of a healed partition merge (membership.Config). Zero:
	// membership.DefaultReconnectInterval (5 s); negative: never.
	ReconnectInterval time.Duration
	// ReconnectTimeout is how long a failed member is retried. Zero:
	// membership.DefaultReconnectTimeout (24 h).
	ReconnectTimeout time.Duration
	// MembershipLog, when set, receives the membership changes (member
	// joined, failed, left; reconnects that merged members) at Info and
	// failed reconnect attempts at Debug. Nil: none.
	MembershipLog *slog.Logger
	// SecretKey (16, 24 or 32 bytes) encrypts and authenticates gossip,
	// and (through a key derived from it, grpcpeer.DeriveFrameKey)
	// authenticates every peer frame (grpcpeer.Config.SecretKey).
	SecretKey []byte
	// TLS secures the peer streams (see grpcpeer.Config.TLS); nil: plaintext.
	TLS *tls.Config
	// ProbeInterval is the failure detector's period (config's
	// node.probe_interval; membership.Config.ProbeInterval); zero:
	// memberlist's LAN default, 1 s.
	ProbeInterval time.Duration
	// WrapTransport, when set, wraps the gRPC peer transport before the
	// node uses it (fault injection in tests: cluster.NewFaulty). It
	// wraps the data plane only: gossip membership and the transport's
	// peer address book still see the unwrapped transport. Nil (or a nil
	// result): none. The node closes the wrapper, which must close tr.
	WrapTransport func(cluster.Transport) cluster.Transport
	// Latency, when set, measures the latency hint (node.latency_hint:
	// auto): gossip's probe round trips feed it (membership.Config.OnRTT)
	// and it hands the node every hint that moved by more than
	// cluster.HintFactor (Attach). Config.LatencyHint should then be its
	// floor, the hint the strategies start with. Nil: the fixed
	// Config.LatencyHint, nothing measured.
	Latency *cluster.LatencyEstimator
}

// InProcess makes the node a member of a cluster inside this process:
// frames travel over Network, and the members are fixed (every node of the
// cluster lists the same Members). For tests and simulations.
type InProcess struct {
	Network *cluster.MemNetwork
	Members []string
}

// Config is one node.
type Config struct {
	// Name is the node's id in the cluster; unique. Empty: DefaultName.
	Name string
	// Rules are the limits (rule.Rule, the type config and cluster use
	// too): {Name: "api", Rate: rule.MustRate("100/s"), Burst: 20}, or
	// rule.PerSecond for a float rate. An empty Strategy is
	// rule.DefaultStrategy (owner).
	Rules []rule.Rule
	// ClusterRules are more rules, after Rules (the same type; kept for
	// the callers that set it before the two were one).
	//
	// Deprecated: use Rules.
	ClusterRules []rule.Rule
	// Peer, when set, joins a networked cluster; InProcess, when set, an
	// in-process one. Neither: a single node on its own (one in-process
	// network endpoint, no peers). Setting both is an error.
	Peer      *PeerConfig
	InProcess *InProcess
	// Epoch is the cluster's time base (see cluster.Config.Epoch): nodes in
	// one process share one time.Time; across processes use a fixed
	// wall-clock instant. Zero: the node's start.
	Epoch time.Time
	// Join marks a node joining a running cluster or restarting (see
	// cluster.Config.Join); founding members leave it false.
	Join bool
	// LatencyHint is the expected one-way peer latency, used for strategy
	// defaults (owner's hold and timeout); zero: the strategies' own.
	LatencyHint time.Duration
	// Seed seeds the strategies' randomness.
	Seed uint64
	// StateDir, when set, keeps the node's token buckets in a bbolt file
	// there (package statestore), for the rules whose strategy keeps a
	// bucket per key (strategy.Snapshotter: owner, static, local; the
	// others start fresh after a restart): Start restores it, refilled
	// for the wall time since it was taken (RestoreInfo); the node saves
	// a snapshot every SnapshotInterval and in Close. One directory per
	// node: a second node on the same directory fails Start.
	StateDir string
	// SnapshotInterval is the time between snapshots (default
	// DefaultSnapshotInterval), stretched when snapshots are slow so that
	// they take at most a fifth of the time (7-20 s between them at 1M
	// keys).
	SnapshotInterval time.Duration
	// DiscardBadState: a state file that does not load (corrupt) is moved
	// aside and the node starts with no saved state, instead of Start
	// failing.
	DiscardBadState bool
	// Logger receives what was restored and snapshot failures, and the
	// peer transport's refused frames; nil: none (refused frames go to
	// slog.Default).
	Logger *slog.Logger
	// Derive, MaxDerived and MaxDerivedPerBase are the node's derived
	// rules, made on demand by name (cluster.Config's fields: for Envoy's
	// limit overrides, envoyrls.Config.Deriver): the Deriver of the names
	// peer frames carry (nil: none), and the bounds (0: the defaults,
	// cluster.DefaultMaxDerived and cluster.DefaultMaxDerivedPerBase).
	// Derived rules are not in StateDir's restore: they start again when
	// first used.
	Derive            cluster.Deriver
	MaxDerived        int
	MaxDerivedPerBase int
}

// Node is a running tokenmesh node. Its methods are safe for concurrent use.
type Node struct {
	node    *cluster.Node
	rules   map[string]rule.Rule // replaced by SetRules, under rulesMu
	rulesMu sync.RWMutex
	tr      *grpcpeer.Transport
	ms      *membership.Membership
	multi   bool // the node has peers (Peer, or InProcess with more than one member): checkCentral
	once    sync.Once
	err     error

	stop chan struct{} // closed by Close

	persist *persister // nil without Config.StateDir
	restore RestoreInfo
	latency *cluster.LatencyEstimator // PeerConfig.Latency: nil when the hint is not measured

	mu      sync.Mutex
	members []string          // as last handed to node by gossip
	latest  []strategy.NodeID // the same, for attach
	expect  []strategy.NodeID // the last agreed members from gossip, for attach (partition: conserve)
}

// Start starts a node. ctx bounds the start only (joining the gossip
// cluster); the node runs until Close. Errors: a rule with strategy
// central in a cluster (Peer, or InProcess with more than one member; use
// owner), both Peer and InProcess set, a bad rule (cluster.New), InProcess with a nil Network or a name
// already attached to it, a listen failure of Peer.ListenAddr, a
// Peer.GossipAddr that is not "host:port", a failed gossip start or join,
// and ctx.Err() when ctx ends first. On error the node is closed (a
// gossip start still under way when ctx ended is shut down when it ends).
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if err := checkStart(ctx, cfg); err != nil {
		return nil, err
	}
	name := cfg.nodeName()
	self := strategy.NodeID(name)
	rules := withDefaults(slices.Concat(cfg.Rules, cfg.ClusterRules))
	multi := cfg.multiNode()
	if err := checkCentral(rules, multi); err != nil {
		return nil, err
	}
	ccfg := cluster.Config{Self: self, Rules: rules, Epoch: cfg.Epoch, Join: cfg.Join, LatencyHint: cfg.LatencyHint, Seed: cfg.Seed,
		Derive: cfg.Derive, MaxDerived: cfg.MaxDerived, MaxDerivedPerBase: cfg.MaxDerivedPerBase}
	n := &Node{rules: map[string]rule.Rule{}, stop: make(chan struct{}), multi: multi}
	log := cfg.logger()
	if cfg.StateDir != "" {
		store, err := n.openPersister(cfg, name, rules, log, &ccfg)
		if err != nil {
			return nil, err
		}
		defer func() {
			if n.node == nil { // Start failed
				_ = store.Close()
			}
		}()
	}
	for _, r := range rules {
		n.rules[r.Name] = r
	}
	if err := n.setTransport(cfg, self, &ccfg); err != nil {
		return nil, err
	}
	if p := cfg.Peer; p != nil {
		if err := n.joinMembership(ctx, name, p, &ccfg); err != nil {
			return nil, err
		}
	}
	node, err := cluster.New(ccfg)
	if err != nil {
		n.abortStart(ccfg.Transport)
		return nil, fmt.Errorf("limiter: %w", err)
	}
	n.attach(node)
	if cfg.Peer != nil && cfg.Peer.Latency != nil {
		n.latency = cfg.Peer.Latency
		n.latency.Attach(node)
	}
	if p := n.persist; p != nil {
		n.startPersister(node, p, log)
	}
	return n, nil
}

// checkStart refuses to start when ctx has ended (ctx.Err()) or when
// both Peer and InProcess are set.
func checkStart(ctx context.Context, cfg Config) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if cfg.Peer != nil && cfg.InProcess != nil {
		return errors.New("limiter: both Peer and InProcess are set")
	}
	return nil
}

// nodeName is cfg.Name, or DefaultName when it is empty.
func (cfg Config) nodeName() string {
	if cfg.Name == "" {
		return DefaultName
	}
	return cfg.Name
}

// multiNode reports whether the node is meant to have peers: Peer, or
// InProcess with more than one member.
func (cfg Config) multiNode() bool {
	return cfg.Peer != nil || (cfg.InProcess != nil && len(cfg.InProcess.Members) > 1)
}

// logger is cfg.Logger, or a logger that discards when it is nil.
func (cfg Config) logger() *slog.Logger {
	if cfg.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return cfg.Logger
}

// abortStart undoes what Start set up before cluster.New failed: it shuts
// gossip down and closes tr when the transport is grpcpeer's.
func (n *Node) abortStart(tr cluster.Transport) {
	if n.ms != nil {
		_ = n.ms.Shutdown()
	}
	if n.tr != nil {
		_ = tr.Close()
	}
}

// openPersister opens the state file in cfg.StateDir for Start: the
// states it restores go into ccfg.Restore, what it found into n.restore,
// and n.persist is made (not yet running). It returns the store, which
// Start closes if it fails. Errors: openState's.
func (n *Node) openPersister(cfg Config, name string, rules []rule.Rule, log *slog.Logger, ccfg *cluster.Config) (*statestore.Store, error) {
	store, snap, info, err := openState(cfg, name, log)
	if err != nil {
		return nil, err
	}
	n.restore = info
	if info.Found {
		n.restore.Taken, n.restore.Age = snap.Taken, time.Since(snap.Taken)
	}
	ccfg.Restore = restoreStates(snap, name, rules, log)
	interval := cfg.SnapshotInterval
	if interval <= 0 {
		interval = DefaultSnapshotInterval
	}
	n.persist = &persister{store: store, name: name, interval: interval, log: log, done: make(chan struct{})}
	return store, nil
}

// setTransport sets ccfg's transport (and, for InProcess, its members):
// an endpoint of cfg.InProcess.Network, a grpcpeer transport for cfg.Peer
// (kept in n.tr, wrapped by Peer.WrapTransport if set), or an endpoint of
// a network of its own for a lone node.
func (n *Node) setTransport(cfg Config, self strategy.NodeID, ccfg *cluster.Config) error {
	switch {
	case cfg.InProcess != nil:
		if cfg.InProcess.Network == nil {
			return errors.New("limiter: InProcess.Network is nil")
		}
		ep, err := cfg.InProcess.Network.Endpoint(self)
		if err != nil {
			return fmt.Errorf("limiter: %w", err)
		}
		ccfg.Transport = ep
		for _, m := range cfg.InProcess.Members {
			ccfg.Members = append(ccfg.Members, strategy.NodeID(m))
		}
	case cfg.Peer != nil:
		tr, err := grpcpeer.New(grpcpeer.Config{Self: self, ListenAddr: cfg.Peer.ListenAddr, TLS: cfg.Peer.TLS, SecretKey: cfg.Peer.SecretKey,
			Logger: cfg.Logger})
		if err != nil {
			return fmt.Errorf("limiter: %w", err)
		}
		n.tr = tr
		ccfg.Transport = tr
		if cfg.Peer.WrapTransport != nil {
			if w := cfg.Peer.WrapTransport(tr); w != nil {
				ccfg.Transport = w
			}
		}
	default:
		ep, err := cluster.NewMemNetwork().Endpoint(self)
		if err != nil {
			return fmt.Errorf("limiter: %w", err)
		}
		ccfg.Transport = ep
	}
	return nil
}

// joinMembership starts gossip for p (startMembership) into n.ms and puts
// the members it found into ccfg (and, with p.Join, whether it joined a
// running cluster into ccfg.Join). On an error ccfg's transport is closed.
func (n *Node) joinMembership(ctx context.Context, name string, p *PeerConfig, ccfg *cluster.Config) error {
	ms, joined, err := n.startMembership(ctx, name, p)
	if err != nil {
		_ = ccfg.Transport.Close()
		return err
	}
	n.ms = ms
	if len(p.Join) > 0 {
		// Reached a running cluster: a joiner; nobody answered: the
		// founder of a new one.
		ccfg.Join = joined
	}
	for id := range ms.Members() {
		ccfg.Members = append(ccfg.Members, id)
	}
	return nil
}

// startPersister logs what was restored from the state file and starts
// p's snapshots of node.
func (n *Node) startPersister(node *cluster.Node, p *persister, log *slog.Logger) {
	n.restore.Keys = node.Restored()
	if n.restore.Found {
		log.Info("restored token buckets from the state file", "file", n.restore.File, "keys", n.restore.Keys,
			"taken", n.restore.Taken.UTC().Format(time.RFC3339Nano), "age", n.restore.Age.Round(time.Millisecond))
	} else {
		log.Info("no saved state: starting with full buckets", "file", n.restore.File)
	}
	go p.run(node, n.stop)
}

// startMembership starts gossip for p and, with p.Join, joins the members
// there. joined reports whether one answered; when none did, the error is
// returned unless p.FoundIfAlone. ctx bounds the start.
func (n *Node) startMembership(ctx context.Context, name string, p *PeerConfig) (ms *membership.Membership, joined bool, err error) {
	mc := membership.Config{NodeName: name, SecretKey: p.SecretKey, PeerAddr: n.tr.Addr(), ProbeInterval: p.ProbeInterval,
		ReconnectInterval: p.ReconnectInterval, ReconnectTimeout: p.ReconnectTimeout, Seeds: p.Join,
		Log: p.MembershipLog, OnChange: n.membersChanged, OnExpected: n.expectedChanged,
		// Wire versions: advertised in gossip; the members' go to the
		// transport before each address book (grpcpeer.SetPeerVersions).
		WireVersion: grpcpeer.WireVersionMax, OnVersions: n.tr.SetPeerVersions}
	if p.Latency != nil {
		mc.OnRTT = p.Latency.Observe
	}
	if p.GossipAddr != "" {
		host, port, err := net.SplitHostPort(p.GossipAddr)
		if err != nil {
			return nil, false, fmt.Errorf("limiter: GossipAddr: %w", err)
		}
		if mc.BindPort, err = strconv.Atoi(port); err != nil {
			return nil, false, fmt.Errorf("limiter: GossipAddr port: %w", err)
		}
		mc.BindAddr = host
	}
	type res struct {
		ms     *membership.Membership
		joined bool
		err    error
	}
	ch := make(chan res, 1)
	go func() {
		ms, err := membership.New(mc)
		if err != nil || len(p.Join) == 0 {
			ch <- res{ms, false, err}
			return
		}
		_, jerr := ms.Join(p.Join)
		// Joining one's own address "succeeds": count only other members.
		joined := jerr == nil && len(ms.Members()) > 1
		if !joined && !p.FoundIfAlone {
			_ = ms.Shutdown()
			if jerr == nil {
				jerr = fmt.Errorf("membership: join %v: no other member answered", p.Join)
			}
			ch <- res{nil, false, jerr}
			return
		}
		ch <- res{ms, joined, nil}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, false, fmt.Errorf("limiter: %w", r.err)
		}
		return r.ms, r.joined, nil
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.ms != nil {
				_ = r.ms.Shutdown()
			}
		}()
		return nil, false, ctx.Err()
	}
}

// membersChanged is gossip's OnChange: it hands the members to the peer
// transport as its address book and, once the node exists, to the node.
// Calls are serialized by membership; n.mu orders them with attach.
func (n *Node) membersChanged(members map[strategy.NodeID]string) {
	n.tr.SetPeers(members)
	ids := slices.Sorted(maps.Keys(members))
	n.mu.Lock()
	defer n.mu.Unlock()
	n.latest = ids
	n.members = make([]string, len(ids))
	for i, id := range ids {
		n.members[i] = string(id)
	}
	if n.node != nil {
		_ = n.node.SetMembers(ids) // a closed node's error is ignored
	}
}

// expectedChanged is gossip's OnExpected: the last agreed members (live,
// and failed within reconnect_timeout) go to the node's strategies
// (cluster.Node.SetExpected; they matter under partition: conserve).
func (n *Node) expectedChanged(expected []strategy.NodeID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.expect = expected
	if n.node != nil {
		_ = n.node.SetExpected(expected) // a closed node's error is ignored
	}
}

// attach makes node the target of membership changes, handing it the
// members (and the expected members) gossip reported before it existed.
func (n *Node) attach(node *cluster.Node) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.node = node
	if n.latest != nil {
		_ = node.SetMembers(n.latest)
	}
	if n.expect != nil {
		_ = node.SetExpected(n.expect)
	}
}

// Close leaves the cluster and stops the node; pending decisions fail
// with cluster.ErrClosed. It is idempotent. With Config.StateDir it saves
// a last snapshot once the node has left gossip (no peer forwards to it
// any more) and before it stops; an error of that save is returned.
//
// With peers (Config.Peer), Close first hands the node's state over
// (cluster.Node.Leave: gdrl transfers its capacity shares to its buddy),
// waiting at most 2 s for the peers to acknowledge it; a hand-over that
// does not complete in time is not an error (what was not handed over is
// inherited by the buddy once gossip reports the node gone). Then it
// leaves gossip (announcing the departure for up to 1 s) and stops.
func (n *Node) Close() error {
	n.once.Do(func() {
		close(n.stop)
		if n.ms != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = n.node.Leave(ctx) // a timeout only means the buddy inherits the rest
			cancel()
			_ = n.ms.Leave(time.Second)
			n.err = n.ms.Shutdown()
		}
		if p := n.persist; p != nil {
			<-p.done
			if err := p.save(n.node); err != nil && n.err == nil {
				n.err = fmt.Errorf("limiter: last snapshot: %w", err)
			}
		}
		if err := n.node.Close(); n.err == nil {
			n.err = err
		}
		if p := n.persist; p != nil {
			if err := p.store.Close(); err != nil && n.err == nil {
				n.err = err
			}
		}
	})
	return n.err
}

// Cluster returns the underlying cluster node (Stats, Rules, SetMembers).
func (n *Node) Cluster() *cluster.Node { return n.node }

// PeerStats returns the gRPC peer transport's counters (refused frames by
// reason included); false without a networked peer transport.
func (n *Node) PeerStats() (grpcpeer.Stats, bool) {
	if n.tr == nil {
		return grpcpeer.Stats{}, false
	}
	return n.tr.Stats(), true
}

// WireVersion is the highest peer wire version every live member speaks
// (membership.Membership.ClusterWireVersion: 1 while a member of the build
// before wire versions is live); 0 without gossip.
func (n *Node) WireVersion() uint32 {
	if n.ms == nil {
		return 0
	}
	return n.ms.ClusterWireVersion()
}

// PeerAddr is the bound gRPC peer address ("" without Config.Peer).
func (n *Node) PeerAddr() string {
	if n.tr == nil {
		return ""
	}
	return n.tr.Addr()
}

// GossipAddr is the bound gossip address ("" without Config.Peer).
func (n *Node) GossipAddr() string {
	if n.ms == nil {
		return ""
	}
	return n.ms.LocalAddr()
}

// Members is the live members (sorted, Self included) that gossip last
// handed to the node's strategies; nil without Config.Peer or before the
// first membership change.
func (n *Node) Members() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.members)
}

// Limiter returns the limiter of one of the node's rules; the error wraps
// ErrUnknownRule for a rule the node lacks.
func (n *Node) Limiter(rule string) (*Limiter, error) {
	n.rulesMu.RLock()
	r, ok := n.rules[rule]
	n.rulesMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownRule, rule)
	}
	params, _ := strategy.ParseParams(r.Params) // validated at Start or SetRules
	return &Limiter{node: n.node, ref: n.node.Ref(r.Name), rule: r.Name, rate: r.Rate.PerSec(), burst: r.Burst,
		overdraft: strategy.OverdraftIn(params)}, nil
}

// Limiter limits the keys of one rule, on behalf of the whole cluster. It
// is safe for concurrent use.
type Limiter struct {
	node  *cluster.Node
	ref   *cluster.RuleRef // the rule, looked up once per reload (the fast path's cost)
	rule  string
	rate  float64 // tokens per second
	burst int64
	// overdraft: the rule's params turn overdraft on (strategy.OverdraftIn):
	// Settle may charge more than was reserved.
	overdraft bool
}

// Rule is the name of the rule this limiter enforces.
func (l *Limiter) Rule() string { return l.rule }

// Limit is the rule's rate in tokens per second, the whole cluster's.
func (l *Limiter) Limit() float64 { return l.rate }

// Burst is the rule's burst in tokens, the whole cluster's.
func (l *Limiter) Burst() int64 { return l.burst }

// Allow is AllowN(context.Background(), key, 1), with an error reported as
// a refusal.
func (l *Limiter) Allow(key string) bool {
	ok, err := l.AllowN(context.Background(), key, 1)
	return ok && err == nil
}

// AllowN asks the cluster for n tokens of key now: true if admitted (the
// tokens are spent), false if refused. It blocks until the rule's strategy
// decides (a network round trip for owner at a non-owner node) or ctx
// ends. Under local, central, static, owner (at the key's owner), lease
// and regionlease (from a lease the node holds), adaptive and gdrl (from
// the node's share) most admissions are taken in the caller's goroutine
// from the key's allowance (cluster's fast path: no channel hand-off, no
// allocation, no clock read, no write to memory another key's checks
// use), exactly within the rule's envelope; lease, regionlease, adaptive
// and gdrl also refuse a key in the caller's goroutine for up to 5 ms
// while they know they would refuse it (refusal windows). Under local,
// central and static the node lends the fast path the key's whole bucket
// after its second check: from then on
// a check the allowance cannot cover refills it in the caller's
// goroutine too (the key's own mutex and one clock read, about 130 ns),
// admitted or refused, and the node's loop is not involved until the key
// goes idle (500 ms) or the node's rules, members or state are read or
// changed (SetRules, a membership change, a snapshot). A caller on
// several cores thus shares nothing with the others but the keys it
// checks (docs/PERFORMANCE.md, "The embedded limiter on 2 cores").
// Errors are cluster.Node.Check's: a bad key or n, ctx.Err(),
// cluster.ErrClosed.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (bool, error) {
	return l.ref.Allow(ctx, key, n)
}

// Reservation is the outcome of Reserve: admitted now, admitted with a
// delay (tokens reserved ahead, under owner and lease: waiting mode), or
// refused with a delay after which to ask again.
type Reservation struct {
	ok      bool
	allowed bool
	tokens  int64
	at      time.Time // when to act: proceed (allowed) or ask again
	l       *Limiter  // for Settle
	key     string
	settled atomic.Bool
}

// OK reports whether the request can ever be admitted: n <= burst and a
// positive rate (or an admission now). When false, Delay is InfDuration.
func (r *Reservation) OK() bool { return r.ok }

// Allowed reports whether the tokens were admitted (and spent) at Reserve;
// the caller may act after Delay (0 unless they were reserved ahead).
func (r *Reservation) Allowed() bool { return r.allowed }

// Tokens is the n (tokens) the reservation was made for.
func (r *Reservation) Tokens() int64 { return r.tokens }

// InfDuration is the Delay of a reservation that is not OK (as in x/time/rate).
const InfDuration = time.Duration(math.MaxInt64)

// Delay is DelayFrom(time.Now()).
func (r *Reservation) Delay() time.Duration { return r.DelayFrom(time.Now()) }

// DelayFrom is how long after t to wait: for admitted tokens, until they
// may be used (0 unless reserved ahead in waiting mode); InfDuration when
// not OK. For a refusal it is how long to wait before asking again: the
// time the rule's rate takes to refill n tokens, n/r: an upper bound on
// when a single bucket holding fewer than n tokens (but not in debt) has n
// again, assuming no one else takes them. The cluster's buckets may refill
// sooner (a request of someone else's that raced ours), or the tokens may
// go to other callers first; the estimate does not reserve them. Under
// strategies that split the limit between nodes (static, gdrl, adaptive)
// a node's share refills more slowly than r, so the first retry may be
// refused again; Wait simply retries.
func (r *Reservation) DelayFrom(t time.Time) time.Duration {
	if !r.ok {
		return InfDuration
	}
	return max(r.at.Sub(t), 0)
}

// Cancel does nothing: an admitted request's tokens, reserved ahead or
// not, are spent at the cluster, and a refused one holds none. (In
// x/time/rate, Cancel restores the reserved tokens; here Settle(ctx, 0)
// gives them back, under the strategies that keep a bucket per key.)
func (r *Reservation) Cancel() {}

// Reserve asks for n tokens of key now and reports the outcome as a
// Reservation. Under owner and lease it is a real reservation (waiting
// mode, SRTM §5.2; cluster.Node.CheckWait): the key's owner reserves
// the tokens in arrival order when its bucket holds them within b/r (the
// time the rate refills one burst; lease: within its max_wait parameter),
// and the Reservation is Allowed with the Delay until they may be used.
// Under local, static, gdrl and adaptive (with its max_wait parameter) the
// node's bucket or sub-token bucket reserves them the same way. Under
// gcounter, tbqueue and regionlease (strategy.CheckWait says why), and
// beyond that wait, it is AllowN: Allowed
// (Delay 0) when admitted now; otherwise OK with a Delay after which to
// try again (see DelayFrom). Not OK when n exceeds the burst (then the
// cluster is not asked) or when refused under a rate of 0. Errors are
// AllowN's.
func (l *Limiter) Reserve(ctx context.Context, key string, n int64) (*Reservation, error) {
	return l.reserve(ctx, key, n, l.fillTime())
}

// fillTime is b/r, the time the rule's rate takes to refill one burst,
// capped at cluster.MaxWait: the longest wait Reserve accepts.
func (l *Limiter) fillTime() time.Duration {
	if l.rate <= 0 {
		return 0
	}
	d := float64(l.burst) / l.rate * float64(time.Second)
	if d >= float64(cluster.MaxWait) {
		return cluster.MaxWait
	}
	return time.Duration(d)
}

// reserve is Reserve accepting a wait of at most maxWait.
func (l *Limiter) reserve(ctx context.Context, key string, n int64, maxWait time.Duration) (*Reservation, error) {
	now := time.Now()
	if n > l.burst {
		return &Reservation{tokens: n, l: l, key: key}, nil
	}
	d, err := l.node.CheckWait(ctx, l.rule, key, n, min(max(maxWait, 0), cluster.MaxWait))
	if err != nil {
		return nil, err
	}
	ok := d.Allowed
	r := &Reservation{ok: true, allowed: ok, tokens: n, at: now.Add(d.Delay), l: l, key: key}
	if !ok {
		if l.rate <= 0 {
			r.ok = false
			return r, nil
		}
		r.at = time.Now().Add(l.retryAfter(n))
	}
	return r, nil
}

// retryAfter is n/r, at least a millisecond.
func (l *Limiter) retryAfter(n int64) time.Duration {
	d := float64(n) / l.rate * float64(time.Second)
	if d >= float64(InfDuration) {
		return InfDuration
	}
	return max(time.Duration(d), time.Millisecond)
}

// Wait blocks until n tokens of key are admitted (and spent). Under owner
// and lease it reserves them (Reserve, waiting mode) with a wait of at
// most the time left until ctx's deadline (b/r without one) and sleeps
// until they may be used: one check, FCFS with every other waiter of the
// key. Otherwise, or when the bucket is booked beyond that, it asks again
// after each refusal's estimated delay (Reservation.DelayFrom). It
// returns ctx.Err() when ctx ends first (tokens reserved and not yet
// reached stay spent), and fails at once, without asking, when n exceeds
// the burst (wrapping ErrExceedsBurst) or the rate is 0 and the first
// attempt is refused. Other errors are AllowN's.
func (l *Limiter) Wait(ctx context.Context, key string, n int64) error {
	if n > l.burst {
		return fmt.Errorf("%w: Wait(n=%d) on rule %q with burst %d", ErrExceedsBurst, n, l.rule, l.burst)
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		maxWait := l.fillTime()
		if dl, ok := ctx.Deadline(); ok {
			maxWait = min(maxWait, time.Until(dl))
		}
		r, err := l.reserve(ctx, key, n, maxWait)
		if err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return ctxErr
			}
			return err
		}
		if !r.OK() {
			return fmt.Errorf("limiter: rule %q has rate 0: %d tokens cannot be admitted", l.rule, n)
		}
		d := r.Delay()
		if r.Allowed() && d == 0 {
			return nil
		}
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-timer.C:
			if r.Allowed() { // reserved: its time has come
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// withDefaults returns rules with an empty Strategy set to
// rule.DefaultStrategy (a copy; rules is not changed).
func withDefaults(rules []rule.Rule) []rule.Rule {
	out := slices.Clone(rules)
	for i := range out {
		if out[i].Strategy == "" {
			out[i].Strategy = rule.DefaultStrategy
		}
	}
	return out
}

// checkCentral refuses a centralized strategy (central: the evaluator's
// one-bucket reference) on a node with peers (multi: Peer, or InProcess
// with more than one member), where every node would keep its own bucket
// and admit up to N times the limit. Start and SetRules both call it.
func checkCentral(rules []rule.Rule, multi bool) error {
	if !multi {
		return nil
	}
	for _, r := range rules {
		if info, err := registry.Lookup(r.Strategy); err == nil && info.Centralized {
			return fmt.Errorf("limiter: rule %q: strategy %q is the evaluator's reference (one bucket for the whole cluster, run by the simulator as a single node); in a cluster every node would keep its own bucket and admit up to N times the limit: use owner for an exact limit", r.Name, r.Strategy)
		}
	}
	return nil
}
