package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

const key32 = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=" // 32 bytes

// norm reduces r to lowest terms (Tokens over Per in nanoseconds), the form
// bucket and ParseRate return.
func norm(r bucket.Rate) bucket.Rate {
	a, b := r.Tokens, int64(r.Per)
	for b != 0 {
		a, b = b, a%b
	}
	return bucket.Rate{Tokens: r.Tokens / a, Per: r.Per / time.Duration(a)}
}

func TestParseRate(t *testing.T) {
	good := []struct {
		in   string
		want bucket.Rate
	}{
		{"100/s", bucket.Rate{Tokens: 100, Per: time.Second}},
		{"6000/min", bucket.Rate{Tokens: 100, Per: time.Second}},
		{"1/3s", bucket.Rate{Tokens: 1, Per: 3 * time.Second}},
		{"2.5", bucket.Rate{Tokens: 5, Per: 2 * time.Second}},
		{"100", bucket.Rate{Tokens: 100, Per: time.Second}},
		{"0.001", bucket.Rate{Tokens: 1, Per: 1000 * time.Second}},
		{"10/d", bucket.Rate{Tokens: 1, Per: 8640 * time.Second}},
		{"5/1m30s", bucket.Rate{Tokens: 1, Per: 18 * time.Second}},
		{"1/250ms", bucket.Rate{Tokens: 1, Per: 250 * time.Millisecond}},
		{" 7 / h ", bucket.Rate{Tokens: 7, Per: time.Hour}},
		{"3/ms", bucket.Rate{Tokens: 3, Per: time.Millisecond}},
	}
	for _, c := range good {
		got, err := ParseRate(c.in)
		if err != nil || got != norm(c.want) {
			t.Errorf("ParseRate(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	bad := []string{"", "10/fortnight", "0", "-1", "0/s", "-3/s", "1.5/s", "/s", "1/", "1/0s", "1/-3s",
		"NaN", "Inf", "0x10", "1/3", "abc", "1/1000000001s", "1e13", "+5/s"}
	for _, in := range bad {
		if r, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) = %+v, want an error", in, r)
		} else if !strings.Contains(err.Error(), "is not a rate") {
			t.Errorf("ParseRate(%q): error %q does not say it is not a rate", in, err)
		}
	}
}

