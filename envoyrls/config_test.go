package envoyrls

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/config"
	"github.com/tokenmesh/tokenmesh/rule"
)

// exampleYAML follows the examples of envoyproxy/ratelimit's README
// ("Configuration" / "Examples"), rewritten: a default key, explicit
// values, nested descriptors, unlimited, shadow_mode, replaces, wildcards
// with and without share_threshold, and the tokenmesh extension.
const exampleYAML = `
domain: edge
descriptors:
  # every client address: 10 per second
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  # one known client, unlimited
  - key: remote_address_vip
    value: 10.0.0.1
    rate_limit: {unlimited: true}
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 4}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
  - key: path
    value: /files/*
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    value: /shared/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 7}
  - key: api
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: tenant
    value: gold
    rate_limit:
      unit: minute
      requests_per_unit: 50
      name: gold
      replaces: [{name: per_user}]
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3, name: per_user}
    tokenmesh: {strategy: local}
  - key: closed
    rate_limit: {unit: second, requests_per_unit: 0}
`

func mustParse(t testing.TB, yamlText string) *Config {
	t.Helper()
	c, err := Parse("edge.yaml", []byte(yamlText))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return c
}

func TestParseExample(t *testing.T) {
	c := mustParse(t, exampleYAML)
	rules := c.Rules(time.Time{})
	byName := map[string]bool{}
	for _, r := range rules {
		byName[r.Name] = true
		if r.Burst < 1 || r.Rate.Tokens < 1 {
			t.Errorf("rule %s: rate %v burst %d", r.Name, r.Rate, r.Burst)
		}
	}
	// unlimited and requests_per_unit 0 need no rule.
	if got, want := len(rules), len(c.Limits)-2; got != want {
		t.Fatalf("%d rules for %d limits; want %d", got, len(c.Limits), want)
	}
	for _, want := range []string{"rls.edge.remote_address", "rls.edge.message_type_marketing.to_number", "rls.edge.user"} {
		if !byName[want] {
			t.Errorf("no rule %q in %v", want, byName)
		}
	}
	for _, r := range rules {
		if r.Name == "rls.edge.user" && r.Strategy != "local" {
			t.Errorf("user: strategy %q, want local (tokenmesh extension)", r.Strategy)
		}
		if r.Name == "rls.edge.remote_address" {
			if r.Strategy != config.DefaultStrategy || r.Burst != 10 || r.Rate.PerSec() != 10 {
				t.Errorf("remote_address: %+v", r)
			}
		}
		if r.Name == "rls.edge.message_type_marketing.to_number" && (r.Burst != 4 || r.Rate.Per.Hours() != 6) {
			t.Errorf("4/day: %+v (want 1 token per 6h, burst 4)", r)
		}
	}
}

