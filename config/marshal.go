package config

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// Marshal writes f as YAML that Parse reads back into f (the inverse of
// Parse, for programs that generate node configurations, such as
// localcluster): every field of Node and rule.Rule, a field left at its zero
// value omitted (so Parse gives it its default). The secret key is written
// as secret_key_file when SecretKeyFile is set, as base64 secret_key
// otherwise; snapshot_interval only with a state_dir (Parse refuses it
// alone). Rates are written exactly (rule.FormatRate), params as a map.
// Errors: a rule whose Params do not parse (strategy.ParseParams). Marshal
// does not validate: Parse does, and names what is wrong.
func Marshal(f *File) ([]byte, error) {
	raw := rawFile{Node: marshalNode(f.Node)}
	for _, r := range f.Rules {
		rr, err := marshalRule(r)
		if err != nil {
			return nil, err
		}
		raw.Rules = append(raw.Rules, rr)
	}
	return yaml.Marshal(raw)
}

// marshalNode is the node: section of Marshal.
func marshalNode(n Node) rawNode {
	raw := rawNode{
		Name: n.Name, Region: n.Region, APIAddr: n.APIAddr, GRPCAddr: n.GRPCAddr, PeerAddr: n.PeerAddr, GossipAddr: n.GossipAddr,
		Join: slices.Clone(n.Join), StateDir: n.StateDir, EnvoyConfig: n.EnvoyConfig, EnvoyStrategy: n.EnvoyStrategy,
		HTTPRefusalStatus:              n.HTTPRefusalStatus,
		EnvoyMaxOverridesPerDescriptor: n.EnvoyMaxOverridesPerDescriptor, EnvoyMaxOverrides: n.EnvoyMaxOverrides,
	}
	marshalNodeSecurity(n, &raw)
	if n.EnvoyShadowMode {
		raw.EnvoyShadowMode = &n.EnvoyShadowMode
	}
	if n.MemoryLimit != 0 {
		raw.MemoryLimit = strconv.FormatInt(n.MemoryLimit, 10)
	}
	marshalNodeTimers(n, &raw)
	return raw
}

// marshalNodeSecurity writes the TLS settings, the secret key (as
// secret_key_file when SecretKeyFile is set) and insecure.
func marshalNodeSecurity(n Node, raw *rawNode) {
	if n.APITLS != nil {
		raw.APITLS = &rawAPITLS{CertFile: n.APITLS.CertFile, KeyFile: n.APITLS.KeyFile, ClientCAFile: n.APITLS.ClientCAFile}
	}
	if n.TLS != nil {
		raw.TLS = &rawTLS{CertFile: n.TLS.CertFile, KeyFile: n.TLS.KeyFile, CAFile: n.TLS.CAFile}
	}
	switch {
	case n.SecretKeyFile != "":
		raw.SecretKeyFile = n.SecretKeyFile
	case len(n.SecretKey) > 0:
		raw.SecretKey = base64.StdEncoding.EncodeToString(n.SecretKey)
	}
	if n.Insecure {
		raw.Insecure = &n.Insecure
	}
}

// durationText is d as YAML, "" (omitted) for zero.
func durationText(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// marshalNodeTimers writes the durations: api_timeouts, snapshot_interval
// (only with a state_dir), the membership timers and latency_hint.
func marshalNodeTimers(n Node, raw *rawNode) {
	if t := n.APITimeouts; t != (APITimeouts{}) {
		raw.APITimeouts = &rawTimeout{ReadHeader: durationText(t.ReadHeader), Read: durationText(t.Read), Write: durationText(t.Write), Idle: durationText(t.Idle)}
	}
	if n.StateDir != "" {
		raw.SnapshotInterval = durationText(n.SnapshotInterval)
	}
	raw.ReconnectInterval = durationText(n.ReconnectInterval)
	raw.ReconnectTimeout = durationText(n.ReconnectTimeout)
	raw.ProbeInterval = durationText(n.ProbeInterval)
	raw.DrainDelay = n.DrainDelay.String() // always: absent means the default, not 0
	if n.LatencyHint != (LatencyHint{}) {
		raw.LatencyHint = n.LatencyHint.String()
	}
}

// marshalRule is one entry of Marshal's rules; errors: Params that do
// not parse (strategy.ParseParams).
func marshalRule(r rule.Rule) (rawRule, error) {
	params, err := strategy.ParseParams(r.Params)
	if err != nil {
		return rawRule{}, fmt.Errorf("config: rule %q: %w", r.Name, err)
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
	return rr, nil
}
