package config

import (
	"errors"
	"fmt"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/topology"
)

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

// Validate checks f as Parse does; Default() and files built in code can be
// checked with it. It reads no files.
func (f *File) Validate() error {
	if err := f.Node.validate(); err != nil {
		return err
	}
	return validateRules(f.Rules)
}

// validate checks the node's settings, one group after the other; the
// first error is returned, so the order is the order of the checks.
func (n Node) validate() error {
	for _, check := range []func(Node) error{
		validateNodeName,
		validateNodeAddrs,
		validateNodePeerSecurity,
		validateNodeAPITimeouts,
		validateNodeMemoryLimit,
		validateNodeLatencyHint,
		validateNodeHTTPRefusalStatus,
		validateNodeAPITLS,
		validateNodeSnapshot,
		validateNodeMembership,
		validateNodeEnvoyStrategy,
	} {
		if err := check(n); err != nil {
			return err
		}
	}
	return nil
}

// validateNodeName checks node.name.
func validateNodeName(n Node) error {
	if err := rule.CheckName(n.Name); err != nil {
		return fmt.Errorf("node.name: %w", err)
	}
	if n.Region == "" {
		return nil
	}
	if err := topology.CheckName(n.Region); err != nil {
		return fmt.Errorf("node.region: %w", err)
	}
	if got := topology.Of(strategy.NodeID(n.Name)); got != n.Region {
		return fmt.Errorf("node.name: %s", regionMismatch(n.Name, n.Region))
	}
	return nil
}

// regionMismatch is the error text of a node name outside node.region.
func regionMismatch(name, region string) string {
	return fmt.Sprintf("%q is not in node.region %q: a node's region is the part of its name before the first '.' (the strategies read a peer's region from its name); name it %q", name, region, region+"."+name)
}

// validateNodeAddrs checks the listen addresses and node.join.
func validateNodeAddrs(n Node) error {
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
	return nil
}

// validateNodePeerSecurity checks node.secret_key's length and that
// node.tls names all three files.
func validateNodePeerSecurity(n Node) error {
	if n.SecretKey != nil && !keyLenOK(len(n.SecretKey)) {
		return fmt.Errorf("node.secret_key: %d bytes; want 16, 24 or 32", len(n.SecretKey))
	}
	if n.TLS != nil && (n.TLS.CertFile == "" || n.TLS.KeyFile == "" || n.TLS.CAFile == "") {
		return fmt.Errorf("node.tls: cert_file, key_file and ca_file are all required")
	}
	return nil
}

// validateNodeAPITimeouts checks that no node.api_timeouts is negative.
func validateNodeAPITimeouts(n Node) error {
	for _, x := range []struct {
		name string
		d    time.Duration
	}{{"read_header", n.APITimeouts.ReadHeader}, {"read", n.APITimeouts.Read}, {"write", n.APITimeouts.Write}, {"idle", n.APITimeouts.Idle}} {
		if x.d < 0 {
			return fmt.Errorf("node.api_timeouts.%s: %v is negative", x.name, x.d)
		}
	}
	return nil
}

// validateNodeMemoryLimit checks that node.memory_limit is not negative.
func validateNodeMemoryLimit(n Node) error {
	if n.MemoryLimit < 0 {
		return fmt.Errorf("node.memory_limit: %d bytes is negative", n.MemoryLimit)
	}
	return nil
}

// validateNodeLatencyHint checks node.latency_hint.
func validateNodeLatencyHint(n Node) error {
	if err := n.LatencyHint.validate(); err != nil {
		return fmt.Errorf("node.latency_hint: %w", err)
	}
	return nil
}

// validateNodeHTTPRefusalStatus checks node.http_refusal_status.
func validateNodeHTTPRefusalStatus(n Node) error {
	if s := n.HTTPRefusalStatus; !refusalStatusOK(s) {
		return fmt.Errorf("node.http_refusal_status: %d: want 429 or 403", s)
	}
	return nil
}

// validateNodeAPITLS checks that node.api_tls names a certificate and key.
func validateNodeAPITLS(n Node) error {
	if n.APITLS != nil && (n.APITLS.CertFile == "" || n.APITLS.KeyFile == "") {
		return fmt.Errorf("node.api_tls: cert_file and key_file are both required")
	}
	return nil
}

// validateNodeSnapshot checks node.snapshot_interval when there is a
// state_dir.
func validateNodeSnapshot(n Node) error {
	if n.StateDir != "" && n.SnapshotInterval < MinSnapshotInterval {
		return fmt.Errorf("node.snapshot_interval: %v is below the minimum of %v", n.SnapshotInterval, MinSnapshotInterval)
	}
	return nil
}

// validateNodeMembership checks the membership timers (reconnect_interval,
// reconnect_timeout, drain_delay, probe_interval); zero is the default.
func validateNodeMembership(n Node) error {
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
	return nil
}

// validateRules checks the rules: at least one, names unique, each valid.
func validateRules(rules []rule.Rule) error {
	if len(rules) == 0 {
		return fmt.Errorf("rules: at least one rule is required")
	}
	seen := map[string]bool{}
	for i, r := range rules {
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
func check(r rule.Rule) error {
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

// validateNodeEnvoyStrategy checks node.envoy_strategy: "" or a known
// strategy (the error lists them).
func validateNodeEnvoyStrategy(n Node) error {
	if n.EnvoyStrategy == "" {
		return nil
	}
	r := rule.Rule{Name: "envoy_strategy", Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 1, Strategy: n.EnvoyStrategy}
	var fe *rule.FieldError
	if err := r.Validate(); errors.As(err, &fe) && fe.Field == "strategy" {
		return fmt.Errorf("node.envoy_strategy: %s", fe.Msg)
	}
	return nil
}
