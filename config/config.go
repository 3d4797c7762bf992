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
	"cmp"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/httplimit/keytemplate"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
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
	DefaultReconnectInterval = 5 * time.Second
	// DefaultReconnectTimeout is how long a failed member is retried
	// before it is forgotten (membership.DefaultReconnectTimeout, serf's
	// default).
	DefaultReconnectTimeout = 24 * time.Hour
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
	Node  Node
	Rules []Rule
}

// Node is this node's settings. Addresses are "host:port".
type Node struct {
	// Name is the node's id in the cluster (memberlist node name,
	// strategy.NodeID); unique per cluster. Default: the host name.
	Name string
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

// Rule is one rate limit: every key (as the client passes it for this rule)
// gets a token bucket of Rate and Burst, coordinated across the cluster by
// Strategy. It is rule.Rule, the type cluster, limiter and localcluster
// share. Parse fills the defaults: Key DefaultKey, Burst
// rule.DefaultBurst(Rate), Strategy DefaultStrategy; params come from the
// YAML map as sorted "name=value" pairs, the partition parameter moved to
// Partition.
type Rule = rule.Rule

// DefaultPartition is a rule's partition option when it sets none:
// available. A crash looks like a partition to the survivors, and under
// conserve they enforce (N-1)/N of the limit until the crashed member
// returns or reconnect_timeout (24 h by default) passes; docs/EVALUATION.md
// has the measurement behind the choice.
const DefaultPartition = "available"

// raw mirrors the YAML; scalars are strings so that this package, not the
// YAML library, decides what a rate or a duration is.
type rawFile struct {
	Node  rawNode   `yaml:"node"`
	Rules []rawRule `yaml:"rules"`
}

type rawNode struct {
	Name          string      `yaml:"name,omitempty"`
	APIAddr       string      `yaml:"api_addr,omitempty"`
	GRPCAddr      string      `yaml:"grpc_addr,omitempty"`
	APITLS        *rawAPITLS  `yaml:"api_tls,omitempty"`
	PeerAddr      string      `yaml:"peer_addr,omitempty"`
	GossipAddr    string      `yaml:"gossip_addr,omitempty"`
	Join          []string    `yaml:"join,omitempty"`
	SecretKey     string      `yaml:"secret_key,omitempty"`
	SecretKeyFile string      `yaml:"secret_key_file,omitempty"`
	TLS           *rawTLS     `yaml:"tls,omitempty"`
	Insecure      *bool       `yaml:"insecure,omitempty"`
	MemoryLimit   string      `yaml:"memory_limit,omitempty"`
	APITimeouts   *rawTimeout `yaml:"api_timeouts,omitempty"`
	StateDir      string      `yaml:"state_dir,omitempty"`
	// SnapshotInterval is a Go duration ("1s", "500ms").
	SnapshotInterval string `yaml:"snapshot_interval,omitempty"`

	ReconnectInterval string `yaml:"reconnect_interval,omitempty"`
	ReconnectTimeout  string `yaml:"reconnect_timeout,omitempty"`
	ProbeInterval     string `yaml:"probe_interval,omitempty"`
	DrainDelay        string `yaml:"drain_delay,omitempty"`
	EnvoyConfig       string `yaml:"envoy_config,omitempty"`
	EnvoyShadowMode   *bool  `yaml:"envoy_shadow_mode,omitempty"`
	// The bounds on Envoy limit overrides; 0 or absent: the default.
	EnvoyMaxOverridesPerDescriptor int    `yaml:"envoy_max_overrides_per_descriptor,omitempty"`
	EnvoyMaxOverrides              int    `yaml:"envoy_max_overrides,omitempty"`
	LatencyHint                    string `yaml:"latency_hint,omitempty"`
	HTTPRefusalStatus              int    `yaml:"http_refusal_status,omitempty"`
}

type rawTimeout struct {
	ReadHeader string `yaml:"read_header,omitempty"`
	Read       string `yaml:"read,omitempty"`
	Write      string `yaml:"write,omitempty"`
	Idle       string `yaml:"idle,omitempty"`
}

type rawAPITLS struct {
	CertFile     string `yaml:"cert_file,omitempty"`
	KeyFile      string `yaml:"key_file,omitempty"`
	ClientCAFile string `yaml:"client_ca_file,omitempty"`
}

type rawTLS struct {
	CertFile string `yaml:"cert_file,omitempty"`
	KeyFile  string `yaml:"key_file,omitempty"`
	CAFile   string `yaml:"ca_file,omitempty"`
}

type rawRule struct {
	Name      string            `yaml:"name,omitempty"`
	Key       string            `yaml:"key,omitempty"`
	Rate      string            `yaml:"rate,omitempty"`
	Burst     *string           `yaml:"burst,omitempty"`
	Strategy  string            `yaml:"strategy,omitempty"`
	Params    map[string]string `yaml:"params,omitempty"`
	Partition string            `yaml:"partition,omitempty"`
}

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

// YAMLError is yaml.v3's error message msg ("yaml: line 3: did not find
// expected key") as an *Error of file: the line when msg gives one (else
// 0), the message without its "yaml: " and "line N: " prefixes (ours;
// envoyrls reads its files' syntax errors with it too).
func YAMLError(file, msg string) *Error {
	m := strings.TrimPrefix(msg, "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(m, "line "); ok {
		if n, after, ok := strings.Cut(rest, ":"); ok {
			if l, err := strconv.Atoi(n); err == nil {
				line, m = l, strings.TrimSpace(after)
			}
		}
	}
	return &Error{File: file, Line: line, Msg: m}
}

// yamlError turns a yaml.v3 error ("yaml: line 3: ...", or a TypeError with
// "line 3: field brust not found in type config.rawRule") into an *Error.
func yamlError(file string, data []byte, err error) error {
	var te *yaml.TypeError
	msgs := []string{err.Error()}
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	ye := YAMLError(file, msgs[0])
	// Go type names mean nothing to a user: say what the YAML should be.
	m, line := yamlTypeNames.Replace(ye.Msg), ye.Line
	if len(msgs) > 1 {
		m += fmt.Sprintf(" (and %d more)", len(msgs)-1)
	}
	e := &Error{File: file, Line: line, Msg: m}
	if line > 0 {
		root := parseNode(data)
		if name, ok := strings.CutPrefix(m, "field "); ok {
			name, _, _ = strings.Cut(name, " not found")
			if path, parent := pathAt(root, "", line, name, true); path != "" {
				e.Field, e.Msg = path, "unknown field"+knownFields(parent)
			}
		} else if path, _ := pathAt(root, "", line, "", false); path != "" && !strings.HasPrefix(path, "[") {
			e.Field = path
		}
	}
	return e
}

// knownFields lists the fields of the mapping at parent (a field path:
// "", "node", "node.tls", "rules[2]"), read from the yaml tags of the
// struct it decodes into; "" when parent is not a mapping of the file.
func knownFields(parent string) string {
	t := reflect.TypeOf(rawFile{})
	if parent != "" {
		for _, step := range strings.Split(parent, ".") {
			name, _, indexed := strings.Cut(step, "[")
			f, ok := yamlField(t, name)
			if !ok {
				return ""
			}
			t = f.Type
			if t.Kind() == reflect.Pointer {
				t = t.Elem()
			}
			if indexed {
				if t.Kind() != reflect.Slice {
					return ""
				}
				t = t.Elem()
			}
		}
	}
	if t.Kind() != reflect.Struct {
		return ""
	}
	return " (known: " + strings.Join(yamlFieldNames(t), ", ") + ")"
}

// yamlField is the field of struct t whose yaml tag is name.
func yamlField(t reflect.Type, name string) (reflect.StructField, bool) {
	if t.Kind() != reflect.Struct {
		return reflect.StructField{}, false
	}
	for i := range t.NumField() {
		if f := t.Field(i); yamlName(f) == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// yamlName is f's key in YAML (its yaml tag; "" for an untagged field).
func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return name
}

// yamlFieldNames lists the YAML keys of struct t in declaration order.
func yamlFieldNames(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		if n := yamlName(t.Field(i)); n != "" && n != "-" {
			out = append(out, n)
		}
	}
	return out
}

// yamlTypeNames rewrites the Go type names yaml.v3 puts in its errors
// ("cannot unmarshal !!str `x` into config.rawAPITLS", "field brust not
// found in type config.rawRule") into what the YAML should be ("a
// mapping with cert_file, key_file, client_ca_file"), for every type the
// file decodes into: it is built from rawFile's fields by reflection, so
// a struct or field added later is covered without a hand-kept list.
var yamlTypeNames = newYAMLTypeNames()

func newYAMLTypeNames() *strings.Replacer {
	descs := map[string]string{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		name := t.String()
		if _, done := descs[name]; done {
			return
		}
		descs[name] = describeYAML(t)
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map:
			walk(t.Elem())
		case reflect.Struct:
			for i := range t.NumField() {
				walk(t.Field(i).Type)
			}
		}
	}
	walk(reflect.TypeOf(rawFile{}))
	names := make([]string, 0, len(descs))
	for n := range descs {
		names = append(names, n)
	}
	// Longest first, so that "[]config.rawRule" is rewritten as a whole,
	// and " in type T" (the tail of an unknown field's message) goes. The
	// replacer tries pairs in argument order at each position.
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(len(b), len(a)), cmp.Compare(a, b)) })
	var pairs []string
	for _, n := range names {
		if strings.Contains(n, ".") {
			pairs = append(pairs, " in type "+n, "")
		}
	}
	for _, n := range names {
		switch {
		case n == descs[n]:
		case strings.ContainsAny(n, ".[*"):
			pairs = append(pairs, n, descs[n])
		default: // "string", "bool": only where a type is named
			pairs = append(pairs, "into "+n, "into "+descs[n])
		}
	}
	return strings.NewReplacer(pairs...)
}

