// Package config loads and validates a tokenmesh node's YAML configuration:
// the node's own settings (name, listen addresses, peers to join, gossip key,
// TLS for peers and for the API) and its rules (one (rate, burst) token bucket per
// key, enforced by one coordination strategy).
//
// A file looks like this (examples/config/tokenmesh.yaml is a commented
// one):
//
//	node:
//	  name: n1
//	  api_addr: 127.0.0.1:8080
//	  grpc_addr: 127.0.0.1:8081
//	  peer_addr: 10.0.0.1:7947
//	  gossip_addr: 10.0.0.1:7946
//	  join: [10.0.0.2:7946]
//	  secret_key_file: /etc/tokenmesh/gossip.key
//	  state_dir: /var/lib/tokenmesh
//	  snapshot_interval: 1s
//	  memory_limit: 512MiB
//	  envoy_config: /etc/tokenmesh/envoy   # envoyproxy/ratelimit YAML files (optional)
//	  envoy_shadow_mode: true              # Envoy's RLS counts, refuses nothing (optional)
//	  envoy_max_overrides_per_descriptor: 16   # distinct limit overrides per descriptor (default 16)
//	  envoy_max_overrides: 1024            # distinct limit overrides in all (default 1024)
//	  http_refusal_status: 403             # the HTTP mode's refusals, for nginx auth_request (default 429)
//	rules:
//	  - name: api
//	    key: "{header:x-api-key}"
//	    rate: 6000/min
//	    burst: 200
//	    strategy: owner
//	    params: {hold: 2ms}
//
// Unknown fields are errors (a misspelt "brust" is not silently ignored).
// Every validation error names the file, the line where it is known, and the
// field path, for example
//
//	tokenmesh.yaml:9: rules[2].rate: "10/fortnight" is not a rate (forms: 100/s, 6000/min, 1/3s, 2.5)
//
// With no file, a node runs Default(): one node on loopback with the
// documented default rule.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/cluster/membership"
	"github.com/tokenmesh/tokenmesh/rule"
)

// Defaults for fields a file leaves out.
const (
	// DefaultAPIAddr is the client API's listen address (the HTTP/JSON API;
	// loopback, so a node started without a config is not exposed).
	DefaultAPIAddr = "127.0.0.1:8080"
	// DefaultGRPCAddr is the client API's gRPC listen address
	// (tokenmesh.v1.RateLimitService; loopback, like DefaultAPIAddr).
	DefaultGRPCAddr = "127.0.0.1:8081"
	// DefaultPeerAddr is the grpcpeer listen address (node-to-node frames).
	DefaultPeerAddr = "127.0.0.1:7947"
	// DefaultGossipAddr is the memberlist (UDP and TCP) listen address;
	// 7946 is memberlist's customary port.
	DefaultGossipAddr = "127.0.0.1:7946"
	// DefaultStrategy is the strategy of a rule that names none
	// (rule.DefaultStrategy: owner).
	DefaultStrategy = rule.DefaultStrategy
	// DefaultKey is the key template of a rule that gives none
	// (rule.DefaultKey: the key the client passes).
	DefaultKey = rule.DefaultKey
	// DefaultReconnectInterval is how often a node tries to rejoin failed
	// members and the node.join addresses that are not members
	// (membership.DefaultReconnectInterval): a healed partition is whole
	// again within about this plus a join round trip.
	DefaultReconnectInterval = membership.DefaultReconnectInterval
	// DefaultReconnectTimeout is how long a failed member is retried
	// before it is forgotten (membership.DefaultReconnectTimeout, serf's
	// default).
	DefaultReconnectTimeout = membership.DefaultReconnectTimeout
)

// Bounds of node.reconnect_interval and node.reconnect_timeout.
const (
	MinReconnectInterval = 100 * time.Millisecond
	MaxReconnectInterval = 10 * time.Minute
	MaxReconnectTimeout  = 30 * 24 * time.Hour
)

// node.drain_delay: its default and upper bound.
const (
	DefaultDrainDelay = 2 * time.Second
	MaxDrainDelay     = 5 * time.Minute
)

// node.probe_interval: its default (memberlist's LAN setting) and bounds.
const (
	DefaultProbeInterval = time.Second
	MinProbeInterval     = 50 * time.Millisecond
	MaxProbeInterval     = 10 * time.Second
)