func TestMatch(t *testing.T) {
	c := mustParse(t, exampleYAML)
	type tc struct {
		domain  string
		entries []Entry
		path    string // "" for no limit
		key     string
	}
	for _, x := range []tc{
		{"edge", []Entry{{"remote_address", "1.2.3.4"}}, "edge.remote_address", "1.2.3.4"},
		{"edge", []Entry{{"remote_address_vip", "10.0.0.1"}}, "edge.remote_address_vip_10.0.0.1", "10.0.0.1"},
		// no default for remote_address_vip: another value is unmatched
		{"edge", []Entry{{"remote_address_vip", "10.0.0.2"}}, "", ""},
		{"other", []Entry{{"remote_address", "1.2.3.4"}}, "", ""},
		{"edge", []Entry{{"nothing", "x"}}, "", ""},
		// nested: the limit is at the second level only
		{"edge", []Entry{{"message_type", "marketing"}}, "", ""},
		{"edge", []Entry{{"message_type", "marketing"}, {"to_number", "555"}}, "edge.message_type_marketing.to_number", "marketing|555"},
		{"edge", []Entry{{"message_type", "alerts"}, {"to_number", "555"}}, "", ""},
		{"edge", []Entry{{"to_number", "555"}}, "edge.to_number", "555"},
		// more entries than the tree is deep: no limit
		{"edge", []Entry{{"remote_address", "1.2.3.4"}, {"x", "y"}}, "", ""},
		// wildcard without share_threshold: one bucket per value
		{"edge", []Entry{{"path", "/files/a"}}, "edge.path_/files/*", "/files/a"},
		{"edge", []Entry{{"path", "/files/b"}}, "edge.path_/files/*", "/files/b"},
		// with share_threshold: one bucket for every matching value
		{"edge", []Entry{{"path", "/shared/a"}}, "edge.path_/shared/*", "/shared/*"},
		{"edge", []Entry{{"path", "/shared/b"}}, "edge.path_/shared/*", "/shared/*"},
		{"edge", []Entry{{"path", "/other"}}, "", ""},
		{"edge", []Entry{{"user", "a|b"}}, "edge.user", `a\|b`},
	} {
		l, key := c.Match(x.domain, x.entries)
		path := ""
		if l != nil {
			path = l.Path
		}
		if path != x.path || key != x.key {
			t.Errorf("Match(%s, %v) = %q, %q; want %q, %q", x.domain, x.entries, path, key, x.path, x.key)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, x := range []struct{ yaml, want string }{
		{"", "edge.yaml: the file is empty"},
		{"descriptors: []", "edge.yaml:1: domain: is required"},
		{"domain: ''", "edge.yaml:1: domain: is empty"},
		{"domain: a\nfoo: 1", "edge.yaml:2: foo: unknown key"},
		{"domain: a\ndescriptors:\n  - value: x", "edge.yaml:3: descriptors[0].key: is required"},
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}", `edge.yaml:4: descriptors[0].rate_limit.unit: invalid rate limit unit "fortnight"`},
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}", "descriptors[0].rate_limit.requests_per_unit: is required"},
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}", `descriptors[0].rate_limit.requests_per_unit: "-1" is not a whole number`},
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 4294967296}", `requests_per_unit: "4294967296" is not a whole number`},
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}", "descriptors[0].rate_limit.unit: should not be set when unlimited is true"},
		{"domain: a\ndescriptors:\n  - key: k\n  - key: k", `edge.yaml:4: descriptors[1]: duplicate descriptor composite key "a.k"`},
		{"domain: a\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true", "descriptors[0].share_threshold: can only be used with a wildcard value"},
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ''}]}", "replaces[0].name: should not be empty"},
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: n, replaces: [{name: n}]}", "replaces[0].name: \"n\" is this limit's own name"},
		{"domain: a\ndescriptors:\n  - key: k\n    shadow_mode: maybe", "descriptors[0].shadow_mode: want true or false"},
		{"domain: a\ndescriptors:\n  - key: k\n    descriptors:\n      - key: j\n        rate_limit: {unit: sec, requests_per_unit: 1}", "descriptors[0].descriptors[0].rate_limit.unit: invalid"},
		{"domain: a\ntokenmesh: {strategy: nosuch}\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}", `unknown strategy "nosuch"`},
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 1}", "descriptors[0].rate_limit: as a tokenmesh rule"},
		{"domain: a\ndescriptors:\n  - key: k\n    tokenmesh: {strategy: gdrl, params: {overdraft: true}}\n    rate_limit: {unit: second, requests_per_unit: 1}", "strategy gdrl does not implement overdraft"},
		{"domain: a\ntokenmesh: {algorithm: fixed_window, params: {max_debt: 10}}\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}", "strategy fixedwindow does not implement overdraft"},
		{"domain: a\ndescriptors:\n  - key: k\n    tokenmesh: {params: {overdraft: true, max_debt: 0}}\n    rate_limit: {unit: second, requests_per_unit: 1}", "max_debt=0 must be at least 1"},
		{"domain: a\ndescriptors: 3", "descriptors: want a list"},
		{"domain: [a", "edge.yaml:1: did not find expected ',' or ']'"}, // a YAML syntax error, with its line
		{"domain: a\n---\ndomain: b", "more than one YAML document"},
	} {
		_, err := Parse("edge.yaml", []byte(x.yaml))
		if err == nil || !strings.Contains(err.Error(), x.want) {
			t.Errorf("Parse(%q) = %v; want an error with %q", x.yaml, err, x.want)
		}
	}
}