func TestParseGood(t *testing.T) {
	cases := []struct {
		name, yaml string
		check      func(t *testing.T, f *File)
	}{
		{"minimal", "rules:\n  - name: a\n    rate: 100/s\n", func(t *testing.T, f *File) {
			r := f.Rules[0]
			if r.Strategy != DefaultStrategy || r.Key != DefaultKey || r.Burst != 100 || r.Rate != norm(bucket.Rate{Tokens: 100, Per: time.Second}) {
				t.Errorf("rule defaults: %+v", r)
			}
			n := f.Node
			if n.APIAddr != DefaultAPIAddr || n.GRPCAddr != DefaultGRPCAddr || n.APITLS != nil || n.PeerAddr != DefaultPeerAddr || n.GossipAddr != DefaultGossipAddr || n.Name == "" ||
				n.ReconnectInterval != DefaultReconnectInterval || n.ReconnectTimeout != DefaultReconnectTimeout {
				t.Errorf("node defaults: %+v", n)
			}
		}},
		{"slow rate default burst is 1", "rules: [{name: a, rate: 1/3s}]", func(t *testing.T, f *File) {
			if f.Rules[0].Burst != 1 {
				t.Errorf("burst %d, want 1", f.Rules[0].Burst)
			}
		}},
		{"fractional default burst rounds up", "rules: [{name: a, rate: 2.5}]", func(t *testing.T, f *File) {
			if f.Rules[0].Burst != 3 {
				t.Errorf("burst %d, want 3", f.Rules[0].Burst)
			}
		}},
		{"numeric rate", "rules: [{name: a, rate: 50, burst: 7}]", func(t *testing.T, f *File) {
			if r := f.Rules[0]; r.Rate != norm(bucket.Rate{Tokens: 50, Per: time.Second}) || r.Burst != 7 {
				t.Errorf("%+v", r)
			}
		}},
		{"full node", `
node:
  name: n-1
  api_addr: "[::1]:8080"
  grpc_addr: 0.0.0.0:9090
  api_tls: {cert_file: s.pem, key_file: s-key.pem}
  peer_addr: 10.0.0.1:7947
  gossip_addr: 0.0.0.0:7946
  join: [10.0.0.2:7946, "host.example:7946"]
  secret_key: ` + key32 + `
  tls: {cert_file: c.pem, key_file: k.pem, ca_file: ca.pem}
  reconnect_interval: 2s
  reconnect_timeout: 1h
rules:
  - {name: a, rate: 6000/min, burst: 10, strategy: gdrl}
  - {name: b, rate: 1/s, strategy: owner, params: {hold: 1ms, retries: 3, fail_open: false}}
  - {name: c, rate: 1/s, strategy: local, key: "{tenant}/{header:x-api-key}"}
`, func(t *testing.T, f *File) {
			n := f.Node
			if n.GRPCAddr != "0.0.0.0:9090" || n.APITLS == nil || n.APITLS.KeyFile != "s-key.pem" || n.APITLS.ClientCAFile != "" {
				t.Errorf("api: %+v %+v", n, n.APITLS)
			}
			if n.ReconnectInterval != 2*time.Second || n.ReconnectTimeout != time.Hour {
				t.Errorf("reconnect: %v %v", n.ReconnectInterval, n.ReconnectTimeout)
			}
			if n.Name != "n-1" || len(n.Join) != 2 || len(n.SecretKey) != 32 || n.TLS == nil || n.TLS.CAFile != "ca.pem" {
				t.Errorf("node: %+v", n)
			}
			cr, err := CheckRule(f.Rules[1])
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(cr.Params, " ") != "fail_open=false hold=1ms retries=3" || cr.Strategy != "owner" || cr.Burst != 1 {
				t.Errorf("cluster rule %+v", cr)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := Parse([]byte(c.yaml), "t.yaml")
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			c.check(t, f)
		})
	}
}

func TestParseBad(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       []string // substrings of the error
		line       int      // 0: not checked
	}{
		{"empty", "", []string{"empty"}, 0},
		{"snapshot interval not a duration", "node:\n  state_dir: s\n  snapshot_interval: often\nrules: [{name: a, rate: 1/s}]\n",
			[]string{`t.yaml:3: node.snapshot_interval: "often" is not a duration`}, 3},
		{"snapshot interval too short", "node:\n  state_dir: s\n  snapshot_interval: 1ms\nrules: [{name: a, rate: 1/s}]\n",
			[]string{"node.snapshot_interval: 1ms is below the minimum of 10ms"}, 3},
		{"snapshot interval without state_dir", "node:\n  snapshot_interval: 2s\nrules: [{name: a, rate: 1/s}]\n",
			[]string{"node.snapshot_interval: is set but node.state_dir is not"}, 2},
		{"no rules", "node: {name: a}\n", []string{"rules: at least one rule"}, 0},
		{"syntax", "rules: [\n", []string{"t.yaml"}, 0},
		{"unknown field", "rules:\n  - name: a\n    rate: 1/s\n    brust: 3\n", []string{"t.yaml:4:", "brust"}, 4},
		{"unknown node field", "node:\n  nmae: x\nrules: [{name: a, rate: 1/s}]\n", []string{"nmae"}, 2},
		{"two documents", "rules: [{name: a, rate: 1/s}]\n---\nrules: []\n", []string{"more than one"}, 0},
		{"bad rate", "rules:\n  - {name: a, rate: 1/s}\n  - {name: b, rate: 1/s}\n  - name: c\n    rate: 10/fortnight\n",
			[]string{`t.yaml:5: rules[2].rate: "10/fortnight" is not a rate`, "forms: 100/s, 6000/min, 1/3s, 2.5"}, 5},
		{"missing rate", "rules:\n  - name: a\n", []string{"rules[0].rate: is required"}, 2},
		{"zero rate", "rules: [{name: a, rate: 0}]", []string{"rules[0].rate"}, 1},
		{"missing name", "rules:\n  - rate: 1/s\n", []string{"rules[0].name: is required"}, 0},
		{"bad name", "rules: [{name: 'a b', rate: 1/s}]", []string{"rules[0].name"}, 0},
		{"duplicate name", "rules:\n  - {name: a, rate: 1/s}\n  - {name: a, rate: 2/s}\n", []string{"t.yaml:3: rules[1].name", "rules[0]"}, 3},
		{"burst zero", "rules: [{name: a, rate: 1/s, burst: 0}]", []string{"rules[0].burst", "below 1"}, 0},
		{"burst negative", "rules: [{name: a, rate: 1/s, burst: -4}]", []string{"rules[0].burst"}, 0},
		{"burst not a number", "rules: [{name: a, rate: 1/s, burst: lots}]", []string{"rules[0].burst", "lots"}, 0},
		{"burst too large", "rules: [{name: a, rate: 1/1000s, burst: 9000000000000000}]", []string{"rules[0].burst", "too large"}, 0},
		{"unknown strategy", "rules: [{name: a, rate: 1/s, strategy: magic}]", []string{"rules[0].strategy", "unknown strategy", "owner"}, 0},
		{"unknown param", "rules:\n  - name: a\n    rate: 1/s\n    strategy: owner\n    params:\n      hodl: 2ms\n", []string{"t.yaml:6: rules[0].params", "hodl"}, 6},
		{"bad param value", "rules:\n  - name: a\n    rate: 1/s\n    params: {hold: soon}\n", []string{"rules[0].params", "hold"}, 0},
		{"param local does not declare", "rules: [{name: a, rate: 1/s, strategy: local, params: {x: 1}}]", []string{"rules[0].params", "strategy local: unknown parameter x (it knows overdraft, max_debt)"}, 0},
		{"bad partition", "rules:\n  - name: a\n    rate: 1/s\n    partition: maybe\n", []string{"t.yaml:4: rules[0].partition", `"maybe": want available or conserve`}, 4},
		{"conserve for local", "rules: [{name: a, rate: 1/s, strategy: local, partition: conserve}]", []string{"rules[0].partition", "local does not implement"}, 0},
		{"partition and the param disagree", "rules: [{name: a, rate: 1/s, strategy: gdrl, partition: available, params: {partition: conserve}}]", []string{"rules[0].partition", "disagree"}, 0},
		{"partition param bad", "rules: [{name: a, rate: 1/s, strategy: gdrl, params: {partition: never}}]", []string{"rules[0].partition", `"never": want available or conserve`}, 0},
		{"param name with dot", "rules: [{name: a, rate: 1/s, params: {owner.hold: 1ms}}]", []string{"rules[0].params"}, 0},
		{"unknown param lists the declared ones", "rules: [{name: a, rate: 1/s, strategy: gcounter, params: {gosip: 1s}}]", []string{"rules[0].params", "unknown parameter gosip", "it knows gossip, catch_up, idle"}, 0},
		{"param not of its declared type", "rules:\n  - name: a\n    rate: 1/s\n    strategy: owner\n    params:\n      retries: 1.5\n", []string{"t.yaml:6: rules[0].params.retries", "strategy owner", `retries="1.5"`, "whole number"}, 6},
		{"param not in its enum", "rules: [{name: a, rate: 1/s, strategy: gdrl, params: {graph: star}}]", []string{"rules[0].params.graph", "one of ring, regular, full"}, 0},
		{"comma kept in a value, then typed", "rules: [{name: a, rate: 1/s, params: {hold: '1ms,2ms'}}]", []string{"rules[0].params.hold", `"1ms,2ms"`, "duration"}, 0},
		{"param value with comma", "rules: [{name: a, rate: 1/s, params: {hold: '1ms,timeout=2s'}}]", []string{"rules[0].params.hold"}, 0},
		{"bad key template", "rules: [{name: a, rate: 1/s, key: '{tenant'}]", []string{"rules[0].key", "'{' without '}'"}, 0},
		{"empty placeholder", "rules: [{name: a, rate: 1/s, key: 'x{}'}]", []string{"rules[0].key"}, 0},
		{"unknown placeholder kind", "rules: [{name: a, rate: 1/s, key: '{nope:x}'}]", []string{"rules[0].key", "{nope:x}"}, 0},
		{"bad path segment", "rules: [{name: a, rate: 1/s, key: '{path:0}'}]", []string{"rules[0].key", "segment number"}, 0},
		{"bad api addr", "node:\n  api_addr: localhost\nrules: [{name: a, rate: 1/s}]\n", []string{"t.yaml:2: node.api_addr", "host:port"}, 2},
		{"bad grpc addr", "node:\n  grpc_addr: 9090\nrules: [{name: a, rate: 1/s}]\n", []string{"t.yaml:2: node.grpc_addr", "host:port"}, 2},
		{"api tls without key", "node:\n  api_tls: {cert_file: c.pem}\nrules: [{name: a, rate: 1/s}]\n", []string{"node.api_tls.key_file", "required"}, 0},
		{"bad peer port", "node: {peer_addr: 'h:99999'}\nrules: [{name: a, rate: 1/s}]\n", []string{"node.peer_addr", "port"}, 0},
		{"bad gossip addr", "node: {gossip_addr: ':x'}\nrules: [{name: a, rate: 1/s}]\n", []string{"node.gossip_addr"}, 0},
		{"bad join", "node:\n  join:\n    - 10.0.0.1:7946\n    - nope\nrules: [{name: a, rate: 1/s}]\n", []string{"t.yaml:4: node.join[1]"}, 4},
		{"bad node name", "node: {name: 'a/b'}\nrules: [{name: a, rate: 1/s}]\n", []string{"node.name"}, 0},
		{"key not base64", "node: {secret_key: '!!!'}\nrules: [{name: a, rate: 1/s}]\n", []string{"node.secret_key", "base64"}, 0},
		{"key wrong length", "node: {secret_key: 'YWJj'}\nrules: [{name: a, rate: 1/s}]\n", []string{"node.secret_key", "3 bytes"}, 0},
		{"key and key file", "node: {secret_key: '" + key32 + "', secret_key_file: k}\nrules: [{name: a, rate: 1/s}]\n", []string{"node.secret_key", "not both"}, 0},
		{"tls incomplete", "node: {tls: {cert_file: c.pem}}\nrules: [{name: a, rate: 1/s}]\n", []string{"node.tls.key_file", "required"}, 0},
		{"idle_key_ttl is gone", "node: {idle_key_ttl: 10m}\nrules: [{name: a, rate: 1/s}]\n", []string{"idle_key_ttl", "known:"}, 0},
		{"reconnect interval not a duration", "node:\n  reconnect_interval: 5\nrules: [{name: a, rate: 1/s}]\n", []string{"t.yaml:2: node.reconnect_interval", "not a duration"}, 2},
		{"reconnect interval too short", "node: {reconnect_interval: 1ms}\nrules: [{name: a, rate: 1/s}]\n", []string{"node.reconnect_interval", "outside"}, 0},
		{"reconnect timeout below interval", "node: {reconnect_interval: 10s, reconnect_timeout: 5s}\nrules: [{name: a, rate: 1/s}]\n", []string{"node.reconnect_timeout", "outside"}, 0},
		{"drain delay too long", "node: {drain_delay: 1h}\nrules: [{name: a, rate: 1/s}]\n", []string{"node.drain_delay", "outside [0s, 5m0s]"}, 0},
		{"probe interval too short", "node: {probe_interval: 10ms}\nrules: [{name: a, rate: 1/s}]\n", []string{"node.probe_interval", "outside [50ms, 10s]"}, 0},
		{"probe interval not a duration", "node:\n  probe_interval: fast\nrules: [{name: a, rate: 1/s}]\n", []string{"t.yaml:2: node.probe_interval", "not a duration"}, 2},
		{"reconnect timeout too long", "node: {reconnect_timeout: 10000h}\nrules: [{name: a, rate: 1/s}]\n", []string{"node.reconnect_timeout"}, 0},
		{"rules not a list", "rules: {name: a}\n", []string{"t.yaml:1"}, 1},
		{"wrong type", "node: {join: 3}\nrules: [{name: a, rate: 1/s}]\n", []string{"t.yaml:1"}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := Parse([]byte(c.yaml), "t.yaml")
			if err == nil {
				t.Fatalf("no error; got %+v", f)
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %T %v is not *Error", err, err)
			}
			if !strings.HasPrefix(err.Error(), "t.yaml") {
				t.Errorf("error %q does not start with the file name", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if c.line != 0 && ce.Line != c.line {
				t.Errorf("error %q: line %d, want %d", err, ce.Line, c.line)
			}
		})
	}
}

func TestExampleLoads(t *testing.T) {
	f, err := Load(filepath.Join("..", "examples", "config", "tokenmesh.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(f.Rules) != 3 || f.Node.Name != "n1" || len(f.Node.SecretKey) != 32 {
		t.Errorf("unexpected example: %+v", f)
	}
	crs, err := f.CheckRules()
	if err != nil {
		t.Fatal(err)
	}
	if crs[0].Rate != norm(bucket.Rate{Tokens: 100, Per: time.Second}) || crs[2].Strategy != "owner" || crs[2].Burst != 1 {
		t.Errorf("cluster rules %+v", crs)
	}
}

func TestDefaultValidates(t *testing.T) {
	f := Default()
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(f.Rules) != 1 || f.Rules[0].Name != "default" || f.Rules[0].Burst != 20 {
		t.Errorf("%+v", f.Rules)
	}
	if _, err := f.CheckRules(); err != nil {
		t.Fatal(err)
	}
	f.Node.ReconnectInterval, f.Node.ReconnectTimeout = 0, 0 // zero: the defaults
	if err := f.Validate(); err != nil {
		t.Errorf("zero reconnect settings: %v", err)
	}
	f.Node.ReconnectInterval = time.Hour
	if err := f.Validate(); err == nil || !strings.Contains(err.Error(), "node.reconnect_interval") {
		t.Errorf("reconnect_interval 1h: error %v", err)
	}
}

func TestLoadFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("gossip.key", key32+"\n")
	write("short.key", "YWJj\n")
	for _, n := range []string{"c.pem", "k.pem", "ca.pem"} {
		write(n, "x")
	}
	p := write("ok.yaml", "node:\n  secret_key_file: gossip.key\n  tls: {cert_file: c.pem, key_file: k.pem, ca_file: ca.pem}\nrules: [{name: a, rate: 1/s}]\n")
	f, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Node.SecretKey) != 32 || f.Node.TLS.CAFile != filepath.Join(dir, "ca.pem") {
		t.Errorf("%+v", f.Node)
	}
	if f.Node.StateDir != "" || f.Node.SnapshotInterval != DefaultSnapshotInterval {
		t.Errorf("no state_dir: StateDir %q, SnapshotInterval %v", f.Node.StateDir, f.Node.SnapshotInterval)
	}
	f, err = Load(write("state.yaml", "node:\n  state_dir: state/n1\n  snapshot_interval: 250ms\nrules: [{name: a, rate: 1/s}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if f.Node.StateDir != filepath.Join(dir, "state/n1") || f.Node.SnapshotInterval != 250*time.Millisecond {
		t.Errorf("state_dir: StateDir %q (want it resolved against the file's directory), SnapshotInterval %v", f.Node.StateDir, f.Node.SnapshotInterval)
	}
	for _, c := range []struct{ yaml, want string }{
		{"node:\n  secret_key_file: missing.key\nrules: [{name: a, rate: 1/s}]\n", "bad.yaml:2: node.secret_key_file"},
		{"node:\n  secret_key_file: short.key\nrules: [{name: a, rate: 1/s}]\n", "node.secret_key_file"},
		{"node:\n  tls:\n    cert_file: c.pem\n    key_file: k.pem\n    ca_file: nope.pem\nrules: [{name: a, rate: 1/s}]\n", "bad.yaml:5: node.tls.ca_file"},
		{"node:\n  api_tls:\n    cert_file: c.pem\n    key_file: k.pem\n    client_ca_file: nope.pem\nrules: [{name: a, rate: 1/s}]\n", "bad.yaml:5: node.api_tls.client_ca_file"},
	} {
		_, err := Load(write("bad.yaml", c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Load: error %v, want it to contain %q", err, c.want)
		}
	}
	if _, err := Load(filepath.Join(dir, "absent.yaml")); err == nil || !strings.Contains(err.Error(), "absent.yaml") {
		t.Errorf("Load of a missing file: %v", err)
	}
}

func TestClusterRuleRejectsInvalid(t *testing.T) {
	r := Default().Rules[0]
	r.Burst = 0
	if _, err := CheckRule(r); err == nil || !strings.Contains(err.Error(), "burst") {
		t.Errorf("burst 0: %v", err)
	}
	r = Default().Rules[0]
	r.Strategy = "nope"
	if _, err := CheckRule(r); err == nil || !strings.Contains(err.Error(), "strategy") {
		t.Errorf("strategy nope: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	seeds := []string{
		"rules: [{name: a, rate: 1/s}]",
		"rules:\n  - name: a\n    rate: 6000/min\n    burst: 20\n    strategy: gcounter\n    params: {gossip: 20ms}\n",
		"node: {name: n, join: ['h:1'], secret_key: " + key32 + "}\nrules: [{name: a, rate: '2.5'}]",
		"rules: [{name: a, rate: 10/fortnight}]",
		"node: {tls: {cert_file: a, key_file: b, ca_file: c}}\nrules: [{name: x, rate: 1/3s, key: '{tenant}'}]",
		"",
		"rules: [",
	}
	if data, err := os.ReadFile(filepath.Join("..", "examples", "config", "tokenmesh.yaml")); err == nil {
		seeds = append(seeds, string(data))
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data, "fuzz.yaml")
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %T is not *Error: %v", err, err)
			}
			return
		}
		if err := file.Validate(); err != nil {
			t.Fatalf("parsed but does not validate: %v\n%s", err, data)
		}
		if _, err := file.CheckRules(); err != nil {
			t.Fatalf("parsed but does not convert: %v\n%s", err, data)
		}
	})
}

