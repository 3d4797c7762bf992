// Package membership runs the cluster's membership and failure detection
// with hashicorp/memberlist (SWIM gossip). Every member publishes its gRPC
// peer address in its memberlist node metadata; the package turns the
// memberlist's join, leave and update events into one ordered stream of
// member lists (node name -> peer address) for cluster.Node and the
// grpcpeer address book (see Wire).
//
// Healing. memberlist stops contacting a member it declared dead (it
// gossips to it for GossipToTheDeadTime, 30 s at LAN timers, then forgets
// it), so the two sides of a partition that outlived failure detection
// would never merge again. Membership therefore remembers the gossip
// address of every member that failed (not one that left) and, every
// ReconnectInterval until ReconnectTimeout, joins one of them at random,
// and also every Seeds address that is no live member's: the sides of a
// healed partition merge, and so do two clusters founded apart (a
// partition at first boot). To tell a member that left from one that
// failed (memberlist reports both as a leave, and its Node.State is not
// filled in), Leave first sends every member a leave intent (a memberlist
// user message, encrypted like the rest of gossip), as serf does.
//
// This is the reconnect behaviour of hashicorp/serf
// (serf.Config.ReconnectInterval / ReconnectTimeout, serf.go
// handleReconnect: "attempt to join a random failed member") rebuilt on
// memberlist: theirs is the idea and the two settings; ours is
// the seeds retry (serf's agent does that separately, retry_join) and the
// code. We did not take serf itself: it brings its own event, query and
// Lamport-clock layer and replaces memberlist node metadata with encoded
// tags, for one behaviour that is about a hundred lines here.
//
// Wire versions. A member advertises the highest peer wire version it
// speaks (Config.WireVersion, grpcpeer.WireVersionMax) in memberlist's
// delegate protocol maximum (Node.DMax, gossiped in every alive message),
// not in the node metadata: a node of the build before versions uses the
// whole metadata as the peer address to dial, so the metadata stays the
// bare address. Delegate minimum and current stay 0, as that build's are
// (memberlist refuses a state exchange in which a member's current
// delegate version is outside another's [min, max]); a DMax of 0 is a
// node of that build: version 1 only. WireVersions reports each live
// member's, ClusterWireVersion the highest all live members share.
package membership

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/cluster/grpcpeer"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// Log messages of membership changes (the slog msg field, at Info), fixed
// so that tools can read an operator's log: replay measures the live
// failure detection from them (replay.MeasureDetection).
const (
	MsgMemberJoined = "membership: member joined"
	MsgMemberLeft   = "membership: member left"
	MsgMemberFailed = "membership: member failed"
	MsgReconnected  = "membership: reconnected"
	// MsgNameClaimed: a member's name was announced from a new address
	// (a restart on a new port or IP); it is joined there until taken back.
	MsgNameClaimed = "membership: member name claimed from a new address"
)