func TestLoadDir(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := LoadDir(dir); err == nil || !strings.Contains(err.Error(), "holds no *.yaml") {
		t.Fatalf("empty dir: %v", err)
	}
	write("a.yaml", "domain: one\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	write("b.yml", "domain: two\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 2}\n")
	write("notes.txt", "not yaml")
	write(".hidden.yaml", "garbage: [")
	c, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Domains) != 2 || len(c.Rules(time.Time{})) != 2 {
		t.Fatalf("domains %v, rules %v", c.Domains, c.Rules(time.Time{}))
	}
	write("c.yaml", "domain: one\n")
	_, err = LoadDir(dir)
	if err == nil || !strings.Contains(err.Error(), "c.yaml:1: domain: duplicate domain \"one\": already in "+filepath.Join(dir, "a.yaml")) {
		t.Fatalf("duplicate domain: %v", err)
	}
}

// Digest changes with a file's bytes, an added or removed config file,
// and not with files LoadDir does not read.
func TestDigest(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if Digest(filepath.Join(dir, "missing")) != ([32]byte{}) {
		t.Error("the digest of a missing directory is not zero")
	}
	empty := Digest(dir)
	write("a.yaml", "domain: one\n")
	d1 := Digest(dir)
	write("notes.txt", "x")
	write(".hidden.yaml", "x")
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	if Digest(dir) != d1 {
		t.Error("files LoadDir skips changed the digest")
	}
	write("a.yaml", "domain: two\n")
	d2 := Digest(dir)
	write("b.yml", "")
	d3 := Digest(dir)
	if d1 == empty || d2 == d1 || d3 == d2 {
		t.Errorf("digests empty %x, a %x, a changed %x, b added %x: want all distinct", empty[:4], d1[:4], d2[:4], d3[:4])
	}
	if err := os.Remove(filepath.Join(dir, "b.yml")); err != nil {
		t.Fatal(err)
	}
	if Digest(dir) != d2 {
		t.Error("removing b.yml did not give back the digest without it")
	}
}

// TestRuleNameProperties: derived names are valid config rule names,
// stable, and distinct for distinct paths in practice.
func TestRuleNameProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		path := rapid.String().Draw(t, "path")
		other := rapid.String().Draw(t, "other")
		n := RuleName(path)
		if n != RuleName(path) {
			t.Fatalf("unstable")
		}
		r := rule.Rule{Name: n, Rate: config.Default().Rules[0].Rate, Burst: 1, Strategy: "owner"}
		if _, err := config.CheckRule(r); err != nil {
			t.Fatalf("RuleName(%q) = %q: %v", path, n, err)
		}
		if path != other && n == RuleName(other) {
			t.Fatalf("RuleName(%q) == RuleName(%q) == %q", path, other, n)
		}
	})
}

func TestUnitDuration(t *testing.T) {
	for u := range rlsv3.RateLimitResponse_RateLimit_Unit_name {
		unit := rlsv3.RateLimitResponse_RateLimit_Unit(u)
		if (UnitDuration(unit) == 0) != (unit == rlsv3.RateLimitResponse_RateLimit_UNKNOWN) {
			t.Errorf("UnitDuration(%v) = %v", unit, UnitDuration(unit))
		}
	}
	// envoyproxy/ratelimit's dividers (UnitToDivider): a month is 30 days,
	// a year 365.
	day := 24 * time.Hour
	for unit, want := range map[rlsv3.RateLimitResponse_RateLimit_Unit]time.Duration{
		rlsv3.RateLimitResponse_RateLimit_SECOND: time.Second, rlsv3.RateLimitResponse_RateLimit_MINUTE: time.Minute,
		rlsv3.RateLimitResponse_RateLimit_HOUR: time.Hour, rlsv3.RateLimitResponse_RateLimit_DAY: day,
		rlsv3.RateLimitResponse_RateLimit_WEEK: 7 * day, rlsv3.RateLimitResponse_RateLimit_MONTH: 30 * day,
		rlsv3.RateLimitResponse_RateLimit_YEAR: 365 * day,
	} {
		if got := UnitDuration(unit); got != want {
			t.Errorf("UnitDuration(%v) = %v, want %v", unit, got, want)
		}
	}
}