// describeYAML says in words what YAML decodes into t.
func describeYAML(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return describeYAML(t.Elem())
	case reflect.Struct:
		return "a mapping with " + strings.Join(yamlFieldNames(t), ", ")
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Struct {
			return "a list of mappings"
		}
		return "a list of " + strings.TrimPrefix(describeYAML(t.Elem()), "a ") + "s"
	case reflect.Map:
		return "a mapping of name: value"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	}
	return t.String()
}

// pathAt finds, under n (whose path is at), the first node on line: a
// mapping key equal to key when isKey, else any value node. It returns the
// node's field path and its parent's path ("" if not found).
func pathAt(n *yaml.Node, at string, line int, key string, isKey bool) (path, parent string) {
	if n == nil {
		return "", ""
	}
	join := func(a, b string) string {
		if a == "" {
			return b
		}
		return a + "." + b
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := join(at, k.Value)
			if isKey && k.Line == line && k.Value == key {
				return p, at
			}
			if !isKey && v.Line == line && v.Kind != yaml.MappingNode && v.Kind != yaml.SequenceNode {
				return p, at
			}
			if !isKey && v.Line == line && k.Line == line {
				return p, at
			}
			if path, parent := pathAt(v, p, line, key, isKey); path != "" {
				return path, parent
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", at, i)
			if !isKey && c.Line == line && c.Kind == yaml.ScalarNode {
				return p, at
			}
			if path, parent := pathAt(c, p, line, key, isKey); path != "" {
				return path, parent
			}
		}
	}
	return "", ""
}