func ExampleParse() {
	_, err := Parse([]byte("rules:\n  - name: api\n    rate: 10/fortnight\n"), "tokenmesh.yaml")
	fmt.Println(err)
	f, _ := Parse([]byte("rules:\n  - name: api\n    rate: 6000/min\n    burst: 200\n"), "tokenmesh.yaml")
	r, _ := CheckRule(f.Rules[0])
	fmt.Println(r.Name, r.Rate, r.Burst, r.Strategy)
	// Output:
	// tokenmesh.yaml:3: rules[0].rate: "10/fortnight" is not a rate (forms: 100/s, 6000/min, 1/3s, 2.5)
	// api 100/s 200 owner
}

// node.envoy_config is read and, by Load, resolved against the file's
// directory.
func TestEnvoyConfigField(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "n.yaml")
	if err := os.WriteFile(p, []byte("node:\n  envoy_config: ratelimit\nrules: [{name: a, rate: 1/s}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "ratelimit"); f.Node.EnvoyConfig != want {
		t.Errorf("EnvoyConfig %q, want %q", f.Node.EnvoyConfig, want)
	}
	if f, err := Parse([]byte("node:\n  envoy_config: /etc/rl\nrules: [{name: a, rate: 1/s}]\n"), "n.yaml"); err != nil || f.Node.EnvoyConfig != "/etc/rl" {
		t.Errorf("Parse: %v %v", f, err)
	}
}

