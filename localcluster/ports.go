package localcluster

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// Ports for nodes on loopback are drawn below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range, 32768-60999 by default), from
// [fixedPortLow, ephemeral low): a port there is never handed out for a
// ":0" listener or an outgoing connection, so a node restarted on the
// addresses it had (Restart: memberlist refuses a dead member's name from
// a new address for a while) finds them free even while other processes
// on the machine open connections. With ":0" a restart failed now and then
// under load with "address already in use": another test's connection
// had taken the port in between.
const fixedPortLow = 20000

// ephemeralLow is the first port of the kernel's ephemeral range (32768
// when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 32768
	}
	low, err := strconv.Atoi(f[0])
	if err != nil || low <= fixedPortLow+1000 {
		return 32768
	}
	return low
}

// drawPorts is pickPorts; a test replaces it to hand a node a port that is
// taken.
var drawPorts = pickPorts

// pickPorts returns n distinct loopback ports below the ephemeral range,
// each free for TCP and UDP at the time of the call (gossip binds both).
// Another process that draws the same way could take one before the node
// binds it: the node then fails to start with a clear error, as with any
// port in use. Errors: no free port found in 200 draws per port.
func pickPorts(n int) ([]int, error) {
	high := ephemeralLow()
	var out []int
	for len(out) < n {
		found := false
		for range 200 {
			p := fixedPortLow + rand.IntN(high-fixedPortLow)
			if containsInt(out, p) || !portFree(p) {
				continue
			}
			out, found = append(out, p), true
			break
		}
		if !found {
			return nil, fmt.Errorf("localcluster: no free loopback port in [%d, %d) after 200 draws", fixedPortLow, high)
		}
	}
	return out, nil
}

func containsInt(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// portFree reports whether 127.0.0.1:p can be bound for TCP and for UDP.
func portFree(p int) bool {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer l.Close()
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	u.Close()
	return true
}