func parseNode(data []byte) *yaml.Node {
	var n yaml.Node
	if err := yaml.Unmarshal(data, &n); err != nil {
		return nil
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		return n.Content[0]
	}
	return nil
}

// lineOf finds the line of the value at path (map keys as strings, sequence
// indexes as ints) in root; 0 when not found. For a map key whose value is
// missing, the line of the nearest ancestor found is returned.
func lineOf(root *yaml.Node, path ...any) int {
	n, line := root, 0
	if n != nil {
		line = n.Line
	}
	for _, step := range path {
		if n == nil {
			return line
		}
		var next *yaml.Node
		switch s := step.(type) {
		case string:
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if n.Content[i].Value == s {
						next = n.Content[i+1]
						break
					}
				}
			}
		case int:
			if n.Kind == yaml.SequenceNode && s >= 0 && s < len(n.Content) {
				next = n.Content[s]
			}
		}
		if next == nil {
			return line
		}
		n, line = next, next.Line
	}
	return line
}

type parser struct {
	file string
	root *yaml.Node
	err  *Error
}

// fail records the first error.
func (p *parser) fail(field string, path []any, format string, args ...any) {
	if p.err == nil {
		p.err = &Error{File: p.file, Line: lineOf(p.root, path...), Field: field, Msg: fmt.Sprintf(format, args...)}
	}
}

func (p *parser) build(raw rawFile) *File {
	f := &File{}
	p.node(raw.Node, &f.Node)
	if len(raw.Rules) == 0 {
		p.fail("rules", []any{"rules"}, "at least one rule is required")
	}
	seen := map[string]int{}
	for i, rr := range raw.Rules {
		r := p.rule(i, rr)
		if prev, dup := seen[r.Name]; dup && r.Name != "" {
			p.fail(fmt.Sprintf("rules[%d].name", i), []any{"rules", i, "name"}, "%q is already the name of rules[%d]", r.Name, prev)
		}
		seen[r.Name] = i
		f.Rules = append(f.Rules, r)
	}
	return f
}