// node.envoy_shadow_mode: a YAML bool, false by default; anything else is
// an error naming the field.
func TestEnvoyShadowModeField(t *testing.T) {
	for in, want := range map[string]bool{"": false, "  envoy_shadow_mode: true\n": true, "  envoy_shadow_mode: false\n": false} {
		f, err := Parse([]byte("node:\n  name: a\n"+in+"rules: [{name: r, rate: 1/s}]\n"), "t.yaml")
		if err != nil || f.Node.EnvoyShadowMode != want {
			t.Errorf("%q: %v, %v; want %v", in, f, err, want)
		}
	}
	_, err := Parse([]byte("node:\n  name: a\n  envoy_shadow_mode: sometimes\nrules: [{name: r, rate: 1/s}]\n"), "t.yaml")
	if err == nil || !strings.Contains(err.Error(), "t.yaml:3") || !strings.Contains(err.Error(), "sometimes") {
		t.Errorf("envoy_shadow_mode: sometimes: %v; want an error at t.yaml:3 naming the value", err)
	}
}

// node.envoy_strategy: "" (owner) by default, a known strategy name, and
// an unknown one refused naming the field and the strategies there are.
func TestEnvoyStrategyField(t *testing.T) {
	for in, want := range map[string]string{"": "", "  envoy_strategy: quota\n": "quota", "  envoy_strategy: owner\n": "owner"} {
		f, err := Parse([]byte("node:\n  name: a\n"+in+"rules: [{name: r, rate: 1/s}]\n"), "t.yaml")
		if err != nil || f.Node.EnvoyStrategy != want {
			t.Errorf("%q: %v, %v; want %q", in, f, err, want)
		}
	}
	_, err := Parse([]byte("node:\n  name: a\n  envoy_strategy: qouta\nrules: [{name: r, rate: 1/s}]\n"), "t.yaml")
	if err == nil || !strings.Contains(err.Error(), "node.envoy_strategy") || !strings.Contains(err.Error(), `"qouta"`) || !strings.Contains(err.Error(), "quota") {
		t.Errorf("envoy_strategy: qouta: %v; want an error naming the field, the value and the known strategies", err)
	}
}

