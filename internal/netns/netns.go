// Package netns builds throw-away test hosts in Linux network namespaces,
// so that end-to-end tests can partition real processes: gossip and peer
// traffic are cut together, as on a real network, not only the data plane
// inside a process.
//
// A Lab of n hosts is n+1 namespaces: a switch namespace holding a Linux
// bridge, and one namespace per host with a veth pair ("eth0" in the host,
// "h<i>" on the bridge) and the address Subnet.i+1/24 (10.251.0.1, ...).
// The addresses exist inside the lab's namespaces only: nothing is added
// to the caller's namespace, and labs do not see each other, so they may
// run in parallel. Cut adds blackhole routes (/32) to the hosts'
// routing tables, which win over the subnet's route by longest prefix:
// sends to a cut address fail at once (UDP packets are dropped, TCP
// connects fail). Heal removes them; Close deletes the namespaces, which
// deletes the veths, the bridge and the routes with them.
//
// Processes run in a host with Command (ip netns exec); the caller stops
// them (by PID) before Close. The test process itself reaches a host with
// Dial and Listen, which create the socket inside the host's namespace.
//
// Everything needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2's
// ip; Available says whether this machine has them. Ours (test tooling;
// no source document).
package netns

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// Subnet is the lab's private /24: host i has Subnet's address i+1.
var Subnet = netip.MustParsePrefix("10.251.0.0/24")

// MaxHosts is the most hosts a lab holds (addresses .1 to .250).
const MaxHosts = 250

// Available returns nil when labs can be built here: running as root with
// iproute2's ip on PATH. Otherwise the error says what is missing (tests
// t.Skip with it).
func Available() error {
	if runtime.GOOS != "linux" {
		return errors.New("netns: network namespaces need Linux")
	}
	if os.Geteuid() != 0 {
		return errors.New("netns: needs root (network namespaces)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("netns: iproute2's ip not found: %w", err)
	}
	return nil
}

// Host is one test host.
type Host struct {
	// Namespace is the host's network namespace name (for ip netns exec).
	Namespace string
	// Addr is the host's address on the lab's bridge.
	Addr netip.Addr
}

// Lab is a set of hosts on one bridge. Its methods are safe for
// concurrent use.
type Lab struct {
	Hosts  []Host
	prefix string // namespace name prefix, unique per lab
	sw     string // the switch namespace

	mu     sync.Mutex
	routes map[route]bool // blackhole routes in place
	closed bool
}

// route is a blackhole route in host from's table towards host to.
type route struct{ from, to int }

// New builds a lab of n hosts (1 <= n <= MaxHosts). On error everything
// already created is removed. ctx bounds the ip commands.
func New(ctx context.Context, n int) (*Lab, error) {
	if n < 1 || n > MaxHosts {
		return nil, fmt.Errorf("netns: %d hosts; want 1 to %d", n, MaxHosts)
	}
	if err := Available(); err != nil {
		return nil, err
	}
	var id [3]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("netns: %w", err)
	}
	l := &Lab{prefix: "tmlab-" + hex.EncodeToString(id[:]), routes: map[route]bool{}}
	l.sw = l.prefix + "-sw"
	if err := l.build(ctx, n); err != nil {
		_ = l.Close()
		return nil, err
	}
	return l, nil
}