func (p *parser) node(raw rawNode, n *Node) {
	path := func(k ...any) []any { return append([]any{"node"}, k...) }
	n.Name = raw.Name
	if n.Name == "" {
		n.Name = defaultNodeName()
	}
	if err := rule.CheckName(n.Name); err != nil {
		p.fail("node.name", path("name"), "%v", err)
	}
	addr := func(field, v, def string) string {
		if v == "" {
			return def
		}
		if err := checkAddr(v); err != nil {
			p.fail("node."+field, path(field), "%v", err)
		}
		return v
	}
	n.APIAddr = addr("api_addr", raw.APIAddr, DefaultAPIAddr)
	n.GRPCAddr = addr("grpc_addr", raw.GRPCAddr, DefaultGRPCAddr)
	if raw.APITLS != nil {
		t := &APITLS{CertFile: raw.APITLS.CertFile, KeyFile: raw.APITLS.KeyFile, ClientCAFile: raw.APITLS.ClientCAFile}
		for _, x := range []struct{ name, v string }{{"cert_file", t.CertFile}, {"key_file", t.KeyFile}} {
			if x.v == "" {
				p.fail("node.api_tls."+x.name, path("api_tls"), "is required when api_tls is set")
			}
		}
		n.APITLS = t
	}
	n.PeerAddr = addr("peer_addr", raw.PeerAddr, DefaultPeerAddr)
	n.GossipAddr = addr("gossip_addr", raw.GossipAddr, DefaultGossipAddr)
	for i, j := range raw.Join {
		if err := checkAddr(j); err != nil {
			p.fail(fmt.Sprintf("node.join[%d]", i), path("join", i), "%v", err)
		}
	}
	if len(raw.Join) > 0 {
		n.Join = append([]string(nil), raw.Join...)
	}
	switch {
	case raw.SecretKey != "" && raw.SecretKeyFile != "":
		p.fail("node.secret_key", path("secret_key"), "set secret_key or secret_key_file, not both")
	case raw.SecretKey != "":
		key, err := decodeKey(raw.SecretKey)
		if err != nil {
			p.fail("node.secret_key", path("secret_key"), "%v", err)
		}
		n.SecretKey = key
	case raw.SecretKeyFile != "":
		n.SecretKeyFile = raw.SecretKeyFile
	}
	n.StateDir = raw.StateDir
	n.EnvoyConfig = raw.EnvoyConfig
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
			p.fail("node."+b.name, path(b.name), "%d: want 1 to %d (0 or absent: the default)", b.v, cluster.MaxDerivedLimit)
		}
		*b.to = b.v
	}
	if raw.LatencyHint != "" {
		h, err := ParseLatencyHint(raw.LatencyHint)
		if err != nil {
			p.fail("node.latency_hint", path("latency_hint"), "%v", err)
		}
		n.LatencyHint = h
	}
	if s := raw.HTTPRefusalStatus; !refusalStatusOK(s) {
		p.fail("node.http_refusal_status", path("http_refusal_status"),
			"%d: want 429 (the default) or 403 (nginx auth_request takes only 2xx, 401 and 403 from its subrequest)", s)
	}
	n.HTTPRefusalStatus = raw.HTTPRefusalStatus
	n.SnapshotInterval = DefaultSnapshotInterval
	if raw.SnapshotInterval != "" {
		d, err := time.ParseDuration(raw.SnapshotInterval)
		switch {
		case err != nil:
			p.fail("node.snapshot_interval", path("snapshot_interval"), "%q is not a duration (forms: 1s, 500ms, 1m)", raw.SnapshotInterval)
		case d < MinSnapshotInterval:
			p.fail("node.snapshot_interval", path("snapshot_interval"), "%v is below the minimum of %v", d, MinSnapshotInterval)
		}
		n.SnapshotInterval = d
		if raw.StateDir == "" {
			p.fail("node.snapshot_interval", path("snapshot_interval"), "is set but node.state_dir is not (snapshots go to state_dir)")
		}
	}
	if raw.TLS != nil {
		t := &TLS{CertFile: raw.TLS.CertFile, KeyFile: raw.TLS.KeyFile, CAFile: raw.TLS.CAFile}
		for _, x := range []struct{ name, v string }{{"cert_file", t.CertFile}, {"key_file", t.KeyFile}, {"ca_file", t.CAFile}} {
			if x.v == "" {
				p.fail("node.tls."+x.name, path("tls"), "is required when tls is set (mutual TLS needs cert_file, key_file and ca_file)")
			}
		}
		n.TLS = t
	}
	if raw.Insecure != nil {
		n.Insecure = *raw.Insecure
	}
	if t := raw.APITimeouts; t != nil {
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
				p.fail("node.api_timeouts."+x.name, path("api_timeouts", x.name), "%q is not a positive duration (e.g. 10s, 2m)", x.v)
				continue
			}
			*x.dst = d
		}
	}
	if raw.MemoryLimit != "" {
		v, err := ParseBytes(raw.MemoryLimit)
		if err != nil {
			p.fail("node.memory_limit", path("memory_limit"), "%v", err)
		}
		n.MemoryLimit = v
	}
	dur := func(field, v string, def time.Duration) time.Duration {
		if v == "" {
			return def
		}
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			p.fail("node."+field, path(field), "%q is not a duration (forms: 500ms, 5s, 24h)", v)
			return def
		}
		return d
	}
	n.ReconnectInterval = dur("reconnect_interval", raw.ReconnectInterval, DefaultReconnectInterval)
	n.ReconnectTimeout = dur("reconnect_timeout", raw.ReconnectTimeout, DefaultReconnectTimeout)
	if err := checkReconnect(n.ReconnectInterval, n.ReconnectTimeout); err != nil {
		p.fail("node."+err.field, path(err.field), "%s", err.msg)
	}
	n.DrainDelay = dur("drain_delay", raw.DrainDelay, DefaultDrainDelay)
	n.ProbeInterval = dur("probe_interval", raw.ProbeInterval, DefaultProbeInterval)
	for _, err := range []*checkError{checkDrainDelay(n.DrainDelay), checkProbeInterval(n.ProbeInterval)} {
		if err != nil {
			p.fail("node."+err.field, path(err.field), "%s", err.msg)
		}
	}
}