// Config is one member.
type Config struct {
	// NodeName is the member's name in the cluster: its strategy.NodeID.
	// Names must be unique.
	NodeName string
	// BindAddr and BindPort are the gossip (UDP and TCP) listen address.
	// BindAddr "" is 0.0.0.0; BindPort 0 picks a free port (LocalAddr
	// reports it).
	BindAddr string
	BindPort int
	// AdvertiseAddr is the address the other members reach this one at
	// ("" : derived from BindAddr or the host's private address). The
	// advertised port is the bound port.
	AdvertiseAddr string
	// Join is the addresses ("host:port") of existing members to join
	// through. Empty: this member founds a cluster. New fails if none of
	// them could be joined.
	Join []string
	// SecretKey, when set (16, 24 or 32 bytes: AES-128/192/256), is the
	// memberlist keyring's key: gossip is encrypted and authenticated, and
	// members without the key can neither join nor be joined.
	SecretKey []byte
	// PeerAddr is this member's grpcpeer address, published to the others
	// in the memberlist node metadata (at most memberlist.MetaMaxSize
	// bytes).
	PeerAddr string
	// WireVersion is the highest peer wire version this member speaks
	// (grpcpeer.WireVersionMax), advertised as memberlist's delegate
	// protocol maximum. 0: not advertised (read by the others as 1).
	WireVersion uint8
	// OnVersions, when set, is called before every OnChange (same
	// goroutine, same coalescing) with WireVersions.
	OnVersions func(map[strategy.NodeID]uint32)

	// Failure-detector timers; zero keeps memberlist's LAN default. Tests
	// shorten them.
	ProbeInterval  time.Duration // between failure probes (LAN: 1s)
	ProbeTimeout   time.Duration // wait for a probe's ack (LAN: 500ms)
	GossipInterval time.Duration // between gossip rounds (LAN: 200ms)
	SuspicionMult  int           // suspicion timeout, in probe intervals (scaled by log N; LAN: 4)
	TCPTimeout     time.Duration // push-pull and join connections (LAN: 10s)
	// DeadNodeReclaimTime is how long after a member died or left its name
	// may come back from a different address (a restart on a new IP or
	// port, as a pod gets). Zero: DefaultDeadNodeReclaimTime; negative:
	// memberlist's own default, not until the dead member has been
	// forgotten (about 30s at LAN timers), during which the restarted
	// member is refused as a name conflict.
	DeadNodeReclaimTime time.Duration

	// ReconnectInterval is how often the member tries to rejoin failed
	// members and the Seeds that are not live members. Zero:
	// DefaultReconnectInterval; negative: never (a partition then splits
	// the cluster for good once failure detection has run).
	ReconnectInterval time.Duration
	// ReconnectTimeout is how long a failed member is retried before it
	// is forgotten. Zero: DefaultReconnectTimeout. Seeds are never
	// forgotten.
	ReconnectTimeout time.Duration
	// Seeds are gossip addresses ("host:port") tried every
	// ReconnectInterval while no live member (Self included) has that
	// address: typically the configured join addresses, so a member that
	// founded a cluster alone (nobody answered at start) merges with the
	// others once they can be reached. Unlike Join, New does not contact
	// them and does not fail when they are down.
	Seeds []string
	// Log, when set, receives the membership changes at Info (member
	// joined, failed, left; a reconnect that merged members) and failed
	// reconnect attempts at Debug. Nil: none.
	Log *slog.Logger

	// transport, when set (tests), is memberlist's transport instead of
	// a NetTransport bound to BindAddr:BindPort.
	transport memberlist.Transport

	// OnChange is called with the live members (Self included) after every
	// membership change, from one goroutine, in order; changes that
	// arrive while it runs are coalesced into the next call. The map is
	// the callee's. OnChange must not call Shutdown or Leave. Nil: no calls.
	OnChange func(members map[strategy.NodeID]string)
	// OnExpected, when set, is called after OnChange (same goroutine,
	// same coalescing) with the last agreed members (Expected): the live
	// ones plus those that failed less than ReconnectTimeout ago, for
	// cluster.Node.SetExpected (partition: conserve). It is also called
	// when a failed member is given up on or its leave intent arrives
	// late. The slice is the callee's.
	OnExpected func(expected []strategy.NodeID)
	// OnRTT, when set, receives the round trip of every direct probe of a
	// member that was acknowledged in time, as memberlist measured it, and
	// when (rtt.go; cluster.LatencyEstimator.Observe). It is called from
	// memberlist's probe goroutine and must not block.
	OnRTT func(peer strategy.NodeID, rtt time.Duration, at time.Time)
	// Logger receives memberlist's log; nil discards it.
	Logger *log.Logger
}