// File is a whole configuration: this node and its rules.
type File struct {
	Node Node
	// Rules are the limits, each a rule.Rule: every key (as the client
	// passes it for the rule) gets a token bucket of Rate and Burst,
	// coordinated across the cluster by Strategy. Parse fills the
	// defaults: Key DefaultKey, Burst rule.DefaultBurst(Rate), Strategy
	// DefaultStrategy; params come from the YAML map as sorted
	// "name=value" pairs, the partition parameter moved to Partition.
	Rules []rule.Rule
}

// Node is this node's settings. Addresses are "host:port".
type Node struct {
	// Name is the node's id in the cluster (memberlist node name,
	// strategy.NodeID); unique per cluster. Default: the host name, or
	// with Region "<region>.<host name>".
	Name string
	// Region is node.region ("": not set): when set, Name must start
	// with Region + "." (the default name does). The strategies read a
	// peer's region from its name, the text before the first '.'
	// (topology.Of), so membership gossips a node's region with its
	// name; with Region unset that prefix, if any, is the region.
	Region string
	// APIAddr is where clients reach the HTTP/JSON API (default
	// DefaultAPIAddr).
	APIAddr string
	// GRPCAddr is where clients reach the gRPC API (default
	// DefaultGRPCAddr).
	GRPCAddr string
	// APITLS, when set, serves both client APIs over TLS.
	APITLS *APITLS
	// PeerAddr is the grpcpeer listen address, published to the other
	// members through gossip, so it must be reachable by them (default
	// DefaultPeerAddr).
	PeerAddr string
	// GossipAddr is the membership (memberlist) bind address (default
	// DefaultGossipAddr).
	GossipAddr string
	// Join is the gossip addresses of the other members. serve joins the
	// first that answers; when none does it founds the cluster and keeps
	// retrying (limiter.PeerConfig.FoundIfAlone). Empty: always found.
	Join []string
	// SecretKey is the gossip encryption key, base64 in the file and
	// decoded here (16, 24 or 32 bytes: AES-128/192/256). Nil: gossip in
	// the clear. Set from secret_key or, by Load, from the file named by
	// secret_key_file (whose content is the base64 text).
	SecretKey []byte
	// SecretKeyFile is the file the key was read from ("" if none); a
	// relative path in the YAML is resolved against the config file's
	// directory by Load.
	SecretKeyFile string
	// TLS, when set, turns on mTLS between peers.
	TLS *TLS
	// StateDir, when set, keeps the node's token-bucket states in a file
	// there (statestore.FileName), so limits survive a restart: a
	// snapshot every SnapshotInterval and at graceful shutdown, restored
	// at start (refilled for the time the node was down). One directory
	// per node. A relative path in the YAML is resolved against the config
	// file's directory by Load. Empty: nothing is kept.
	StateDir string
	// SnapshotInterval is the time between snapshots into StateDir
	// (default DefaultSnapshotInterval; at least MinSnapshotInterval),
	// stretched when snapshots are slow so that they take at most a fifth
	// of the time (limiter.Config.SnapshotInterval).
	// A crash (no graceful shutdown) loses what was admitted since the
	// last one.
	SnapshotInterval time.Duration
	// Insecure (insecure: true) lets serve run a multi-node cluster
	// (MultiNode) with neither SecretKey nor TLS: any process that reaches
	// the peer port can then speak for any member. serve logs a warning at
	// every start. Default false: such a node refuses to start.
	Insecure bool
	// APITimeouts bound how long an HTTP/JSON API client may take (see
	// server.Timeouts); a zero field takes server's default.
	APITimeouts APITimeouts
	// MemoryLimit is the Go runtime's soft memory limit in bytes
	// (runtime/debug.SetMemoryLimit; the GOMEMLIMIT environment variable
	// does the same), from "512MiB", "2GiB", "300MB" or a plain byte
	// count. 0: not set here (GOMEMLIMIT, if set, applies).
	MemoryLimit int64
	// ReconnectInterval (node.reconnect_interval, a Go duration such as
	// "5s") is how often the node tries to join one failed member and
	// every node.join address that is no member, so that the sides of a
	// healed partition, and nodes that started apart, merge. Between
	// MinReconnectInterval and MaxReconnectInterval; default
	// DefaultReconnectInterval (also what zero means to Validate and
	// limiter.PeerConfig).
	ReconnectInterval time.Duration
	// ReconnectTimeout (node.reconnect_timeout, e.g. "24h") is how long a
	// failed member is retried before it is forgotten (node.join addresses
	// are retried for ever). At least ReconnectInterval, at most
	// MaxReconnectTimeout; default DefaultReconnectTimeout.
	ReconnectTimeout time.Duration
	// ProbeInterval (node.probe_interval, e.g. "1s") is the failure
	// detector's period (memberlist's ProbeInterval): a member that stops
	// answering is declared failed after about 5 to 6 of them on a small
	// cluster (a probe, then the suspicion timeout of 4 intervals scaled
	// by log10 of the members, at least 1). A shorter one detects a crash
	// sooner (an owner's keys move sooner: quota's RLQS assignments come
	// back sooner) at the cost of more probe traffic (one UDP probe per
	// node per interval) and of declaring a node that pauses that long
	// (a GC pause, a loaded host) failed. Between MinProbeInterval and
	// MaxProbeInterval; default DefaultProbeInterval.
	ProbeInterval time.Duration
	// DrainDelay (node.drain_delay, e.g. "5s") is how long a node that
	// was told to stop (SIGTERM) keeps serving with /readyz at 503 and
	// the gRPC health service NOT_SERVING before it closes its listeners,
	// so that a load balancer (a Kubernetes Service, Envoy's health
	// checks) stops sending it requests first. 0: none; at most
	// MaxDrainDelay. Parse gives DefaultDrainDelay when the file sets
	// none; a File built in Go has what its field says.
	DrainDelay time.Duration
	// EnvoyConfig, when set, is a directory of envoyproxy/ratelimit YAML
	// files (package envoyrls): serve loads them, adds one rule per
	// descriptor limit and answers Envoy's ShouldRateLimit on GRPCAddr,
	// and reloads them when they change and on SIGHUP (the directory
	// itself is read at start only). A relative path in the YAML is
	// resolved against the config file's directory by Load. Every node of
	// a cluster must load the same files.
	EnvoyConfig string
	// EnvoyShadowMode (node.envoy_shadow_mode: true) is the global shadow
	// mode of Envoy's RLS, as envoyproxy/ratelimit's SHADOW_MODE: every
	// ShouldRateLimit check is decided and counted as usual, and a
	// response over a limit is answered OK (envoyrls.Service.SetShadowMode).
	// For a soft launch of new limits. Without EnvoyConfig it does nothing.
	// Read at start only, as every node setting.
	EnvoyShadowMode bool
	// EnvoyStrategy (node.envoy_strategy) is the strategy of the limits of
	// EnvoyConfig's files whose tokenmesh extension names none; "" is
	// DefaultStrategy (owner). quota makes envoyproxy/ratelimit's files as
	// they are serve RLQS (docs/RLQS.md). A known strategy name; every
	// node of a cluster must have the same. Read at start only, as every
	// node setting (the files it applies to are reloaded).
	EnvoyStrategy string
	// EnvoyMaxOverridesPerDescriptor (node.envoy_max_overrides_per_descriptor)
	// bounds the distinct limit overrides (RateLimitDescriptor.limit) of one
	// Envoy descriptor this node makes rules for (cluster.Config.
	// MaxDerivedPerBase); a check beyond is refused RESOURCE_EXHAUSTED.
	// EnvoyMaxOverrides (node.envoy_max_overrides) bounds them in all
	// (cluster.Config.MaxDerived), also for the overrides peers forward.
	// 0 is the default (cluster.DefaultMaxDerivedPerBase, 16, and
	// cluster.DefaultMaxDerived, 1024); at most cluster.MaxDerivedLimit.
	// Read at start only.
	EnvoyMaxOverridesPerDescriptor int
	EnvoyMaxOverrides              int
	// LatencyHint (node.latency_hint) is the one-way peer latency the
	// strategies derive their timers from (owner's hold and timeout, ...):
	// a duration ("2ms", at most cluster.MaxLatencyHint; the default, the
	// zero value, is 0s: owner decides on arrival) fixes it and nothing is
	// measured; "auto" measures it from gossip's probes (latencyhint.go;
	// docs/OPERATIONS.md, "Latency hint", says why 0s is the default).
	LatencyHint LatencyHint
	// HTTPRefusalStatus (node.http_refusal_status) is the status the HTTP
	// mode (/v1/limit/{rule}) answers a refused request with: 0 (the
	// default) or 429, Too Many Requests; or 403, for nginx's
	// auth_request, which takes any status but 2xx, 401 and 403 from its
	// subrequest as an error and answers 500 (map it back with
	// `error_page 403 =429`; docs/API.md, "HTTP mode").
	HTTPRefusalStatus int
}