func TestParseBytes(t *testing.T) {
	good := map[string]int64{"0": 0, "512MiB": 512 << 20, "2GiB": 2 << 30, "300MB": 300e6, "1 KiB": 1024, "17B": 17, "536870912": 536870912}
	for in, want := range good {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "1.5GiB", "12XB", "MiB", "9999999999TiB", "0x10"} {
		if got, err := ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q) = %d, want an error", in, got)
		}
	}
}

func TestPeerSecurity(t *testing.T) {
	cases := []struct {
		yaml    string
		multi   bool
		refused bool
	}{
		{"node: {name: a}", false, false},
		{"node: {name: a, gossip_addr: 127.0.0.1:0}", false, false},
		{"node: {name: a, gossip_addr: 10.0.0.1:7946}", true, true},
		{"node: {name: a, gossip_addr: 0.0.0.0:7946}", true, true},
		{"node: {name: a, gossip_addr: 127.0.0.1:0, join: [127.0.0.1:7000]}", true, true},
		{"node: {name: a, join: [127.0.0.1:7000], secret_key: " + key32 + "}", true, false},
		{"node: {name: a, join: [127.0.0.1:7000], insecure: true}", true, false},
		{"node: {name: a, gossip_addr: 10.0.0.1:7946, insecure: false}", true, true},
	}
	for _, c := range cases {
		f, err := Parse([]byte(c.yaml+"\nrules: [{name: r, rate: 1/s}]\n"), "t.yaml")
		if err != nil {
			t.Fatalf("%s: %v", c.yaml, err)
		}
		if got := f.Node.MultiNode(); got != c.multi {
			t.Errorf("%s: MultiNode %v, want %v", c.yaml, got, c.multi)
		}
		err = f.Node.CheckPeerSecurity()
		if (err != nil) != c.refused {
			t.Errorf("%s: CheckPeerSecurity = %v, want refused %v", c.yaml, err, c.refused)
		}
		if err != nil && (!strings.Contains(err.Error(), "node.secret_key") || !strings.Contains(err.Error(), "node.insecure")) {
			t.Errorf("%s: the error %q does not name the fields to set", c.yaml, err)
		}
	}
	f, err := Parse([]byte("node: {name: a, memory_limit: 512MiB}\nrules: [{name: r, rate: 1/s}]\n"), "t.yaml")
	if err != nil || f.Node.MemoryLimit != 512<<20 {
		t.Fatalf("memory_limit: %v, %v", f, err)
	}
	_, err = Parse([]byte("node: {name: a, memory_limit: lots}\nrules: [{name: r, rate: 1/s}]\n"), "t.yaml")
	if err == nil || !strings.Contains(err.Error(), "node.memory_limit") {
		t.Fatalf("a bad memory_limit: %v", err)
	}
}