// Membership is one running member. Its methods are safe for concurrent
// use.
type Membership struct {
	ml         *memberlist.Memberlist
	onChange   func(map[strategy.NodeID]string)
	onVersions func(map[strategy.NodeID]uint32)
	onExpected func([]strategy.NodeID)
	log        *slog.Logger // never nil
	self       strategy.NodeID

	reconnectInterval time.Duration
	reconnectTimeout  time.Duration
	seeds             []string

	mu      sync.Mutex
	members map[strategy.NodeID]string
	wire    map[strategy.NodeID]uint32 // live members' highest wire versions
	addrs   map[strategy.NodeID]string // live members' gossip addresses
	failed  map[strategy.NodeID]failedMember
	left    map[strategy.NodeID]time.Time    // leave intents received, for leftMemory
	claims  map[strategy.NodeID]failedMember // a member's name claimed from a new address (a restart), for reconnect
	leaving bool

	wake     chan struct{} // cap 1: a change is waiting for delivery
	done     chan struct{} // closed by Shutdown
	stopped  chan struct{} // closed when the delivery goroutine returns
	shutOnce sync.Once
	shutErr  error
}

// DefaultReconnectInterval is Config.ReconnectInterval's default: with
// the LAN failure detector (probe 1 s, suspicion about 4-6 s) a healed
// partition is whole again within about 5 s + one join round trip, well
// inside 15 s.
const DefaultReconnectInterval = 5 * time.Second

// DefaultReconnectTimeout is Config.ReconnectTimeout's default, serf's
// (24 h): a partition of up to a day heals by itself; a member gone for
// good costs one failed join per interval until then.
const DefaultReconnectTimeout = 24 * time.Hour

// DefaultDeadNodeReclaimTime is Config.DeadNodeReclaimTime's default: a
// member declared dead (or left) may come back under its name from a new
// address one second later, so a node restarted on a new port or IP
// rejoins at once instead of being refused as a name conflict until the
// dead member is forgotten (memberlist's default, about 30 s). Only a
// member whose old incarnation is already dead or left can be replaced;
// with a gossip SecretKey, only key holders can claim a name at all.
const DefaultDeadNodeReclaimTime = time.Second

// leftMemory is how long a leave intent is remembered: a member reported
// gone within that time after its intent arrived left, not failed.
const leftMemory = 2 * time.Minute

// leaveIntentPrefix starts a leave intent user message; the leaving
// member's name follows.
const leaveIntentPrefix = "tokenmesh-leave\x00"

// failedMember is a member that failed (was declared dead, not left).
type failedMember struct {
	addr  string // gossip host:port
	since time.Time
}