// refusalStatusOK reports whether s may be Node.HTTPRefusalStatus: 0 (the
// default, 429), 429 or 403.
func refusalStatusOK(s int) bool {
	return s == 0 || s == http.StatusTooManyRequests || s == http.StatusForbidden
}

// APITimeouts are the HTTP/JSON API server's timeouts (api_timeouts:
// read_header, read, write, idle; durations such as "10s"). Zero: the
// default (server.DefaultReadHeaderTimeout and so on).
type APITimeouts struct {
	ReadHeader, Read, Write, Idle time.Duration
}

// MultiNode reports whether the node is meant to have peers on a network:
// it joins others (Join), or its gossip address is not a loopback one (so
// others may join it).
func (n Node) MultiNode() bool {
	if len(n.Join) > 0 {
		return true
	}
	host, _, err := net.SplitHostPort(n.GossipAddr)
	if err != nil {
		return true
	}
	if host == "localhost" {
		return false
	}
	ip := net.ParseIP(host)
	return ip == nil || !ip.IsLoopback()
}

// CheckPeerSecurity is serve's start-up rule: a multi-node node
// (MultiNode) needs a SecretKey (every peer frame carries an HMAC) or TLS
// (peer mTLS), unless Insecure says otherwise. Errors name the fields.
func (n Node) CheckPeerSecurity() error {
	if !n.MultiNode() || len(n.SecretKey) > 0 || n.TLS != nil || n.Insecure {
		return nil
	}
	return errors.New("node: a multi-node cluster (node.join set, or a non-loopback node.gossip_addr) needs node.secret_key (or secret_key_file) to authenticate peer frames, or node.tls for peer mTLS; without either any process that reaches the peer port can speak for a member. Set node.insecure: true to run without (not recommended)")
}

