package envoyrls

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/cluster"
)

// overrideYAML: per-day limits (nothing refills while a test runs), one
// nested, one unlimited, a share_threshold wildcard, a local-strategy one
// and a fixed_window one.
const overrideYAML = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: day, requests_per_unit: 10}
  - key: vip
    rate_limit: {unlimited: true}
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 4}
  - key: path
    value: /shared/*
    share_threshold: true
    rate_limit: {unit: day, requests_per_unit: 7}
  - key: user
    rate_limit: {unit: day, requests_per_unit: 3}
    tokenmesh: {strategy: local}
  - key: window
    rate_limit: {unit: day, requests_per_unit: 3}
    tokenmesh: {algorithm: fixed_window}
`

// limitOf is a descriptor of entries kv carrying the override rpu per unit.
func limitOf(rpu uint32, unit typev3.RateLimitUnit, kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := desc(kv...)
	d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
	return d
}

// overrideNode is one cluster node (alone) holding c's rules, deriving
// its overrides, with the bounds given (0: the defaults), and the service.
func overrideNode(t *testing.T, c *Config, maxAll, perBase int) (*cluster.Node, *Service) {
	t.Helper()
	ep, err := cluster.NewMemNetwork().Endpoint("n0")
	if err != nil {
		t.Fatal(err)
	}
	epoch := time.Now().Add(-time.Second)
	n, err := cluster.New(cluster.Config{Self: "n0", Rules: c.Rules(epoch), Transport: ep, Epoch: epoch,
		Derive: c.Deriver(epoch), MaxDerived: maxAll, MaxDerivedPerBase: perBase})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	s := New(c, n, nil)
	s.SetEpoch(epoch)
	return n, s
}

func edgeReq(ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds}
}

// TestOverrideUsed: a descriptor with a limit is decided against it, not
// against the configured limit: matched, nested, unlimited, a wildcard
// that shares, entries that match nothing in the domain; an unknown
// domain still has no limit; current_limit is the override.
func TestOverrideUsed(t *testing.T) {
	c := mustParse(t, overrideYAML)
	n, s := overrideNode(t, c, 0, 0)
	day := typev3.RateLimitUnit_DAY
	// remote_address is 10 a day; the override 3 a day.
	for i := range 3 {
		check(t, s, edgeReq(limitOf(3, day, "remote_address", "a")), OK, want{OK, 3, uint32(2 - i)})
	}
	resp := check(t, s, edgeReq(limitOf(3, day, "remote_address", "a")), OVER, want{OVER, 3, 0})
	if u := resp.Statuses[0].CurrentLimit.Unit; u != rlsv3.RateLimitResponse_RateLimit_DAY {
		t.Errorf("current_limit unit %v, want DAY", u)
	}
	// Another address: its own bucket of the same override.
	check(t, s, edgeReq(limitOf(3, day, "remote_address", "b")), OK, want{OK, 3, 2})
	// Without the override the configured limit applies (its own key's
	// bucket: "c" never had an override).
	check(t, s, edgeReq(desc("remote_address", "c")), OK, want{OK, 10, 9})
	// Nested: the override on the full descriptor.
	check(t, s, edgeReq(limitOf(1, day, "message_type", "marketing", "to_number", "1")), OK, want{OK, 1, 0})
	check(t, s, edgeReq(limitOf(1, day, "message_type", "marketing", "to_number", "1")), OVER, want{OVER, 1, 0})
	// Unlimited: the override wins (envoyproxy/ratelimit does not look at
	// the tree when a descriptor has a limit).
	check(t, s, edgeReq(limitOf(1, day, "vip", "x")), OK, want{OK, 1, 0})
	check(t, s, edgeReq(limitOf(1, day, "vip", "x")), OVER, want{OVER, 1, 0})
	// share_threshold: the override is on the configured descriptor, so
	// every value of the wildcard shares its bucket.
	check(t, s, edgeReq(limitOf(2, day, "path", "/shared/a")), OK, want{OK, 2, 1})
	check(t, s, edgeReq(limitOf(2, day, "path", "/shared/b")), OK, want{OK, 2, 0})
	check(t, s, edgeReq(limitOf(2, day, "path", "/shared/c")), OVER, want{OVER, 2, 0})
	// Entries that match no configured limit in a known domain: limited
	// by the override, per entries.
	check(t, s, edgeReq(limitOf(1, day, "nothing", "here")), OK, want{OK, 1, 0})
	check(t, s, edgeReq(limitOf(1, day, "nothing", "here")), OVER, want{OVER, 1, 0})
	check(t, s, edgeReq(limitOf(1, day, "nothing", "else")), OK, want{OK, 1, 0})
	check(t, s, edgeReq(limitOf(1, day, "message_type", "marketing")), OK, want{OK, 1, 0}) // a level without a limit
	// Unknown domain: no limit, override or not.
	check(t, s, &rlsv3.RateLimitRequest{Domain: "nope", Descriptors: []*ratelimitv3.RateLimitDescriptor{limitOf(1, day, "a", "b")}}, OK, want{OK, 0, 0})
	// The rules the node derived, named from the descriptor and the limit.
	for _, name := range []string{"rls.edge.remote_address--3-per-day", "rls.edge.message_type_marketing.to_number--1-per-day",
		"rls.edge.vip--1-per-day", "rls.edge--any--1-per-day"} {
		if _, ok := n.Rule(name); !ok {
			t.Errorf("the node has no rule %s", name)
		}
	}
	if r, _ := n.Rule("rls.edge.remote_address--3-per-day"); r.Burst != 3 || r.Strategy != "owner" || r.Rate.Tokens != 1 || r.Rate.Per != 8*time.Hour {
		t.Errorf("override rule %+v, want burst 3, 3/day, owner", r)
	}
	// The descriptor's strategy: user is local.
	check(t, s, edgeReq(limitOf(2, day, "user", "u")), OK, want{OK, 2, 1})
	if r, _ := n.Rule("rls.edge.user--2-per-day"); r.Strategy != "local" {
		t.Errorf("user's override rule has strategy %q, want local (the descriptor's)", r.Strategy)
	}
	// fixed_window: its override counts in windows too.
	check(t, s, edgeReq(limitOf(2, day, "window", "w")), OK, want{OK, 2, 1})
	if r, _ := n.Rule("rls.edge.window--2-per-day"); r.Strategy != "fixedwindow" {
		t.Errorf("window's override rule has strategy %q, want fixedwindow", r.Strategy)
	}
	// unit_multiplier: 2 per 30 seconds.
	d := limitOf(2, typev3.RateLimitUnit_SECOND, "remote_address", "m")
	d.Limit.UnitMultiplier = wrapperspb.UInt32(30)
	check(t, s, edgeReq(d), OK, want{OK, 2, 1})
	if r, _ := n.Rule("rls.edge.remote_address--2-per-30-second"); r.Rate.Tokens != 1 || r.Rate.Per != 15*time.Second {
		t.Errorf("2 per 30 s: rule %+v, want 1 per 15s", r)
	}
}

// TestOverrideInvalid: a bad override is INVALID_ARGUMENT naming the field,
// and nothing is derived or decided.
func TestOverrideInvalid(t *testing.T) {
	c := mustParse(t, overrideYAML)
	n, s := overrideNode(t, c, 0, 0)
	mult := func(m uint32) *ratelimitv3.RateLimitDescriptor {
		d := limitOf(1, typev3.RateLimitUnit_YEAR, "remote_address", "a")
		d.Limit.UnitMultiplier = wrapperspb.UInt32(m)
		return d
	}
	for _, x := range []struct {
		d    *ratelimitv3.RateLimitDescriptor
		want string
	}{
		{limitOf(0, typev3.RateLimitUnit_SECOND, "remote_address", "a"), "descriptors[0].limit.requests_per_unit: 0"},
		{limitOf(5, typev3.RateLimitUnit_UNKNOWN, "remote_address", "a"), "descriptors[0].limit.unit: UNKNOWN (0) is not a rate limit unit"},
		{limitOf(5, typev3.RateLimitUnit(7), "remote_address", "a"), "descriptors[0].limit.unit: 7 (7) is not a rate limit unit"},
		{mult(0), "descriptors[0].limit.unit_multiplier: 0"},
		{mult(1000), "descriptors[0].limit.unit_multiplier: 1000 years is longer than a duration holds"},
		{limitOf(1, typev3.RateLimitUnit_YEAR, "remote_address", "a"), "descriptors[0].limit: limit override 1 per year of edge.remote_address: as a tokenmesh rule"},
	} {
		_, err := s.ShouldRateLimit(context.Background(), edgeReq(x.d))
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), x.want) {
			t.Errorf("%v: %v; want INVALID_ARGUMENT with %q", x.d.Limit, err, x.want)
		}
	}
	// In a second descriptor: named by its index.
	_, err := s.ShouldRateLimit(context.Background(), edgeReq(desc("remote_address", "a"), limitOf(0, typev3.RateLimitUnit_SECOND, "x", "y")))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "descriptors[1].limit.requests_per_unit") {
		t.Errorf("second descriptor: %v", err)
	}
	if n.DerivedRules() != 0 {
		t.Errorf("%d rules derived for invalid overrides", n.DerivedRules())
	}
	// The first descriptor was not decided either.
	check(t, s, edgeReq(desc("remote_address", "a")), OK, want{OK, 10, 9})
}

// TestOverrideBound: beyond node.envoy_max_overrides_per_descriptor
// distinct overrides of one descriptor (here 2) and the global bound
// (here 3), RESOURCE_EXHAUSTED naming it, counted; overrides already held
// keep answering.
func TestOverrideBound(t *testing.T) {
	c := mustParse(t, overrideYAML)
	_, s := overrideNode(t, c, 3, 2)
	day := typev3.RateLimitUnit_DAY
	check(t, s, edgeReq(limitOf(5, day, "remote_address", "a")), OK, want{OK, 5, 4})
	check(t, s, edgeReq(limitOf(6, day, "remote_address", "a")), OK, want{OK, 6, 3}) // from 5's 4 left
	_, err := s.ShouldRateLimit(context.Background(), edgeReq(limitOf(7, day, "remote_address", "a")))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "descriptors[0].limit: 7 per day refused") ||
		!strings.Contains(err.Error(), "edge.remote_address") {
		t.Errorf("third override of one descriptor: %v; want RESOURCE_EXHAUSTED naming it", err)
	}
	// Another descriptor: still room in all (3).
	check(t, s, edgeReq(limitOf(5, day, "user", "u")), OK, want{OK, 5, 4})
	if _, err := s.ShouldRateLimit(context.Background(), edgeReq(limitOf(6, day, "user", "u"))); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("fourth override in all: %v; want RESOURCE_EXHAUSTED", err)
	}
	if got := s.OverridesRefused(); got != 2 {
		t.Errorf("OverridesRefused %d, want 2", got)
	}
	// Held overrides answer on.
	check(t, s, edgeReq(limitOf(5, day, "remote_address", "a")), OK, want{OK, 5, 3})
}

// TestOverrideLevelCarriedOver: a key's bucket under an override starts
// from what the key has left under the configured limit, and a further
// override from the lowest of those, capped at the new burst; keys start
// full at the new burst otherwise.
func TestOverrideLevelCarriedOver(t *testing.T) {
	c := mustParse(t, overrideYAML)
	_, s := overrideNode(t, c, 0, 0)
	day := typev3.RateLimitUnit_DAY
	// 10 a day configured: 7 spent, 3 left.
	for i := range 7 {
		check(t, s, edgeReq(desc("remote_address", "k")), OK, want{OK, 10, uint32(9 - i)})
	}
	// Override 5 a day: the key keeps its 3 (then 1 taken: 2).
	check(t, s, edgeReq(limitOf(5, day, "remote_address", "k")), OK, want{OK, 5, 2})
	// Override 2 a day, derived now: the lowest of 3 (configured) and 2
	// (5 a day) is 2, capped at 2: one taken, 1 left.
	check(t, s, edgeReq(limitOf(2, day, "remote_address", "k")), OK, want{OK, 2, 1})
	// Override 100 a day: still 1 left (the lowest), not 100.
	check(t, s, edgeReq(limitOf(100, day, "remote_address", "k")), OK, want{OK, 100, 0})
	check(t, s, edgeReq(limitOf(100, day, "remote_address", "k")), OVER, want{OVER, 100, 0})
	// A key that had no bucket: full at the override's burst.
	check(t, s, edgeReq(limitOf(100, day, "remote_address", "fresh")), OK, want{OK, 100, 99})
}

// TestOverrideReload: a reload of the files (the daemon's order: the
// node's Deriver, its rules, then the service's Config) keeps an override
// rule whose descriptor is still there, with its bucket, and drops one
// whose descriptor is gone.
func TestOverrideReload(t *testing.T) {
	c := mustParse(t, overrideYAML)
	n, s := overrideNode(t, c, 0, 0)
	day := typev3.RateLimitUnit_DAY
	check(t, s, edgeReq(limitOf(3, day, "remote_address", "a")), OK, want{OK, 3, 2})
	check(t, s, edgeReq(limitOf(3, day, "user", "u")), OK, want{OK, 3, 2})
	// The new files: user is gone, remote_address changed nothing.
	c2 := mustParse(t, strings.Replace(overrideYAML, "  - key: user\n    rate_limit: {unit: day, requests_per_unit: 3}\n    tokenmesh: {strategy: local}\n", "", 1))
	epoch := time.Now()
	n.SetDeriver(c2.Deriver(epoch))
	ch, err := n.SetRules(context.Background(), c2.Rules(epoch))
	if err != nil {
		t.Fatal(err)
	}
	s.SetConfig(c2)
	if !contains(ch.Kept, "rls.edge.remote_address--3-per-day") || !contains(ch.Removed, "rls.edge.user--3-per-day") {
		t.Errorf("reload: %+v; want the remote_address override kept, user's removed", ch)
	}
	check(t, s, edgeReq(limitOf(3, day, "remote_address", "a")), OK, want{OK, 3, 1})
	// user now matches nothing: the domain's override rule, full.
	check(t, s, edgeReq(limitOf(3, day, "user", "u")), OK, want{OK, 3, 2})
	if _, ok := n.Rule("rls.edge--any--3-per-day"); !ok {
		t.Error("user's override after the reload is not the domain's")
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// TestOverrideNeedsDeriver: a Checker without EnsureDerived cannot serve
// overrides (UNIMPLEMENTED), and its other descriptors are unaffected.
func TestOverrideNeedsDeriver(t *testing.T) {
	c := mustParse(t, overrideYAML)
	s := New(c, struct{ Checker }{newFake(c)}, nil) // CheckBatch only
	_, err := s.ShouldRateLimit(context.Background(), edgeReq(limitOf(1, typev3.RateLimitUnit_DAY, "remote_address", "a")))
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("%v; want UNIMPLEMENTED", err)
	}
	check(t, s, edgeReq(desc("remote_address", "a")), OK, want{OK, 10, 9})
}

// TestDeriver: the Deriver derives exactly the names MatchOverride makes,
// and refuses others with cluster.ErrNotDerived.
func TestDeriver(t *testing.T) {
	c := mustParse(t, overrideYAML)
	epoch := time.Now()
	der := c.Deriver(epoch)
	o := Override{RequestsPerUnit: 5, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE, Multiplier: 1}
	l, _, d, err := c.MatchOverride("edge", []Entry{{"remote_address", "x"}}, o, epoch)
	if err != nil {
		t.Fatal(err)
	}
	got, err := der(l.Rule)
	if err != nil || got.Rule.Name != d.Rule.Name || got.Base != d.Base || got.Seed != "rls.edge.remote_address" || got.Rule.Burst != 5 {
		t.Errorf("Deriver(%s) = %+v, %v; want %+v", l.Rule, got, err, d)
	}
	for _, name := range []string{"rls.edge.remote_address", "rls.nope--5-per-minute", "rls.edge.remote_address--05-per-minute",
		"rls.edge.remote_address--5-per-1-minute", "rls.edge.remote_address--5-per-week", "x", ""} {
		if _, err := der(name); !errors.Is(err, cluster.ErrNotDerived) {
			t.Errorf("Deriver(%q): %v; want ErrNotDerived", name, err)
		}
	}
}

// TestOverrideRuleNameRoundTrip: ParseOverrideRuleName reads back every
// name OverrideRuleName writes, for the bases of any config.
func TestOverrideRuleNameRoundTrip(t *testing.T) {
	units := []rlsv3.RateLimitResponse_RateLimit_Unit{rlsv3.RateLimitResponse_RateLimit_SECOND, rlsv3.RateLimitResponse_RateLimit_MINUTE,
		rlsv3.RateLimitResponse_RateLimit_HOUR, rlsv3.RateLimitResponse_RateLimit_DAY, rlsv3.RateLimitResponse_RateLimit_MONTH,
		rlsv3.RateLimitResponse_RateLimit_YEAR}
	rapid.Check(t, func(t *rapid.T) {
		path := rapid.String().Draw(t, "path")
		base := baseName(path)
		if rapid.Bool().Draw(t, "domain") {
			base = anyBaseName(path)
		}
		unit := rapid.SampledFrom(units).Draw(t, "unit")
		maxMult := uint32(min(int64(maxPeriod/UnitDuration(unit)), 1<<32-1))
		o := Override{RequestsPerUnit: rapid.Uint32Min(1).Draw(t, "rpu"), Unit: unit,
			Multiplier: rapid.Uint32Range(1, maxMult).Draw(t, "mult")}
		name := OverrideRuleName(base, o)
		if len(name) > MaxRuleNameBytes {
			t.Fatalf("%q: %d bytes, above %d", name, len(name), MaxRuleNameBytes)
		}
		b, got, ok := ParseOverrideRuleName(name)
		if !ok || b != base || got != o {
			t.Fatalf("ParseOverrideRuleName(%q) = %q, %+v, %v; want %q, %+v", name, b, got, ok, base, o)
		}
	})
}

// FuzzParseOverrideRuleName: whatever a peer frame names, a name that
// parses is the one canonical name of what it parsed to, within the
// bounds (requests_per_unit and multiplier >= 1, a period a duration
// holds).
func FuzzParseOverrideRuleName(f *testing.F) {
	for _, s := range []string{"rls.edge.remote_address--5-per-second", "rls.edge--any--100-per-30-minute", "--1-per-day",
		"a--0-per-day", "a--5-per-1-day", "a--5-per-day-", "a---5-per-day", "a--4294967295-per-4294967295-second", "a--5-per-300-year"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		base, o, ok := ParseOverrideRuleName(name)
		if !ok {
			return
		}
		if o.RequestsPerUnit == 0 || o.Multiplier == 0 || UnitDuration(o.Unit) == 0 || o.Period() <= 0 {
			t.Fatalf("%q parsed to %+v", name, o)
		}
		if again := OverrideRuleName(base, o); again != name {
			t.Fatalf("%q parsed to %q, %+v, which names %q", name, base, o, again)
		}
	})
}

// TestParseOverride: every defined unit maps to its RLS unit.
func TestParseOverride(t *testing.T) {
	for u, want := range map[typev3.RateLimitUnit]rlsv3.RateLimitResponse_RateLimit_Unit{
		typev3.RateLimitUnit_SECOND: rlsv3.RateLimitResponse_RateLimit_SECOND, typev3.RateLimitUnit_MINUTE: rlsv3.RateLimitResponse_RateLimit_MINUTE,
		typev3.RateLimitUnit_HOUR: rlsv3.RateLimitResponse_RateLimit_HOUR, typev3.RateLimitUnit_DAY: rlsv3.RateLimitResponse_RateLimit_DAY,
		typev3.RateLimitUnit_MONTH: rlsv3.RateLimitResponse_RateLimit_MONTH, typev3.RateLimitUnit_YEAR: rlsv3.RateLimitResponse_RateLimit_YEAR,
	} {
		o, err := ParseOverride(&ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: u})
		if err != nil || o != (Override{RequestsPerUnit: 3, Unit: want, Multiplier: 1}) {
			t.Errorf("%v: %+v, %v", u, o, err)
		}
	}
}