// New starts the member and, if cfg.Join is set, joins the cluster. The
// first OnChange (with at least Self) is delivered soon after New returns.
// Errors: an empty NodeName, a bad SecretKey, a negative
// ReconnectTimeout, a Seeds entry that is not "host:port", a bind
// failure, a join that reached none of cfg.Join.
func New(cfg Config) (*Membership, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	m := &Membership{
		onChange:          cfg.OnChange,
		onExpected:        cfg.OnExpected,
		log:               cfg.Log,
		self:              strategy.NodeID(cfg.NodeName),
		reconnectInterval: cmp.Or(cfg.ReconnectInterval, DefaultReconnectInterval),
		reconnectTimeout:  cmp.Or(cfg.ReconnectTimeout, DefaultReconnectTimeout),
		seeds:             slices.Clone(cfg.Seeds),
		members:           map[strategy.NodeID]string{},
		wire:              map[strategy.NodeID]uint32{},
		onVersions:        cfg.OnVersions,
		addrs:             map[strategy.NodeID]string{},
		failed:            map[strategy.NodeID]failedMember{},
		left:              map[strategy.NodeID]time.Time{},
		claims:            map[strategy.NodeID]failedMember{},
		wake:              make(chan struct{}, 1),
		done:              make(chan struct{}),
		stopped:           make(chan struct{}),
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	m.log = m.log.With("member", cfg.NodeName)
	mc := cfg.memberlistConfig()
	mc.Delegate = &delegate{meta: []byte(cfg.PeerAddr), m: m}
	mc.Events = &events{m: m}
	mc.Conflict = &conflicts{m: m}

	go m.deliver()
	ml, err := memberlist.Create(mc)
	if err != nil {
		close(m.done)
		<-m.stopped
		return nil, fmt.Errorf("membership: %w", err)
	}
	m.ml = ml
	if len(cfg.Join) > 0 {
		if _, err := ml.Join(cfg.Join); err != nil {
			_ = m.Shutdown()
			return nil, fmt.Errorf("membership: join: %w", err)
		}
	}
	if m.reconnectInterval > 0 {
		go m.reconnect()
	}
	return m, nil
}

// check checks cfg's fields (New's errors but the bind's and the join's).
func (cfg Config) check() error {
	if cfg.NodeName == "" {
		return errors.New("membership: NodeName is empty")
	}
	if len(cfg.PeerAddr) > memberlist.MetaMaxSize {
		return fmt.Errorf("membership: PeerAddr is longer than %d bytes", memberlist.MetaMaxSize)
	}
	if k := len(cfg.SecretKey); k != 0 && k != 16 && k != 24 && k != 32 {
		return fmt.Errorf("membership: SecretKey is %d bytes, want 16, 24 or 32", k)
	}
	if cfg.ReconnectTimeout < 0 {
		return fmt.Errorf("membership: ReconnectTimeout %v is negative", cfg.ReconnectTimeout)
	}
	for _, s := range cfg.Seeds {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return fmt.Errorf("membership: seed %q: %w", s, err)
		}
	}
	return nil
}

// memberlistConfig is memberlist's LAN configuration with cfg's name,
// addresses, key, timings, versions, RTT hook, logger and transport (the
// delegates that need the Membership are New's).
func (cfg Config) memberlistConfig() *memberlist.Config {
	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.NodeName
	if cfg.BindAddr != "" {
		mc.BindAddr = cfg.BindAddr
	}
	mc.BindPort = cfg.BindPort
	mc.AdvertisePort = cfg.BindPort // BindPort 0: memberlist sets both to the bound port
	mc.AdvertiseAddr = cfg.AdvertiseAddr
	if len(cfg.SecretKey) > 0 {
		mc.SecretKey = slices.Clone(cfg.SecretKey)
	}
	cfg.setTimings(mc)
	if cfg.transport != nil {
		mc.Transport = cfg.transport
		if nt, ok := cfg.transport.(interface{ GetAutoBindPort() int }); ok && cfg.BindPort == 0 {
			mc.BindPort, mc.AdvertisePort = nt.GetAutoBindPort(), nt.GetAutoBindPort()
		}
	}
	// Minimum and current stay 0 (see "Wire versions" above).
	mc.DelegateProtocolMin, mc.DelegateProtocolVersion, mc.DelegateProtocolMax = 0, 0, cfg.WireVersion
	if cfg.OnRTT != nil {
		mc.Ping = &pings{on: cfg.OnRTT}
	}
	if cfg.Logger != nil {
		mc.Logger = cfg.Logger
	} else {
		mc.LogOutput = io.Discard
	}
	return mc
}