// DefaultSnapshotInterval is node.snapshot_interval when the file gives
// none: a crash re-grants at most one second of admissions, and a
// snapshot of 100k keys takes about 0.1 s to write (docs/PERFORMANCE.md).
const DefaultSnapshotInterval = time.Second

// MinSnapshotInterval bounds node.snapshot_interval from below.
const MinSnapshotInterval = 10 * time.Millisecond

// TLS names the PEM files for mutual TLS between peers: this node's
// certificate (whose name is the node's Name) and key, and the CA that
// signed every member's certificate. All three are required.
type TLS struct {
	CertFile, KeyFile, CAFile string
}

// APITLS names the PEM files of the client APIs' TLS: the server
// certificate and key (both required) and, optionally, a CA whose
// certificates clients must then present (mutual TLS).
type APITLS struct {
	CertFile, KeyFile, ClientCAFile string
}

// DefaultPartition is a rule's partition option when it sets none:
// available. A crash looks like a partition to the survivors, and under
// conserve they enforce (N-1)/N of the limit until the crashed member
// returns or reconnect_timeout (24 h by default) passes; docs/EVALUATION.md
// has the measurement behind the choice.
const DefaultPartition = "available"

// Error is a configuration error: where (file, line if known, field path)
// and what.
type Error struct {
	File  string // the file name given to Parse or Load
	Line  int    // 1-based; 0 when unknown
	Field string // "rules[2].rate"; "" for the whole file
	Msg   string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Load reads, parses and validates the file at path, then reads
// secret_key_file (relative to the file's directory) and checks that the
// TLS files (tls, api_tls) exist. Errors are *Error.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &Error{File: path, Msg: err.Error()}
	}
	f, err := Parse(data, path)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	resolve := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	root := parseNode(data)
	f.Node.StateDir = resolve(f.Node.StateDir)
	f.Node.EnvoyConfig = resolve(f.Node.EnvoyConfig)
	if f.Node.SecretKeyFile != "" {
		f.Node.SecretKeyFile = resolve(f.Node.SecretKeyFile)
		field := "node.secret_key_file"
		text, err := os.ReadFile(f.Node.SecretKeyFile)
		if err != nil {
			return nil, &Error{File: path, Line: lineOf(root, "node", "secret_key_file"), Field: field, Msg: err.Error()}
		}
		key, err := decodeKey(strings.TrimSpace(string(text)))
		if err != nil {
			return nil, &Error{File: path, Line: lineOf(root, "node", "secret_key_file"), Field: field, Msg: fmt.Sprintf("%s: %v", f.Node.SecretKeyFile, err)}
		}
		f.Node.SecretKey = key
	}
	if t := f.Node.TLS; t != nil {
		for _, x := range []struct {
			name string
			p    *string
		}{{"cert_file", &t.CertFile}, {"key_file", &t.KeyFile}, {"ca_file", &t.CAFile}} {
			*x.p = resolve(*x.p)
			if _, err := os.Stat(*x.p); err != nil {
				return nil, &Error{File: path, Line: lineOf(root, "node", "tls", x.name), Field: "node.tls." + x.name, Msg: err.Error()}
			}
		}
	}
	if t := f.Node.APITLS; t != nil {
		for _, x := range []struct {
			name string
			p    *string
		}{{"cert_file", &t.CertFile}, {"key_file", &t.KeyFile}, {"client_ca_file", &t.ClientCAFile}} {
			if *x.p == "" {
				continue
			}
			*x.p = resolve(*x.p)
			if _, err := os.Stat(*x.p); err != nil {
				return nil, &Error{File: path, Line: lineOf(root, "node", "api_tls", x.name), Field: "node.api_tls." + x.name, Msg: err.Error()}
			}
		}
	}
	return f, nil
}