// checkDrainDelay checks node.drain_delay: within [0, MaxDrainDelay].
func checkDrainDelay(d time.Duration) *checkError {
	if d < 0 || d > MaxDrainDelay {
		return &checkError{field: "drain_delay", msg: fmt.Sprintf("%v is outside [0s, %v]", d, MaxDrainDelay)}
	}
	return nil
}

// checkProbeInterval checks node.probe_interval: within
// [MinProbeInterval, MaxProbeInterval].
func checkProbeInterval(d time.Duration) *checkError {
	if d < MinProbeInterval || d > MaxProbeInterval {
		return &checkError{field: "probe_interval", msg: fmt.Sprintf("%v is outside [%v, %v]", d, MinProbeInterval, MaxProbeInterval)}
	}
	return nil
}

// checkReconnect checks node.reconnect_interval and reconnect_timeout.
func checkReconnect(interval, timeout time.Duration) *checkError {
	switch {
	case interval < MinReconnectInterval || interval > MaxReconnectInterval:
		return &checkError{field: "reconnect_interval", msg: fmt.Sprintf("%v is outside [%v, %v]", interval, MinReconnectInterval, MaxReconnectInterval)}
	case timeout < interval || timeout > MaxReconnectTimeout:
		return &checkError{field: "reconnect_timeout", msg: fmt.Sprintf("%v is outside [reconnect_interval %v, %v]", timeout, interval, MaxReconnectTimeout)}
	}
	return nil
}

// ParseBytes parses a size in bytes: a non-negative integer with an
// optional unit B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB
// (powers of 1024), e.g. "512MiB". Errors: anything else, or a size above
// 2^62 bytes.
func ParseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%q is not a size in bytes (forms: 536870912, 512MiB, 2GiB, 300MB)", s)
	}
	if v > (1<<62)/mult {
		return 0, fmt.Errorf("%q is above 2^62 bytes", s)
	}
	return v * mult, nil
}