// setTimings sets mc's probe, gossip, TCP, suspicion and reclaim times
// from cfg (each kept at memberlist's LAN value when cfg's is 0).
func (cfg Config) setTimings(mc *memberlist.Config) {
	setDur(&mc.ProbeInterval, cfg.ProbeInterval)
	setDur(&mc.ProbeTimeout, cfg.ProbeTimeout)
	if cfg.ProbeTimeout == 0 && mc.ProbeTimeout > mc.ProbeInterval/2 {
		// A probe waits ProbeTimeout for the direct ack, then asks others
		// to probe until the interval ends: a short interval needs a
		// shorter timeout (LAN: 500 ms of 1 s).
		mc.ProbeTimeout = mc.ProbeInterval / 2
	}
	setDur(&mc.GossipInterval, cfg.GossipInterval)
	setDur(&mc.TCPTimeout, cfg.TCPTimeout)
	switch {
	case cfg.DeadNodeReclaimTime == 0:
		mc.DeadNodeReclaimTime = DefaultDeadNodeReclaimTime
	case cfg.DeadNodeReclaimTime > 0:
		mc.DeadNodeReclaimTime = cfg.DeadNodeReclaimTime
	}
	if cfg.SuspicionMult > 0 {
		mc.SuspicionMult = cfg.SuspicionMult
	}
	if cfg.ProbeInterval > 0 {
		// Keep the periodic full-state sync in proportion (LAN: 30s).
		mc.PushPullInterval = 30 * cfg.ProbeInterval
		// And how long the dead are still gossiped to (LAN: 30s).
		mc.GossipToTheDeadTime = 30 * cfg.ProbeInterval
	}
}

func setDur(dst *time.Duration, v time.Duration) {
	if v > 0 {
		*dst = v
	}
}

// Join contacts the members at addrs (gossip "host:port") and merges
// their state into this member's; it returns how many answered, and an
// error when none did. A member that founded a cluster alone uses it to
// merge with one it could not reach at start.
func (m *Membership) Join(addrs []string) (int, error) {
	n, err := m.ml.Join(addrs)
	if err != nil {
		return n, fmt.Errorf("membership: join: %w", err)
	}
	return n, nil
}

// Members returns the live members as this member sees them (name -> peer
// address, Self included).
func (m *Membership) Members() map[strategy.NodeID]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.members)
}

// WireVersions is the highest peer wire version of every live member
// (Self included): 1 for a member of the build before versions. A member
// restarted under another build before it was declared dead keeps its
// previous entry until its next join (memberlist reports a change of
// versions alone to no delegate); grpcpeer's Hello corrects the links.
func (m *Membership) WireVersions() map[strategy.NodeID]uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.wire)
}

// ClusterWireVersion is the highest wire version every live member speaks
// (the lowest of their maxima; 1 with a member of the build before
// versions, 0 with no member).
func (m *Membership) ClusterWireVersion() uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := uint32(0)
	for _, w := range m.wire {
		if v == 0 || w < v {
			v = w
		}
	}
	return v
}

// wireVersion reads a member's delegate protocol maximum as its highest
// wire version: 0 (not advertised) is 1.
func wireVersion(dmax uint8) uint32 { return max(uint32(dmax), 1) }

// LocalAddr is this member's gossip address ("host:port"): what others
// put in their Join.
func (m *Membership) LocalAddr() string { return m.ml.LocalNode().Address() }

// Leave tells the cluster this member is leaving, waits up to timeout for
// the message to spread, then shuts the member down. The others drop it
// at once instead of after failure detection. The last OnChange before
// the shutdown may list the others without Self.
//
// Before that it sends every live member a leave intent (over TCP, in
// parallel, for at most half of timeout, which the announcement's wait
// then uses less of), so that they remember it as left and do not try
// to reconnect to it.
func (m *Membership) Leave(timeout time.Duration) error {
	m.mu.Lock()
	m.leaving = true // no more reconnects
	m.mu.Unlock()
	begin := time.Now()
	m.sendLeaveIntent(timeout / 2)
	err := m.ml.Leave(max(timeout-time.Since(begin), timeout/2))
	if serr := m.Shutdown(); err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("membership: leave: %w", err)
	}
	return nil
}

// Shutdown stops the member without telling the cluster (the others see a
// crash and drop it after failure detection) and stops OnChange calls. It
// is idempotent and returns once the last OnChange call has returned.
func (m *Membership) Shutdown() error {
	m.shutOnce.Do(func() {
		m.shutErr = m.ml.Shutdown()
		close(m.done)
	})
	<-m.stopped
	return m.shutErr
}