func (l *Lab) build(ctx context.Context, n int) error {
	if err := ip(ctx, "netns", "add", l.sw); err != nil {
		return err
	}
	if err := ip(ctx, "-n", l.sw, "link", "add", "br0", "type", "bridge"); err != nil {
		return err
	}
	if err := ip(ctx, "-n", l.sw, "link", "set", "br0", "up"); err != nil {
		return err
	}
	base := Subnet.Addr().As4()
	for i := range n {
		a := base
		a[3] = byte(i + 1)
		h := Host{Namespace: fmt.Sprintf("%s-h%d", l.prefix, i), Addr: netip.AddrFrom4(a)}
		if err := ip(ctx, "netns", "add", h.Namespace); err != nil {
			return err
		}
		l.Hosts = append(l.Hosts, h)
		port := fmt.Sprintf("h%d", i)
		steps := [][]string{
			{"-n", l.sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", h.Namespace},
			{"-n", l.sw, "link", "set", port, "master", "br0", "up"},
			{"-n", h.Namespace, "addr", "add", netip.PrefixFrom(h.Addr, Subnet.Bits()).String(), "dev", "eth0"},
			{"-n", h.Namespace, "link", "set", "eth0", "up"},
			{"-n", h.Namespace, "link", "set", "lo", "up"},
		}
		for _, s := range steps {
			if err := ip(ctx, s...); err != nil {
				return err
			}
		}
	}
	return nil
}

// ip runs iproute2's ip with args; the error carries its output.
func ip(ctx context.Context, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("netns: ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

func (l *Lab) check(groups ...[]int) error {
	for _, g := range groups {
		for _, i := range g {
			if i < 0 || i >= len(l.Hosts) {
				return fmt.Errorf("netns: no host %d (the lab has %d)", i, len(l.Hosts))
			}
		}
	}
	return nil
}

// Cut drops all traffic between every host of a and every host of b,
// both ways (a blackhole route on each side). Hosts in both groups, and
// links already cut, are left as they are.
func (l *Lab) Cut(ctx context.Context, a, b []int) error {
	if err := l.CutOneWay(ctx, a, b); err != nil {
		return err
	}
	return l.CutOneWay(ctx, b, a)
}

// CutOneWay drops what hosts in from send to hosts in to (a blackhole
// route in each sender's table): the other direction still flows, so TCP
// cannot connect either way but UDP from to reaches from.
func (l *Lab) CutOneWay(ctx context.Context, from, to []int) error {
	if err := l.check(from, to); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("netns: lab closed")
	}
	for _, f := range from {
		for _, t := range to {
			r := route{f, t}
			if f == t || l.routes[r] {
				continue
			}
			if err := ip(ctx, "-n", l.Hosts[f].Namespace, "route", "add", "blackhole", l.Hosts[t].Addr.String()+"/32"); err != nil {
				return err
			}
			l.routes[r] = true
		}
	}
	return nil
}

// Heal removes every cut. It tries all of them and returns the first
// error.
func (l *Lab) Heal(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first error
	for _, r := range slices.SortedFunc(maps.Keys(l.routes), func(a, b route) int {
		if a.from != b.from {
			return a.from - b.from
		}
		return a.to - b.to
	}) {
		if err := ip(ctx, "-n", l.Hosts[r.from].Namespace, "route", "del", "blackhole", l.Hosts[r.to].Addr.String()+"/32"); err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		delete(l.routes, r)
	}
	return first
}

// Cuts returns the cut links as "from->to" host indices, sorted.
func (l *Lab) Cuts() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for r := range l.routes {
		out = append(out, fmt.Sprintf("%d->%d", r.from, r.to))
	}
	slices.Sort(out)
	return out
}

// Command returns a command that runs name with args inside host i's
// namespace (ip netns exec). The caller starts it and stops it by its
// PID; the lab does not track it.
func (l *Lab) Command(ctx context.Context, i int, name string, args ...string) *exec.Cmd {
	ns := ""
	if i >= 0 && i < len(l.Hosts) {
		ns = l.Hosts[i].Namespace
	}
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

// Dial connects from inside host i's namespace (network "tcp" or "udp",
// address an IP literal "ip:port": no name lookups). The connection is
// then used as any other.
func (l *Lab) Dial(ctx context.Context, i int, network, address string) (net.Conn, error) {
	var c net.Conn
	err := l.in(i, func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	return c, err
}

// DialContext connects to address ("ip:port", the IP one of the lab's
// hosts) from inside that host's namespace, so it reaches the host's
// listeners whatever is cut: the http.Transport.DialContext and
// grpc.WithContextDialer of a test client in the caller's namespace.
func (l *Lab) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return nil, fmt.Errorf("netns: dial %q: want a lab host's ip:port: %w", address, err)
	}
	for i, h := range l.Hosts {
		if h.Addr == ap.Addr().Unmap() {
			return l.Dial(ctx, i, network, address)
		}
	}
	return nil, fmt.Errorf("netns: dial %s: no host of the lab has that address", address)
}

// Listen listens inside host i's namespace (network "tcp").
func (l *Lab) Listen(i int, network, address string) (net.Listener, error) {
	var ln net.Listener
	err := l.in(i, func() error {
		var err error
		ln, err = net.Listen(network, address)
		return err
	})
	return ln, err
}

// Close deletes the lab's namespaces (with them its veths, bridge and
// routes). Processes still running in a host keep its namespace alive
// until they exit: stop them first. It is idempotent and returns the
// first error.
func (l *Lab) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	ctx := context.Background()
	var first error
	for _, h := range l.Hosts {
		if err := ip(ctx, "netns", "del", h.Namespace); err != nil && first == nil {
			first = err
		}
	}
	if err := ip(ctx, "netns", "del", l.sw); err != nil && first == nil {
		first = err
	}
	l.routes = map[route]bool{}
	return first
}
