// Package membership runs the cluster's membership and failure detection
// with hashicorp/memberlist (SWIM gossip). Every member publishes its gRPC
// peer address in its memberlist node metadata; the package turns the
// memberlist's join, leave and update events into one ordered stream of
// member lists (node name -> peer address) for cluster.Node and the
// grpcpeer address book (see Wire).
package membership

import (
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/cluster/grpcpeer"
	"github.com/tokenmesh/tokenmesh/strategy"
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

	// Failure-detector timers; zero keeps memberlist's LAN default. Tests
	// shorten them.
	ProbeInterval  time.Duration // between failure probes (LAN: 1s)
	ProbeTimeout   time.Duration // wait for a probe's ack (LAN: 500ms)
	GossipInterval time.Duration // between gossip rounds (LAN: 200ms)
	SuspicionMult  int           // suspicion timeout, in probe intervals (scaled by log N; LAN: 4)
	TCPTimeout     time.Duration // push-pull and join connections (LAN: 10s)
	// DeadNodeReclaimTime is how long after a member died or left its name
	// may come back from a different address (a restart on a new IP or
	// port). Zero keeps memberlist's default: not until the dead member
	// has been forgotten (about 30s at LAN timers).
	DeadNodeReclaimTime time.Duration

	// OnChange is called with the live members (Self included) after every
	// membership change, from one goroutine, in order; changes that
	// arrive while it runs are coalesced into the next call. The map is
	// the callee's. OnChange must not call Shutdown or Leave. Nil: no calls.
	OnChange func(members map[strategy.NodeID]string)
	// Logger receives memberlist's log; nil discards it.
	Logger *log.Logger
}

// Membership is one running member. Its methods are safe for concurrent
// use.
type Membership struct {
	ml       *memberlist.Memberlist
	onChange func(map[strategy.NodeID]string)

	mu      sync.Mutex
	members map[strategy.NodeID]string

	wake     chan struct{} // cap 1: a change is waiting for delivery
	done     chan struct{} // closed by Shutdown
	stopped  chan struct{} // closed when the delivery goroutine returns
	shutOnce sync.Once
	shutErr  error
}

// New starts the member and, if cfg.Join is set, joins the cluster. The
// first OnChange (with at least Self) is delivered soon after New returns.
// Errors: an empty NodeName, a bad SecretKey, a bind failure, a join
// that reached none of cfg.Join.
func New(cfg Config) (*Membership, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("membership: NodeName is empty")
	}
	if len(cfg.PeerAddr) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("membership: PeerAddr is longer than %d bytes", memberlist.MetaMaxSize)
	}
	if k := len(cfg.SecretKey); k != 0 && k != 16 && k != 24 && k != 32 {
		return nil, fmt.Errorf("membership: SecretKey is %d bytes, want 16, 24 or 32", k)
	}
	m := &Membership{
		onChange: cfg.OnChange,
		members:  map[strategy.NodeID]string{},
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		stopped:  make(chan struct{}),
	}
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
	setDur(&mc.ProbeInterval, cfg.ProbeInterval)
	setDur(&mc.ProbeTimeout, cfg.ProbeTimeout)
	setDur(&mc.GossipInterval, cfg.GossipInterval)
	setDur(&mc.TCPTimeout, cfg.TCPTimeout)
	setDur(&mc.DeadNodeReclaimTime, cfg.DeadNodeReclaimTime)
	if cfg.SuspicionMult > 0 {
		mc.SuspicionMult = cfg.SuspicionMult
	}
	if cfg.ProbeInterval > 0 {
		// Keep the periodic full-state sync in proportion (LAN: 30s).
		mc.PushPullInterval = 30 * cfg.ProbeInterval
	}
	mc.Delegate = &delegate{meta: []byte(cfg.PeerAddr)}
	mc.Events = &events{m: m}
	if cfg.Logger != nil {
		mc.Logger = cfg.Logger
	} else {
		mc.LogOutput = io.Discard
	}

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
	return m, nil
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

// LocalAddr is this member's gossip address ("host:port"): what others
// put in their Join.
func (m *Membership) LocalAddr() string { return m.ml.LocalNode().Address() }

// Leave tells the cluster this member is leaving, waits up to timeout for
// the message to spread, then shuts the member down. The others drop it
// at once instead of after failure detection. The last OnChange before
// the shutdown may list the others without Self.
func (m *Membership) Leave(timeout time.Duration) error {
	err := m.ml.Leave(timeout)
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
		if m.onChange != nil {
			m.onChange(m.Members())
		}
	}
}

func (m *Membership) set(n *memberlist.Node, alive bool) {
	m.mu.Lock()
	id := strategy.NodeID(n.Name)
	if alive {
		m.members[id] = string(n.Meta)
	} else {
		delete(m.members, id)
	}
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// events is memberlist's EventDelegate. memberlist calls it with its node
// lock held: it must not block or call back into the memberlist.
type events struct{ m *Membership }

func (e *events) NotifyJoin(n *memberlist.Node)   { e.m.set(n, true) }
func (e *events) NotifyLeave(n *memberlist.Node)  { e.m.set(n, false) }
func (e *events) NotifyUpdate(n *memberlist.Node) { e.m.set(n, true) }

// delegate publishes the peer address as node metadata; the rest of
// memberlist's Delegate (user messages, state exchange) is unused.
type delegate struct{ meta []byte }

func (d *delegate) NodeMeta(limit int) []byte {
	if len(d.meta) > limit {
		return nil
	}
	return d.meta
}
func (d *delegate) NotifyMsg([]byte)                           {}
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