// sendLeaveIntent sends the leave intent to every other live member and
// waits for the sends, at most wait.
func (m *Membership) sendLeaveIntent(wait time.Duration) {
	msg := []byte(leaveIntentPrefix + string(m.self))
	var wg sync.WaitGroup
	for _, n := range m.ml.Members() {
		if n.Name == string(m.self) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = m.ml.SendReliable(n, msg) // a lost intent: the member is retried as failed
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(wait):
	}
}

// leaveIntent records that name announced it is leaving. A member already
// recorded as failed (the intent arrived after the departure) is
// forgotten.
func (m *Membership) leaveIntent(name string) {
	id := strategy.NodeID(name)
	if id == m.self || len(name) == 0 || len(name) > maxNameBytes {
		return
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for n, at := range m.left { // bounded: entries expire
		if now.Sub(at) > leftMemory {
			delete(m.left, n)
		}
	}
	if len(m.left) >= maxLeftIntents {
		return
	}
	m.left[id] = now
	if _, ok := m.failed[id]; ok {
		delete(m.failed, id)
		m.signal() // it stops being expected
	}
}

// signal wakes the delivery goroutine (OnChange, OnExpected).
func (m *Membership) signal() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Expected returns the last agreed members, sorted: the live members
// (Self included) and the members that failed (were declared dead without
// a leave intent) less than ReconnectTimeout ago, which reconnect still
// tries. A member that left with a leave intent is not among them; one
// that failed stops being expected once it is given up on. Under
// `partition: conserve` a side that sees k live of these N enforces k/N
// of each rule's limit (strategy.Conserver). Ours.
func (m *Membership) Expected() []strategy.NodeID {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]strategy.NodeID, 0, len(m.members)+len(m.failed))
	for id := range m.members {
		out = append(out, id)
	}
	for id := range m.failed {
		out = append(out, id)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// claimMemory is how long a name claim from a new address is joined
// after it was last announced: the claimant refutes being dead at every
// contact, so a live claimant renews it; a claim nobody repeats is an
// old incarnation's echo and expires.
const claimMemory = 5 * time.Minute

// Bounds on what peers can make a member remember: a name's length, and
// how many leave intents and name claims are remembered at once.
const (
	maxNameBytes   = 512
	maxLeftIntents = 4096
	maxClaims      = 4096 // names claimed from a new address, remembered at once
)

// deliver runs OnChange, one call at a time, with the newest member list.
func (m *Membership) deliver() {
	defer close(m.stopped)
	for {
		select {
		case <-m.done:
			return
		case <-m.wake:
		}
		select {
		case <-m.done:
			return
		default:
		}
		if m.onVersions != nil {
			m.onVersions(m.WireVersions())
		}
		if m.onChange != nil {
			m.onChange(m.Members())
		}
		if m.onExpected != nil {
			m.onExpected(m.Expected())
		}
	}
}

// set records a member's join (alive) or departure. A departure is a
// failure unless it is this member's or a leave intent from it arrived
// within leftMemory; set reports which.
func (m *Membership) set(n *memberlist.Node, alive bool) (failed bool) {
	m.mu.Lock()
	id := strategy.NodeID(n.Name)
	if alive {
		m.members[id] = string(n.Meta)
		m.wire[id] = wireVersion(n.DMax)
		m.addrs[id] = n.Address()
		delete(m.failed, id)
		delete(m.left, id)
	} else {
		delete(m.members, id)
		delete(m.wire, id)
		delete(m.addrs, id)
		at, left := m.left[id]
		if failed = id != m.self && !(left && time.Since(at) <= leftMemory); failed {
			m.failed[id] = failedMember{addr: n.Address(), since: time.Now()}
		} else {
			delete(m.failed, id)
		}
	}
	m.mu.Unlock()
	m.signal()
	return failed
}

// events is memberlist's EventDelegate. memberlist calls it with its node
// lock held: it must not block or call back into the memberlist.
type events struct{ m *Membership }

func (e *events) NotifyJoin(n *memberlist.Node) {
	e.m.set(n, true)
	e.m.log.Info(MsgMemberJoined, "node", n.Name, "gossip", n.Address(), "peer", string(n.Meta))
}

func (e *events) NotifyLeave(n *memberlist.Node) {
	if !e.m.set(n, false) {
		e.m.log.Info(MsgMemberLeft, "node", n.Name, "gossip", n.Address())
	} else {
		e.m.log.Info(MsgMemberFailed, "node", n.Name, "gossip", n.Address(),
			"reconnect_every", e.m.reconnectInterval.String())
	}
}

func (e *events) NotifyUpdate(n *memberlist.Node) {
	e.m.set(n, true)
	e.m.log.Info("membership: member updated", "node", n.Name, "gossip", n.Address(), "peer", string(n.Meta))
}

// conflicts is memberlist's ConflictDelegate: a member's name announced
// from another address than the one on record. That is a restart on a
// new port or IP (a pod) before the old incarnation was declared dead,
// or within DeadNodeReclaimTime of that: memberlist refuses it, and the
// restarted member, which believes it has joined, does not try again
// until its next full-state sync (about 30 s). The claim is remembered
// and the reconnect loop joins the claimant's address each round until
// the name is live there: the join's state exchange is accepted once the
// old incarnation is dead for DeadNodeReclaimTime. Called with
// memberlist's node lock held: it must not block. Ours.
type conflicts struct{ m *Membership }

func (c *conflicts) NotifyConflict(existing, other *memberlist.Node) {
	m := c.m
	id := strategy.NodeID(other.Name)
	if id == m.self || len(other.Name) > maxNameBytes {
		return
	}
	addr := other.Address()
	m.mu.Lock()
	prev, known := m.claims[id]
	if !known && len(m.claims) >= maxClaims {
		m.mu.Unlock()
		return
	}
	m.claims[id] = failedMember{addr: addr, since: time.Now()}
	m.mu.Unlock()
	if !known || prev.addr != addr {
		m.log.Info(MsgNameClaimed, "node", other.Name, "gossip", addr, "was", existing.Address())
	}
}

// reconnect runs until Shutdown: every reconnectInterval it forgets the
// failed members older than reconnectTimeout and joins one of the others
// at random and every seed that is no live member's address, each in its
// own goroutine (a join towards a partitioned address may block for
// TCPTimeout); a round starts only when the previous one has ended.
func (m *Membership) reconnect() {
	t := time.NewTicker(m.reconnectInterval)
	defer t.Stop()
	for {
		select {
		case <-m.done:
			return
		case <-t.C:
		}
		targets := m.reconnectTargets(time.Now())
		var wg sync.WaitGroup
		for _, tg := range targets {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m.tryJoin(tg)
			}()
		}
		wg.Wait()
	}
}