// Parse parses and validates a configuration. name is the file name used in
// errors. It reads no files: secret_key_file and the TLS files are only
// recorded (Load reads them). Errors are *Error.
func Parse(data []byte, name string) (*File, error) {
	var raw rawFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&raw); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: name, Msg: "the file is empty (want node: and rules:)"}
		}
		return nil, yamlError(name, data, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, &Error{File: name, Msg: "more than one YAML document (want one)"}
	}
	root := parseNode(data)
	p := parser{file: name, root: root}
	f := p.build(raw)
	if p.err != nil {
		return nil, p.err
	}
	return f, nil
}

// CheckRule checks r as Validate does and returns it with the defaults
// a file would get (Strategy DefaultStrategy, Key DefaultKey), its Params
// a copy.
func CheckRule(r rule.Rule) (rule.Rule, error) {
	if r.Strategy == "" {
		r.Strategy = DefaultStrategy
	}
	if r.Key == "" {
		r.Key = DefaultKey
	}
	if err := check(r); err != nil {
		return rule.Rule{}, fmt.Errorf("rule %q: %w", r.Name, err)
	}
	r.Params = slices.Clone(r.Params)
	return r, nil
}

// CheckRules is CheckRule of every rule of f, in order; the first error
// stops it.
func (f *File) CheckRules() ([]rule.Rule, error) {
	out := make([]rule.Rule, 0, len(f.Rules))
	for _, r := range f.Rules {
		cr, err := CheckRule(r)
		if err != nil {
			return nil, err
		}
		out = append(out, cr)
	}
	return out, nil
}

// Default returns the embedded default configuration, what `tokenmesh
// serve` runs with no --config: one node named "tokenmesh" on loopback
// (API 127.0.0.1:8080, peers 127.0.0.1:7947, gossip 127.0.0.1:7946),
// founding its own cluster, with one rule:
//
//	name: default, key: "{key}", rate: 10/s, burst: 20, strategy: owner
//
// (on a single node owner decides locally, exactly like one central bucket).
func Default() *File {
	return &File{
		Node: Node{
			Name:             "tokenmesh",
			APIAddr:          DefaultAPIAddr,
			GRPCAddr:         DefaultGRPCAddr,
			PeerAddr:         DefaultPeerAddr,
			GossipAddr:       DefaultGossipAddr,
			SnapshotInterval: DefaultSnapshotInterval,

			ReconnectInterval: DefaultReconnectInterval,
			ReconnectTimeout:  DefaultReconnectTimeout,
			ProbeInterval:     DefaultProbeInterval,
			DrainDelay:        DefaultDrainDelay,
		},
		Rules: []rule.Rule{{
			Name:     "default",
			Key:      DefaultKey,
			Rate:     bucket.Rate{Tokens: 10, Per: time.Second},
			Burst:    20,
			Strategy: DefaultStrategy,
		}},
	}
}

// ParseRate parses a rule's rate exactly (rule.ParseRate: "100/s",
// "6000/min", "1/3s", "2.5").
func ParseRate(s string) (bucket.Rate, error) { return rule.ParseRate(s) }