func (p *parser) rule(i int, raw rawRule) Rule {
	field := func(k string) string { return fmt.Sprintf("rules[%d].%s", i, k) }
	path := func(k ...any) []any { return append([]any{"rules", i}, k...) }
	r := Rule{Name: raw.Name, Key: raw.Key, Strategy: raw.Strategy}
	if r.Name == "" {
		p.fail(field("name"), path("name"), "is required")
	} else if err := rule.CheckName(r.Name); err != nil {
		p.fail(field("name"), path("name"), "%v", err)
	}
	if r.Key == "" {
		r.Key = DefaultKey
	}
	if err := checkKey(r.Key); err != nil {
		p.fail(field("key"), path("key"), "%v", err)
	}
	if raw.Rate == "" {
		p.fail(field("rate"), path("rate"), "is required (forms: 100/s, 6000/min, 1/3s, 2.5)")
	} else {
		rate, err := ParseRate(raw.Rate)
		if err != nil {
			p.fail(field("rate"), path("rate"), "%v", err)
		}
		r.Rate = rate
	}
	if raw.Burst == nil {
		if r.Rate.Tokens > 0 {
			r.Burst = rule.DefaultBurst(r.Rate)
		}
	} else {
		b, err := strconv.ParseInt(strings.TrimSpace(*raw.Burst), 10, 64)
		switch {
		case err != nil:
			p.fail(field("burst"), path("burst"), "%q is not a whole number of tokens", *raw.Burst)
		case b < 1:
			p.fail(field("burst"), path("burst"), "%d is below 1 (a bucket must hold at least one token)", b)
		}
		r.Burst = b
	}
	if r.Strategy == "" {
		r.Strategy = DefaultStrategy
	}
	params := maps.Clone(raw.Params)
	// The generic strategy parameter partition (what `tokenmesh replay
	// --param partition=...` writes) is the rule option too.
	partition := raw.Partition
	if v, ok := params[strategy.PartitionParam]; ok {
		if partition != "" && partition != v {
			p.fail(field("partition"), path("partition"), "%q and params.partition %q disagree", partition, v)
		}
		partition = v
		delete(params, strategy.PartitionParam)
	}
	mode, err := strategy.ParsePartitionMode(partition)
	if err != nil {
		p.fail(field("partition"), path("partition"), "%q: want available or conserve", partition)
	}
	r.Partition = mode
	for _, k := range slices.Sorted(maps.Keys(params)) {
		if err := checkParamText(k, params[k]); err != nil {
			p.fail(field(err.field), path("params", k), "%s", err.msg)
		}
	}
	r.Params = rule.Pairs(params)
	if p.err != nil {
		return r
	}
	if err := r.Validate(); err != nil {
		var fe *rule.FieldError
		if errors.As(err, &fe) {
			pp := path(fe.Field)
			if fe.Param != "" {
				pp = path("params", fe.Param)
			}
			p.fail(field(fe.Field), pp, "%s", fe.Msg)
		} else {
			p.fail(fmt.Sprintf("rules[%d]", i), path(), "%v", err)
		}
	}
	return r
}

// checkParamText checks one name: value of a rule's YAML params as text:
// it must survive the trip into Rule.Params ("name=value" strings that
// strategy.ParseParams splits at a comma followed by NAME=).
func checkParamText(k, v string) *checkError {
	if err := rule.CheckParamName(k); err != nil {
		return &checkError{field: "params", param: k, msg: err.Error()}
	}
	if strings.TrimSpace(v) != v {
		return &checkError{field: "params." + k, param: k, msg: fmt.Sprintf("%q: a value has no leading or trailing spaces", v)}
	}
	if pp, err := strategy.ParseParams([]string{k + "=" + v}); err != nil || len(pp.Names()) != 1 || pp.Values()[k] != v {
		return &checkError{field: "params." + k, param: k, msg: fmt.Sprintf("%q: a value may hold commas, but none followed by name= and none at its end", v)}
	}
	return nil
}

func defaultNodeName() string {
	h, err := os.Hostname()
	if err != nil || rule.CheckName(h) != nil {
		return "tokenmesh"
	}
	return h
}

// checkKey checks a key template with the grammar serve's HTTP mode uses
// to build keys from requests (keytemplate.Parse: literal text and
// {header:NAME}, {client_addr}, {path:N}, {jwt:CLAIM}, {method},
// {query:NAME} or {NAME}), so a template that loads is one the edge can
// apply; the error names the bad placeholder.
func checkKey(s string) error {
	_, err := keytemplate.Parse(s)
	return err
}

func checkAddr(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not host:port", s)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%q: port %q is not a number from 0 to 65535", s, port)
	}
	return nil
}

func decodeKey(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("not base64 (make one with: head -c 32 /dev/urandom | base64)")
	}
	if !keyLenOK(len(key)) {
		return nil, fmt.Errorf("decodes to %d bytes; want 16, 24 or 32 (AES-128/192/256)", len(key))
	}
	return key, nil
}

// keyLenOK reports whether n bytes is a gossip key length: 16, 24 or 32
// (AES-128/192/256).
func keyLenOK(n int) bool { return n == 16 || n == 24 || n == 32 }

// checkError is a rule error attributed to one field.
type checkError struct {
	field, param, msg string
}

func (e *checkError) Error() string { return e.field + ": " + e.msg }