// target is one reconnect attempt: a failed member's address or a seed.
type target struct {
	addr  string
	node  strategy.NodeID // "" for a seed
	claim bool            // node restarted at addr (a name claim)
}

// reconnectTargets expires old failed members and picks this round's
// targets.
func (m *Membership) reconnectTargets(now time.Time) []target {
	m.mu.Lock()
	if m.leaving {
		m.mu.Unlock()
		return nil
	}
	var failed []target
	for id, f := range m.failed {
		if now.Sub(f.since) > m.reconnectTimeout {
			delete(m.failed, id)
			m.signal() // it stops being expected
			m.log.Info("membership: giving up on failed member", "node", string(id), "gossip", f.addr,
				"failed_for", now.Sub(f.since).Round(time.Second).String())
			continue
		}
		failed = append(failed, target{addr: f.addr, node: id})
	}
	live := map[string]bool{}
	for _, a := range m.addrs {
		live[a] = true
	}
	var claimed []target
	for id, c := range m.claims {
		if m.addrs[id] == c.addr || now.Sub(c.since) > claimMemory {
			delete(m.claims, id) // taken back, or no longer announced
			continue
		}
		claimed = append(claimed, target{addr: c.addr, node: id, claim: true})
	}
	m.mu.Unlock()
	var out []target
	if len(failed) > 0 {
		slices.SortFunc(failed, func(a, b target) int { return cmp.Compare(a.node, b.node) })
		out = append(out, failed[rand.IntN(len(failed))])
	}
	slices.SortFunc(claimed, func(a, b target) int { return cmp.Compare(a.node, b.node) })
	out = append(out, claimed...)
	for _, s := range m.seeds {
		if !seedIsLive(s, live) {
			out = append(out, target{addr: s})
		}
	}
	return out
}