// FuzzParse: any input is parsed or refused with an *Error, never a
// panic; what parses yields valid rules and can be matched.
func FuzzParse(f *testing.F) {
	f.Add([]byte(exampleYAML), "path", "/shared/x")
	f.Add([]byte("domain: a\ndescriptors:\n  - key: k\n    value: v*\n    share_threshold: true\n    descriptors:\n      - key: j\n        rate_limit: {unit: minute, requests_per_unit: 3}\n"), "k", "vv")
	f.Add([]byte("domain: a\ndescriptors: [{key: k, rate_limit: {unlimited: true}}]"), "k", "")
	f.Add([]byte("domain: &x a\ndescriptors: *x"), "", "")
	f.Fuzz(func(t *testing.T, data []byte, key, value string) {
		c, err := Parse("f.yaml", data)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error %T %v is not *Error", err, err)
			}
			return
		}
		for _, r := range c.Rules(time.Time{}) {
			if r.Burst < 1 || r.Name == "" {
				t.Fatalf("bad rule %+v", r)
			}
		}
		for d := range c.Domains {
			l, _ := c.Match(d, []Entry{{key, value}})
			if l != nil && l.Domain != d {
				t.Fatalf("limit of domain %q matched in %q", l.Domain, d)
			}
			c.Match(d, []Entry{{key, value}, {key, value}})
		}
	})
}

func TestFixedWindowExtension(t *testing.T) {
	c := mustParse(t, `domain: fw
tokenmesh: {algorithm: fixed_window}
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: b
    tokenmesh: {algorithm: token_bucket}
    rate_limit: {unit: minute, requests_per_unit: 5}
`)
	if !c.HasFixedWindow() {
		t.Fatal("HasFixedWindow false")
	}
	// An epoch 90 s past a minute boundary: windows start 30 s later in
	// the node's time (align 30s).
	epoch := time.Unix(1_700_000_040+90, 0) // 1_700_000_040 is a whole minute
	rules := c.Rules(epoch)
	if len(rules) != 2 || rules[0].Strategy != "fixedwindow" || len(rules[0].Params) != 1 || rules[0].Params[0] != "align=30s" {
		t.Fatalf("fixed_window rule: %+v", rules[0])
	}
	if rules[1].Strategy != "owner" || len(rules[1].Params) != 0 {
		t.Fatalf("token_bucket rule: %+v", rules[1])
	}
	for _, x := range []struct{ yaml, want string }{
		{"domain: a\ntokenmesh: {algorithm: sliding}\n", `tokenmesh.algorithm: "sliding": want token_bucket or fixed_window`},
		{"domain: a\ntokenmesh: {algorithm: fixed_window, strategy: gdrl}\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}",
			`descriptors[0].rate_limit: algorithm fixed_window is decided at the key's owner: it goes with strategy owner, not "gdrl"`},
	} {
		if _, err := Parse("fw.yaml", []byte(x.yaml)); err == nil || !strings.Contains(err.Error(), x.want) {
			t.Errorf("%q: %v, want %q", x.yaml, err, x.want)
		}
	}
}

// LoadDirWith's DefaultStrategy (node.envoy_strategy) is the strategy of
// every limit whose file's extension names none, at the top or on a
// descriptor; a strategy the file names wins.
func TestLoadDirDefaultStrategy(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"plain.yaml": "domain: plain\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10}\n",
		"mixed.yaml": "domain: mixed\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 10}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 10}\n    tokenmesh: {strategy: lease}\n",
		"top.yaml":   "domain: top\ntokenmesh: {strategy: local}\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10}\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		def  string
		want map[string]string // limit path -> strategy
	}{
		{"", map[string]string{"plain.k": "owner", "mixed.a": "owner", "mixed.b": "lease", "top.k": "local"}},
		{"quota", map[string]string{"plain.k": "quota", "mixed.a": "quota", "mixed.b": "lease", "top.k": "local"}},
	} {
		c, err := LoadDirWith(dir, LoadOptions{DefaultStrategy: tc.def})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, l := range c.Limits {
			got[l.Path] = l.Strategy
		}
		if !maps.Equal(got, tc.want) {
			t.Errorf("DefaultStrategy %q: strategies %v, want %v", tc.def, got, tc.want)
		}
	}
}