// Validate checks f as Parse does; Default() and files built in code can be
// checked with it. It reads no files.
func (f *File) Validate() error {
	n := f.Node
	if err := rule.CheckName(n.Name); err != nil {
		return fmt.Errorf("node.name: %w", err)
	}
	for _, a := range []struct{ field, v string }{{"api_addr", n.APIAddr}, {"grpc_addr", n.GRPCAddr}, {"peer_addr", n.PeerAddr}, {"gossip_addr", n.GossipAddr}} {
		if err := checkAddr(a.v); err != nil {
			return fmt.Errorf("node.%s: %w", a.field, err)
		}
	}
	for i, j := range n.Join {
		if err := checkAddr(j); err != nil {
			return fmt.Errorf("node.join[%d]: %w", i, err)
		}
	}
	if n.SecretKey != nil && !keyLenOK(len(n.SecretKey)) {
		return fmt.Errorf("node.secret_key: %d bytes; want 16, 24 or 32", len(n.SecretKey))
	}
	if n.TLS != nil && (n.TLS.CertFile == "" || n.TLS.KeyFile == "" || n.TLS.CAFile == "") {
		return fmt.Errorf("node.tls: cert_file, key_file and ca_file are all required")
	}
	for _, x := range []struct {
		name string
		d    time.Duration
	}{{"read_header", n.APITimeouts.ReadHeader}, {"read", n.APITimeouts.Read}, {"write", n.APITimeouts.Write}, {"idle", n.APITimeouts.Idle}} {
		if x.d < 0 {
			return fmt.Errorf("node.api_timeouts.%s: %v is negative", x.name, x.d)
		}
	}
	if n.MemoryLimit < 0 {
		return fmt.Errorf("node.memory_limit: %d bytes is negative", n.MemoryLimit)
	}
	if err := n.LatencyHint.validate(); err != nil {
		return fmt.Errorf("node.latency_hint: %w", err)
	}
	if s := n.HTTPRefusalStatus; !refusalStatusOK(s) {
		return fmt.Errorf("node.http_refusal_status: %d: want 429 or 403", s)
	}
	if n.APITLS != nil && (n.APITLS.CertFile == "" || n.APITLS.KeyFile == "") {
		return fmt.Errorf("node.api_tls: cert_file and key_file are both required")
	}
	if n.StateDir != "" && n.SnapshotInterval < MinSnapshotInterval {
		return fmt.Errorf("node.snapshot_interval: %v is below the minimum of %v", n.SnapshotInterval, MinSnapshotInterval)
	}
	ri, rt := n.ReconnectInterval, n.ReconnectTimeout // zero: the default
	if ri == 0 {
		ri = DefaultReconnectInterval
	}
	if rt == 0 {
		rt = DefaultReconnectTimeout
	}
	if err := checkReconnect(ri, rt); err != nil {
		return fmt.Errorf("node.%s: %s", err.field, err.msg)
	}
	pi := n.ProbeInterval
	if pi == 0 {
		pi = DefaultProbeInterval // zero: the default
	}
	for _, err := range []*checkError{checkDrainDelay(n.DrainDelay), checkProbeInterval(pi)} {
		if err != nil {
			return fmt.Errorf("node.%s: %s", err.field, err.msg)
		}
	}
	if len(f.Rules) == 0 {
		return fmt.Errorf("rules: at least one rule is required")
	}
	seen := map[string]bool{}
	for i, r := range f.Rules {
		if err := rule.CheckName(r.Name); err != nil {
			return fmt.Errorf("rules[%d].name: %w", i, err)
		}
		if seen[r.Name] {
			return fmt.Errorf("rules[%d].name: %q is defined twice", i, r.Name)
		}
		seen[r.Name] = true
		if err := checkKey(r.Key); err != nil {
			return fmt.Errorf("rules[%d].key: %w", i, err)
		}
		if err := check(r); err != nil {
			return fmt.Errorf("rules[%d].%w", i, err)
		}
	}
	return nil
}

// check validates the rule as Validate does (rule.Rule.Validate and the
// key template), with the field of the error.
func check(r Rule) error {
	if err := r.Validate(); err != nil {
		var fe *rule.FieldError
		if errors.As(err, &fe) {
			return &checkError{field: fe.Field, param: fe.Param, msg: fe.Msg}
		}
		return err
	}
	if r.Key != "" {
		if err := checkKey(r.Key); err != nil {
			return &checkError{field: "key", msg: err.Error()}
		}
	}
	return nil
}

// ClusterRule checks r as Validate does and returns it with the
// defaults a file would get (Strategy DefaultStrategy, Key DefaultKey).
func ClusterRule(r Rule) (cluster.Rule, error) {
	if r.Strategy == "" {
		r.Strategy = DefaultStrategy
	}
	if r.Key == "" {
		r.Key = DefaultKey
	}
	if err := check(r); err != nil {
		return cluster.Rule{}, fmt.Errorf("rule %q: %w", r.Name, err)
	}
	r.Params = slices.Clone(r.Params)
	return r, nil
}

