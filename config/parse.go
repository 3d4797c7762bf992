package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/httplimit/keytemplate"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// raw mirrors the YAML; scalars are strings so that this package, not the
// YAML library, decides what a rate or a duration is.
type rawFile struct {
	Node  rawNode   `yaml:"node"`
	Rules []rawRule `yaml:"rules"`
}

type rawNode struct {
	Name          string      `yaml:"name,omitempty"`
	Region        string      `yaml:"region,omitempty"`
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
	EnvoyStrategy     string `yaml:"envoy_strategy,omitempty"`
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

// ruleAt is rules[i] in errors: the field names and the paths (for
// lineOf) of its fields.
type ruleAt int

// field is the field path of k in rules[i] ("rules[2].rate").
func (i ruleAt) field(k string) string { return fmt.Sprintf("rules[%d].%s", int(i), k) }

// path is the lineOf path of k in rules[i].
func (i ruleAt) path(k ...any) []any { return append([]any{"rules", int(i)}, k...) }

// rule reads rules[i]: its fields in the order their errors are checked
// (the parser keeps the first), then, when they all read, the rule as a
// whole (rule.Rule.Validate).
func (p *parser) rule(i int, raw rawRule) rule.Rule {
	at := ruleAt(i)
	r := rule.Rule{Name: raw.Name, Key: raw.Key, Strategy: raw.Strategy}
	p.ruleName(at, r.Name)
	if r.Key == "" {
		r.Key = DefaultKey
	}
	if err := checkKey(r.Key); err != nil {
		p.fail(at.field("key"), at.path("key"), "%v", err)
	}
	r.Rate = p.ruleRate(at, raw.Rate)
	r.Burst = p.ruleBurst(at, raw.Burst, r.Rate)
	if r.Strategy == "" {
		r.Strategy = DefaultStrategy
	}
	r.Partition, r.Params = p.ruleParams(at, raw)
	if p.err != nil {
		return r
	}
	p.ruleValidate(at, r)
	return r
}

// ruleName checks rules[i].name: required, and a valid name.
func (p *parser) ruleName(at ruleAt, name string) {
	if name == "" {
		p.fail(at.field("name"), at.path("name"), "is required")
	} else if err := rule.CheckName(name); err != nil {
		p.fail(at.field("name"), at.path("name"), "%v", err)
	}
}

// ruleRate reads rules[i].rate (required).
func (p *parser) ruleRate(at ruleAt, s string) bucket.Rate {
	if s == "" {
		p.fail(at.field("rate"), at.path("rate"), "is required (forms: 100/s, 6000/min, 1/3s, 2.5)")
		return bucket.Rate{}
	}
	rate, err := ParseRate(s)
	if err != nil {
		p.fail(at.field("rate"), at.path("rate"), "%v", err)
	}
	return rate
}

// ruleBurst reads rules[i].burst: a whole number of tokens, at least 1;
// absent, rule.DefaultBurst(rate) (0 when the rate is not positive).
func (p *parser) ruleBurst(at ruleAt, s *string, rate bucket.Rate) int64 {
	if s == nil {
		if rate.Tokens > 0 {
			return rule.DefaultBurst(rate)
		}
		return 0
	}
	b, err := strconv.ParseInt(strings.TrimSpace(*s), 10, 64)
	switch {
	case err != nil:
		p.fail(at.field("burst"), at.path("burst"), "%q is not a whole number of tokens", *s)
	case b < 1:
		p.fail(at.field("burst"), at.path("burst"), "%d is below 1 (a bucket must hold at least one token)", b)
	}
	return b
}

// ruleParams reads rules[i].partition and rules[i].params: the partition
// mode (from either) and the other params as sorted "name=value" pairs.
func (p *parser) ruleParams(at ruleAt, raw rawRule) (strategy.PartitionMode, []string) {
	params := maps.Clone(raw.Params)
	// The generic strategy parameter partition (what `tokenmesh replay
	// --param partition=...` writes) is the rule option too.
	partition := raw.Partition
	if v, ok := params[strategy.PartitionParam]; ok {
		if partition != "" && partition != v {
			p.fail(at.field("partition"), at.path("partition"), "%q and params.partition %q disagree", partition, v)
		}
		partition = v
		delete(params, strategy.PartitionParam)
	}
	mode, err := strategy.ParsePartitionMode(partition)
	if err != nil {
		p.fail(at.field("partition"), at.path("partition"), "%q: want available or conserve", partition)
	}
	for _, k := range slices.Sorted(maps.Keys(params)) {
		if err := checkParamText(k, params[k]); err != nil {
			p.fail(at.field(err.field), at.path("params", k), "%s", err.msg)
		}
	}
	return mode, rule.Pairs(params)
}

// ruleValidate checks the whole rule (rule.Rule.Validate), the error at
// the field (or param) it names.
func (p *parser) ruleValidate(at ruleAt, r rule.Rule) {
	err := r.Validate()
	if err == nil {
		return
	}
	var fe *rule.FieldError
	if !errors.As(err, &fe) {
		p.fail(fmt.Sprintf("rules[%d]", int(at)), at.path(), "%v", err)
		return
	}
	pp := at.path(fe.Field)
	if fe.Param != "" {
		pp = at.path("params", fe.Param)
	}
	p.fail(at.field(fe.Field), pp, "%s", fe.Msg)
}

// checkParamText checks one name: value of a rule's YAML params as text:
// it must survive the trip into rule.Rule.Params ("name=value" strings that
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
