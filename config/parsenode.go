package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/topology"
)

// node reads the node: section into n, one group of fields after the
// other. The order of the groups is the order in which errors are
// checked, so it decides which of several errors the file is refused
// with (the parser keeps the first).
func (p *parser) node(raw rawNode, n *Node) {
	p.nodeName(raw, n)
	p.nodeClientAPI(raw, n)
	p.nodePeers(raw, n)
	p.nodeSecretKey(raw, n)
	p.nodeEnvoy(raw, n)
	p.nodeLatencyHint(raw, n)
	p.nodeHTTPRefusalStatus(raw, n)
	p.nodeSnapshot(raw, n)
	p.nodeTLS(raw, n)
	if raw.Insecure != nil {
		n.Insecure = *raw.Insecure
	}
	p.nodeAPITimeouts(raw, n)
	p.nodeMemoryLimit(raw, n)
	p.nodeMembership(raw, n)
}

// nodePath is the path (for lineOf) of a field under node:.
func nodePath(k ...any) []any { return append([]any{"node"}, k...) }

// nodeName reads node.name (default: the host name, prefixed with
// "<region>." when node.region is set) and node.region, which must be the
// name's text before its first '.' (topology.Of: the strategies read a
// peer's region from its name).
func (p *parser) nodeName(raw rawNode, n *Node) {
	n.Name = raw.Name
	if raw.Region != "" {
		if err := topology.CheckName(raw.Region); err != nil {
			p.fail("node.region", nodePath("region"), "%v", err)
			return
		}
		if n.Name == "" {
			n.Name = raw.Region + "." + defaultNodeName()
		}
	}
	if n.Name == "" {
		n.Name = defaultNodeName()
	}
	if err := rule.CheckName(n.Name); err != nil {
		p.fail("node.name", nodePath("name"), "%v", err)
		return
	}
	n.Region = raw.Region
	if raw.Region != "" && topology.Of(strategy.NodeID(n.Name)) != raw.Region {
		p.fail("node.name", nodePath("name"), "%s", regionMismatch(n.Name, raw.Region))
	}
}

// addr reads the address node.<field>: v, or def when v is empty.
func (p *parser) addr(field, v, def string) string {
	if v == "" {
		return def
	}
	if err := checkAddr(v); err != nil {
		p.fail("node."+field, nodePath(field), "%v", err)
	}
	return v
}

// nodeClientAPI reads the client APIs' addresses and node.api_tls.
func (p *parser) nodeClientAPI(raw rawNode, n *Node) {
	n.APIAddr = p.addr("api_addr", raw.APIAddr, DefaultAPIAddr)
	n.GRPCAddr = p.addr("grpc_addr", raw.GRPCAddr, DefaultGRPCAddr)
	if raw.APITLS != nil {
		t := &APITLS{CertFile: raw.APITLS.CertFile, KeyFile: raw.APITLS.KeyFile, ClientCAFile: raw.APITLS.ClientCAFile}
		for _, x := range []struct{ name, v string }{{"cert_file", t.CertFile}, {"key_file", t.KeyFile}} {
			if x.v == "" {
				p.fail("node.api_tls."+x.name, nodePath("api_tls"), "is required when api_tls is set")
			}
		}
		n.APITLS = t
	}
}

// nodePeers reads node.peer_addr, node.gossip_addr and node.join.
func (p *parser) nodePeers(raw rawNode, n *Node) {
	n.PeerAddr = p.addr("peer_addr", raw.PeerAddr, DefaultPeerAddr)
	n.GossipAddr = p.addr("gossip_addr", raw.GossipAddr, DefaultGossipAddr)
	for i, j := range raw.Join {
		if err := checkAddr(j); err != nil {
			p.fail(fmt.Sprintf("node.join[%d]", i), nodePath("join", i), "%v", err)
		}
	}
	if len(raw.Join) > 0 {
		n.Join = append([]string(nil), raw.Join...)
	}
}

// nodeSecretKey reads node.secret_key or node.secret_key_file (not both;
// the file is only recorded: Load reads it).
func (p *parser) nodeSecretKey(raw rawNode, n *Node) {
	switch {
	case raw.SecretKey != "" && raw.SecretKeyFile != "":
		p.fail("node.secret_key", nodePath("secret_key"), "set secret_key or secret_key_file, not both")
	case raw.SecretKey != "":
		key, err := decodeKey(raw.SecretKey)
		if err != nil {
			p.fail("node.secret_key", nodePath("secret_key"), "%v", err)
		}
		n.SecretKey = key
	case raw.SecretKeyFile != "":
		n.SecretKeyFile = raw.SecretKeyFile
	}
}

// nodeEnvoy reads node.state_dir and the envoy_* settings.
func (p *parser) nodeEnvoy(raw rawNode, n *Node) {
	n.StateDir = raw.StateDir
	n.EnvoyConfig = raw.EnvoyConfig
	n.EnvoyStrategy = raw.EnvoyStrategy
	if err := validateNodeEnvoyStrategy(*n); err != nil {
		p.fail("node.envoy_strategy", nodePath("envoy_strategy"), "%s", strings.TrimPrefix(err.Error(), "node.envoy_strategy: "))
	}
	if raw.EnvoyShadowMode != nil {
		n.EnvoyShadowMode = *raw.EnvoyShadowMode
	}
	for _, b := range []struct {
		name string
		v    int
		to   *int
	}{{"envoy_max_overrides_per_descriptor", raw.EnvoyMaxOverridesPerDescriptor, &n.EnvoyMaxOverridesPerDescriptor},
		{"envoy_max_overrides", raw.EnvoyMaxOverrides, &n.EnvoyMaxOverrides}} {
		if b.v < 0 || b.v > cluster.MaxDerivedLimit {
			p.fail("node."+b.name, nodePath(b.name), "%d: want 1 to %d (0 or absent: the default)", b.v, cluster.MaxDerivedLimit)
		}
		*b.to = b.v
	}
}