func TestAPITimeouts(t *testing.T) {
	f, err := Parse([]byte("node: {name: a, api_timeouts: {read_header: 2s, read: 15s, idle: 1m}}\nrules: [{name: r, rate: 1/s}]\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.Node.APITimeouts, (APITimeouts{ReadHeader: 2 * time.Second, Read: 15 * time.Second, Idle: time.Minute}); got != want {
		t.Fatalf("api_timeouts %+v, want %+v", got, want)
	}
	for _, bad := range []string{"{read: -1s}", "{write: soon}", "{read: 0s}", "{reed: 1s}"} {
		_, err := Parse([]byte("node: {name: a, api_timeouts: "+bad+"}\nrules: [{name: r, rate: 1/s}]\n"), "t.yaml")
		if err == nil || !strings.Contains(err.Error(), "api_timeouts") && !strings.Contains(err.Error(), "reed") {
			t.Errorf("api_timeouts %s: %v", bad, err)
		}
	}
}

// The partition option: available by default, conserve for the strategies
// that implement it, carried to rule.Rule.Partition.
func TestPartitionOption(t *testing.T) {
	f, err := Parse([]byte("rules:\n  - {name: a, rate: 1/s, strategy: gdrl, partition: conserve}\n  - {name: b, rate: 1/s, strategy: static}\n  - {name: c, rate: 1/s, strategy: owner, partition: available}\n  - {name: d, rate: 1/s, strategy: tbqueue, params: {partition: conserve, gossip: 100ms}}\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := f.CheckRules()
	if err != nil {
		t.Fatal(err)
	}
	// d: the generic parameter (what replay writes) is the rule option.
	want := []strategy.PartitionMode{strategy.PartitionConserve, strategy.PartitionAvailable, strategy.PartitionAvailable, strategy.PartitionConserve}
	for i, r := range rules {
		if r.Partition != want[i] {
			t.Errorf("rule %s: partition %v, want %v", r.Name, r.Partition, want[i])
		}
	}
	if f.Rules[1].Partition != strategy.PartitionAvailable {
		t.Errorf("rule b: partition %v, want the default available", f.Rules[1].Partition)
	}
	if !slices.Equal(f.Rules[3].Params, []string{"gossip=100ms"}) {
		t.Errorf("rule d: params %v, want gossip only (partition moved to the option)", f.Rules[3].Params)
	}
}

func TestYAMLError(t *testing.T) {
	for _, c := range []struct {
		msg  string
		line int
		want string
	}{
		{"yaml: line 3: did not find expected key", 3, "did not find expected key"},
		{"yaml: control characters are not allowed", 0, "control characters are not allowed"},
		{"line x: odd", 0, "line x: odd"},
	} {
		e := YAMLError("f.yaml", c.msg)
		if e.File != "f.yaml" || e.Line != c.line || e.Msg != c.want || e.Field != "" {
			t.Errorf("YAMLError(%q) = %+v, want line %d, msg %q", c.msg, e, c.line, c.want)
		}
	}
}

// node.http_refusal_status: 429 or 403, anything else an error naming the
// field and the line.
func TestHTTPRefusalStatus(t *testing.T) {
	for in, want := range map[string]int{"": 0, "  http_refusal_status: 429\n": 429, "  http_refusal_status: 403\n": 403} {
		f, err := Parse([]byte("node:\n  name: a\n"+in+"rules: [{name: r, rate: 1/s}]\n"), "t.yaml")
		if err != nil || f.Node.HTTPRefusalStatus != want {
			t.Errorf("%q: %v, %v; want %d", in, f, err, want)
		}
	}
	for _, bad := range []string{"200", "500", "401", "-1"} {
		_, err := Parse([]byte("node:\n  name: a\n  http_refusal_status: "+bad+"\nrules: [{name: r, rate: 1/s}]\n"), "t.yaml")
		if err == nil || !strings.Contains(err.Error(), "node.http_refusal_status") || !strings.Contains(err.Error(), "t.yaml:3") {
			t.Errorf("http_refusal_status %s: %v, want an error naming the field at t.yaml:3", bad, err)
		}
	}
	f := Default()
	f.Node.HTTPRefusalStatus = 418
	if err := f.Validate(); err == nil || !strings.Contains(err.Error(), "node.http_refusal_status") {
		t.Errorf("Validate with 418: %v", err)
	}
}

// TestOverdraftParams: a rule's overdraft parameters (strategy.
// OverdraftSpecs, YAML booleans and numbers taken as written) reach its
// params; a strategy without a bucket per key refuses them, naming
// itself, at the rule's line.
func TestOverdraftParams(t *testing.T) {
	f, err := Parse([]byte("rules:\n  - {name: llm, rate: 1000/m, burst: 1000, params: {overdraft: true, max_debt: 5000}}\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.Rules[0].Params, []string{"max_debt=5000", "overdraft=true"}) {
		t.Errorf("params %v, want max_debt=5000 and overdraft=true", f.Rules[0].Params)
	}
	_, err = Parse([]byte("rules:\n  - name: x\n    rate: 1/s\n    strategy: gdrl\n    params: {overdraft: true}\n"), "t.yaml")
	if err == nil || !strings.Contains(err.Error(), "t.yaml:5:") || !strings.Contains(err.Error(), "strategy gdrl does not implement overdraft") {
		t.Errorf("gdrl with overdraft: %v, want t.yaml:5 and \"strategy gdrl does not implement overdraft\"", err)
	}
}

// node.envoy_max_overrides_per_descriptor and node.envoy_max_overrides:
// 0 or absent is the default, a negative or huge bound an error naming
// the field and its line.
func TestEnvoyMaxOverrides(t *testing.T) {
	f, err := Parse([]byte("node:\n  name: a\n  envoy_max_overrides_per_descriptor: 4\n  envoy_max_overrides: 100\nrules: [{name: r, rate: 1/s}]\n"), "t.yaml")
	if err != nil || f.Node.EnvoyMaxOverridesPerDescriptor != 4 || f.Node.EnvoyMaxOverrides != 100 {
		t.Fatalf("%+v, %v", f.Node, err)
	}
	for _, field := range []string{"envoy_max_overrides_per_descriptor", "envoy_max_overrides"} {
		for _, bad := range []string{"-1", "2000000"} {
			_, err := Parse([]byte("node:\n  name: a\n  "+field+": "+bad+"\nrules: [{name: r, rate: 1/s}]\n"), "t.yaml")
			if err == nil || !strings.Contains(err.Error(), "t.yaml:3: node."+field+": "+bad+": want 1 to ") {
				t.Errorf("%s %s: %v, want an error naming the field at t.yaml:3", field, bad, err)
			}
		}
	}
}

// node.region: the region is the name's text before its first '.' (the
// strategies read a peer's region from its name); a default name takes
// the region as prefix; a name in another region, or a bad region, is
// refused naming the field.
func TestNodeRegion(t *testing.T) {
	rules := "rules:\n  - name: a\n    rate: 1/s\n"
	f, err := Parse([]byte("node:\n  name: eu.n1\n  region: eu\n"+rules), "t.yaml")
	if err != nil || f.Node.Region != "eu" || f.Node.Name != "eu.n1" {
		t.Fatalf("name eu.n1, region eu: %+v, %v", f, err)
	}
	if f, err = Parse([]byte("node:\n  name: us.n2\n"+rules), "t.yaml"); err != nil || f.Node.Region != "" {
		t.Fatalf("no node.region: %+v, %v (Region stays unset; the name carries it)", f, err)
	}
	if f, err = Parse([]byte("node:\n  region: ap\n"+rules), "t.yaml"); err != nil || !strings.HasPrefix(f.Node.Name, "ap.") || f.Node.Region != "ap" {
		t.Fatalf("default name in region ap: %+v, %v", f, err)
	}
	for yaml, want := range map[string]string{
		"node:\n  name: n1\n  region: eu\n":    `node.name: "n1" is not in node.region "eu"`,
		"node:\n  name: us.n1\n  region: eu\n": `name it "eu.us.n1"`,
		"node:\n  region: e.u\n":               "node.region",
	} {
		if _, err := Parse([]byte(yaml+rules), "t.yaml"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error with %q", yaml, err, want)
		}
	}
}

// Validate (what serve runs after a --name override) refuses a name
// outside node.region.
func TestNodeRegionValidate(t *testing.T) {
	f := Default()
	f.Node.Name, f.Node.Region = "eu.n1", "eu"
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	f.Node.Name = "n1"
	if err := f.Validate(); err == nil || !strings.Contains(err.Error(), `name it "eu.n1"`) {
		t.Errorf("name n1 in region eu: %v", err)
	}
	f.Node.Name, f.Node.Region = "e.u.n1", "e.u"
	if err := f.Validate(); err == nil || !strings.Contains(err.Error(), "node.region") {
		t.Errorf("region e.u: %v", err)
	}
}