// seedIsLive reports whether seed ("host:port") is the gossip address of
// a live member. A host name is resolved (at most 2 s); an unresolvable
// one counts as not live (the join then reports the error).
func seedIsLive(seed string, live map[string]bool) bool {
	if live[seed] {
		return true
	}
	host, port, err := net.SplitHostPort(seed)
	if err != nil {
		return false
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return live[net.JoinHostPort(ip.Unmap().String(), port)]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupHost(ctx, host)
	if err != nil {
		return false
	}
	for _, ip := range ips {
		if live[net.JoinHostPort(ip, port)] {
			return true
		}
	}
	return false
}

// tryJoin joins the member at tg and logs the outcome: Info when a failed
// member answered (the merge itself follows as "member joined" lines, as
// gossip spreads) or a seed's join brought members in, Debug otherwise.
func (m *Membership) tryJoin(tg target) {
	before := m.NumMembers()
	_, err := m.ml.Join([]string{tg.addr})
	after := m.NumMembers()
	kind := "failed member"
	switch {
	case tg.node == "":
		kind = "seed"
	case tg.claim:
		kind = "restarted member"
	}
	switch {
	case tg.claim && err == nil && m.addrOf(tg.node) != tg.addr:
		m.log.Debug("membership: restarted member not taken back yet", "node", string(tg.node), "gossip", tg.addr)
	case err != nil:
		m.log.Debug("membership: reconnect failed", "target", kind, "node", string(tg.node), "gossip", tg.addr, "err", err)
	case tg.node != "" || after > before:
		m.log.Info(MsgReconnected, "target", kind, "node", string(tg.node), "gossip", tg.addr,
			"members_before", before, "members_now", after)
	default:
		m.log.Debug("membership: reconnect answered, nothing new", "target", kind, "gossip", tg.addr, "members", after)
	}
}

// addrOf is a live member's gossip address ("" if it is not live).
func (m *Membership) addrOf(id strategy.NodeID) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.addrs[id]
}

// NumMembers is the number of live members (Self included).
func (m *Membership) NumMembers() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.members)
}

// delegate publishes the peer address as node metadata and receives
// leave intents (user messages); the rest of memberlist's Delegate
// (broadcasts, state exchange) is unused.
type delegate struct {
	meta []byte
	m    *Membership
}

func (d *delegate) NodeMeta(limit int) []byte {
	if len(d.meta) > limit {
		return nil
	}
	return d.meta
}

// NotifyMsg takes a leave intent; anything else is ignored.
func (d *delegate) NotifyMsg(b []byte) {
	if name, ok := strings.CutPrefix(string(b), leaveIntentPrefix); ok {
		d.m.leaveIntent(name)
	}
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

// Wire returns an OnChange that hands the members to tr as its address
// book and to node as its live members (names sorted). A closed node's
// error is ignored.
func Wire(node *cluster.Node, tr *grpcpeer.Transport) func(map[strategy.NodeID]string) {
	return func(members map[strategy.NodeID]string) {
		tr.SetPeers(members)
		_ = node.SetMembers(slices.Sorted(maps.Keys(members)))
	}
}