// ClusterRules converts every rule of f (see Rule.ClusterRule).
func (f *File) ClusterRules() ([]cluster.Rule, error) {
	out := make([]cluster.Rule, 0, len(f.Rules))
	for _, r := range f.Rules {
		cr, err := ClusterRule(r)
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
		Rules: []Rule{{
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

// Marshal writes f as YAML that Parse reads back into f (the inverse of
// Parse, for programs that generate node configurations, such as
// localcluster): every field of Node and Rule, a field left at its zero
// value omitted (so Parse gives it its default). The secret key is written
// as secret_key_file when SecretKeyFile is set, as base64 secret_key
// otherwise; snapshot_interval only with a state_dir (Parse refuses it
// alone). Rates are written exactly (rule.FormatRate), params as a map.
// Errors: a rule whose Params do not parse (strategy.ParseParams). Marshal
// does not validate: Parse does, and names what is wrong.
func Marshal(f *File) ([]byte, error) {
	n := f.Node
	raw := rawFile{Node: rawNode{
		Name: n.Name, APIAddr: n.APIAddr, GRPCAddr: n.GRPCAddr, PeerAddr: n.PeerAddr, GossipAddr: n.GossipAddr,
		Join: slices.Clone(n.Join), StateDir: n.StateDir, EnvoyConfig: n.EnvoyConfig,
		HTTPRefusalStatus:              n.HTTPRefusalStatus,
		EnvoyMaxOverridesPerDescriptor: n.EnvoyMaxOverridesPerDescriptor, EnvoyMaxOverrides: n.EnvoyMaxOverrides,
	}}
	if n.APITLS != nil {
		raw.Node.APITLS = &rawAPITLS{CertFile: n.APITLS.CertFile, KeyFile: n.APITLS.KeyFile, ClientCAFile: n.APITLS.ClientCAFile}
	}
	if n.TLS != nil {
		raw.Node.TLS = &rawTLS{CertFile: n.TLS.CertFile, KeyFile: n.TLS.KeyFile, CAFile: n.TLS.CAFile}
	}
	switch {
	case n.SecretKeyFile != "":
		raw.Node.SecretKeyFile = n.SecretKeyFile
	case len(n.SecretKey) > 0:
		raw.Node.SecretKey = base64.StdEncoding.EncodeToString(n.SecretKey)
	}
	if n.Insecure {
		raw.Node.Insecure = &n.Insecure
	}
	if n.EnvoyShadowMode {
		raw.Node.EnvoyShadowMode = &n.EnvoyShadowMode
	}
	if n.MemoryLimit != 0 {
		raw.Node.MemoryLimit = strconv.FormatInt(n.MemoryLimit, 10)
	}
	if t := n.APITimeouts; t != (APITimeouts{}) {
		d := func(v time.Duration) string {
			if v == 0 {
				return ""
			}
			return v.String()
		}
		raw.Node.APITimeouts = &rawTimeout{ReadHeader: d(t.ReadHeader), Read: d(t.Read), Write: d(t.Write), Idle: d(t.Idle)}
	}
	if n.StateDir != "" && n.SnapshotInterval != 0 {
		raw.Node.SnapshotInterval = n.SnapshotInterval.String()
	}
	if n.ReconnectInterval != 0 {
		raw.Node.ReconnectInterval = n.ReconnectInterval.String()
	}
	if n.ReconnectTimeout != 0 {
		raw.Node.ReconnectTimeout = n.ReconnectTimeout.String()
	}
	if n.ProbeInterval != 0 {
		raw.Node.ProbeInterval = n.ProbeInterval.String()
	}
	raw.Node.DrainDelay = n.DrainDelay.String() // always: absent means the default, not 0
	if n.LatencyHint != (LatencyHint{}) {
		raw.Node.LatencyHint = n.LatencyHint.String()
	}
	for _, r := range f.Rules {
		params, err := strategy.ParseParams(r.Params)
		if err != nil {
			return nil, fmt.Errorf("config: rule %q: %w", r.Name, err)
		}
		rr := rawRule{Name: r.Name, Key: r.Key, Rate: rule.FormatRate(r.Rate), Strategy: r.Strategy}
		if r.Burst != 0 {
			b := strconv.FormatInt(r.Burst, 10)
			rr.Burst = &b
		}
		if len(params.Names()) > 0 {
			rr.Params = params.Values()
		}
		if r.Partition != strategy.PartitionAvailable {
			rr.Partition = r.Partition.String()
		}
		raw.Rules = append(raw.Rules, rr)
	}
	return yaml.Marshal(raw)
}