// nodeLatencyHint reads node.latency_hint.
func (p *parser) nodeLatencyHint(raw rawNode, n *Node) {
	if raw.LatencyHint != "" {
		h, err := ParseLatencyHint(raw.LatencyHint)
		if err != nil {
			p.fail("node.latency_hint", nodePath("latency_hint"), "%v", err)
		}
		n.LatencyHint = h
	}
}

// nodeHTTPRefusalStatus reads node.http_refusal_status.
func (p *parser) nodeHTTPRefusalStatus(raw rawNode, n *Node) {
	if s := raw.HTTPRefusalStatus; !refusalStatusOK(s) {
		p.fail("node.http_refusal_status", nodePath("http_refusal_status"),
			"%d: want 429 (the default) or 403 (nginx auth_request takes only 2xx, 401 and 403 from its subrequest)", s)
	}
	n.HTTPRefusalStatus = raw.HTTPRefusalStatus
}

// nodeSnapshot reads node.snapshot_interval (only with a state_dir).
func (p *parser) nodeSnapshot(raw rawNode, n *Node) {
	n.SnapshotInterval = DefaultSnapshotInterval
	if raw.SnapshotInterval == "" {
		return
	}
	d, err := time.ParseDuration(raw.SnapshotInterval)
	switch {
	case err != nil:
		p.fail("node.snapshot_interval", nodePath("snapshot_interval"), "%q is not a duration (forms: 1s, 500ms, 1m)", raw.SnapshotInterval)
	case d < MinSnapshotInterval:
		p.fail("node.snapshot_interval", nodePath("snapshot_interval"), "%v is below the minimum of %v", d, MinSnapshotInterval)
	}
	n.SnapshotInterval = d
	if raw.StateDir == "" {
		p.fail("node.snapshot_interval", nodePath("snapshot_interval"), "is set but node.state_dir is not (snapshots go to state_dir)")
	}
}

// nodeTLS reads node.tls (peer mTLS: all three files required).
func (p *parser) nodeTLS(raw rawNode, n *Node) {
	if raw.TLS == nil {
		return
	}
	t := &TLS{CertFile: raw.TLS.CertFile, KeyFile: raw.TLS.KeyFile, CAFile: raw.TLS.CAFile}
	for _, x := range []struct{ name, v string }{{"cert_file", t.CertFile}, {"key_file", t.KeyFile}, {"ca_file", t.CAFile}} {
		if x.v == "" {
			p.fail("node.tls."+x.name, nodePath("tls"), "is required when tls is set (mutual TLS needs cert_file, key_file and ca_file)")
		}
	}
	n.TLS = t
}

// nodeAPITimeouts reads node.api_timeouts (each a positive duration).
func (p *parser) nodeAPITimeouts(raw rawNode, n *Node) {
	t := raw.APITimeouts
	if t == nil {
		return
	}
	for _, x := range []struct {
		name string
		v    string
		dst  *time.Duration
	}{{"read_header", t.ReadHeader, &n.APITimeouts.ReadHeader}, {"read", t.Read, &n.APITimeouts.Read},
		{"write", t.Write, &n.APITimeouts.Write}, {"idle", t.Idle, &n.APITimeouts.Idle}} {
		if x.v == "" {
			continue
		}
		d, err := time.ParseDuration(x.v)
		if err != nil || d <= 0 {
			p.fail("node.api_timeouts."+x.name, nodePath("api_timeouts", x.name), "%q is not a positive duration (e.g. 10s, 2m)", x.v)
			continue
		}
		*x.dst = d
	}
}

// nodeMemoryLimit reads node.memory_limit (ParseBytes).
func (p *parser) nodeMemoryLimit(raw rawNode, n *Node) {
	if raw.MemoryLimit != "" {
		v, err := ParseBytes(raw.MemoryLimit)
		if err != nil {
			p.fail("node.memory_limit", nodePath("memory_limit"), "%v", err)
		}
		n.MemoryLimit = v
	}
}

// duration reads the duration node.<field>: v, or def when v is empty or
// not a duration (then the error is recorded).
func (p *parser) duration(field, v string, def time.Duration) time.Duration {
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		p.fail("node."+field, nodePath(field), "%q is not a duration (forms: 500ms, 5s, 24h)", v)
		return def
	}
	return d
}

// nodeMembership reads the membership timers: node.reconnect_interval,
// reconnect_timeout, drain_delay and probe_interval.
func (p *parser) nodeMembership(raw rawNode, n *Node) {
	n.ReconnectInterval = p.duration("reconnect_interval", raw.ReconnectInterval, DefaultReconnectInterval)
	n.ReconnectTimeout = p.duration("reconnect_timeout", raw.ReconnectTimeout, DefaultReconnectTimeout)
	if err := checkReconnect(n.ReconnectInterval, n.ReconnectTimeout); err != nil {
		p.fail("node."+err.field, nodePath(err.field), "%s", err.msg)
	}
	n.DrainDelay = p.duration("drain_delay", raw.DrainDelay, DefaultDrainDelay)
	n.ProbeInterval = p.duration("probe_interval", raw.ProbeInterval, DefaultProbeInterval)
	for _, err := range []*checkError{checkDrainDelay(n.DrainDelay), checkProbeInterval(n.ProbeInterval)} {
		if err != nil {
			p.fail("node."+err.field, nodePath(err.field), "%s", err.msg)
		}
	}
}
