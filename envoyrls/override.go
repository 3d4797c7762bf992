package envoyrls

// A descriptor's own limit (RateLimitDescriptor.limit, Envoy's "limit
// override", set by a rate limit action's `limit` from dynamic metadata):
// decided against that limit instead of the configured one.
//
// Theirs (envoyproxy/ratelimit, src/config/config_impl.go GetLimit, read,
// not copied): a descriptor of a known domain that carries a limit is
// limited by requests_per_unit per unit, whether or not it matches a
// configured descriptor (the tree is not consulted), without the matched
// descriptor's shadow_mode, quota_mode, name or replaces, and without
// unlimited; an unknown domain still has no limit.
//
// Ours: each (descriptor, limit) is a tokenmesh rule derived on demand
// (cluster.Derived), named from the descriptor and the limit, so that
// every node derives the same rule from the name alone: the node that
// gets the check creates it (EnsureDerived), the key's owner creates it
// from the forwarded check's frame (Config.Deriver). The descriptor is the
// configured one the entries match (its strategy, params, algorithm and
// bucket key, so a share_threshold wildcard still shares one bucket), or,
// for entries that match no configured limit, the domain as a whole, with
// the domain's tokenmesh extension and a key of the entries' keys and
// values. The new rule's buckets start from the levels the node holds of
// the configured rule's and of the descriptor's other overrides' keys (the
// lowest, capped at the new burst: cluster.Node.EnsureDerived), so a key
// whose limit changes keeps what it spent.

import (
	"fmt"
	"maps"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/config"
	"github.com/tokenmesh/tokenmesh/rule"
)

// Override is a descriptor's limit override, validated (ParseOverride):
// RequestsPerUnit requests per Multiplier units of Unit.
type Override struct {
	// RequestsPerUnit is the limit's requests per period, and its burst (> 0).
	RequestsPerUnit uint32
	// Unit is the period's unit: SECOND, MINUTE, HOUR, DAY, MONTH (30
	// days) or YEAR (365 days), the units of envoy.type.v3.RateLimitUnit.
	Unit rlsv3.RateLimitResponse_RateLimit_Unit
	// Multiplier is unit_multiplier: the period is Multiplier units (>= 1;
	// 1 when unset).
	Multiplier uint32
}

// Period is the override's refill period: Multiplier times the unit's
// length (UnitDuration).
func (o Override) Period() time.Duration {
	return time.Duration(o.Multiplier) * UnitDuration(o.Unit)
}

// String is "5 per second", "5 per 30 second".
func (o Override) String() string {
	unit := strings.ToLower(o.Unit.String())
	if o.Multiplier != 1 {
		return fmt.Sprintf("%d per %d %s", o.RequestsPerUnit, o.Multiplier, unit)
	}
	return fmt.Sprintf("%d per %s", o.RequestsPerUnit, unit)
}

// maxPeriod bounds an override's period (Multiplier units): the longest
// time.Duration, about 292 years.
const maxPeriod = time.Duration(math.MaxInt64)

// ParseOverride validates a descriptor's limit override. Errors name the
// field (relative to the limit) and the value: requests_per_unit 0 (a
// limit of nothing; a configured requests_per_unit 0 is written in the
// files, not sent), a unit that is not SECOND, MINUTE, HOUR, DAY, MONTH or
// YEAR (UNKNOWN, or a number envoy.type.v3.RateLimitUnit does not define),
// a unit_multiplier of 0, or a period too long for a duration. A nil o is
// an error too (the caller checks for it).
func ParseOverride(o *ratelimitv3.RateLimitDescriptor_RateLimitOverride) (Override, error) {
	if o == nil {
		return Override{}, fmt.Errorf("no limit")
	}
	if o.GetRequestsPerUnit() == 0 {
		return Override{}, fmt.Errorf("requests_per_unit: 0; want at least 1")
	}
	var unit rlsv3.RateLimitResponse_RateLimit_Unit
	switch o.GetUnit() {
	case typev3.RateLimitUnit_SECOND:
		unit = rlsv3.RateLimitResponse_RateLimit_SECOND
	case typev3.RateLimitUnit_MINUTE:
		unit = rlsv3.RateLimitResponse_RateLimit_MINUTE
	case typev3.RateLimitUnit_HOUR:
		unit = rlsv3.RateLimitResponse_RateLimit_HOUR
	case typev3.RateLimitUnit_DAY:
		unit = rlsv3.RateLimitResponse_RateLimit_DAY
	case typev3.RateLimitUnit_MONTH:
		unit = rlsv3.RateLimitResponse_RateLimit_MONTH
	case typev3.RateLimitUnit_YEAR:
		unit = rlsv3.RateLimitResponse_RateLimit_YEAR
	default:
		return Override{}, fmt.Errorf("unit: %s (%d) is not a rate limit unit (want SECOND, MINUTE, HOUR, DAY, MONTH or YEAR)",
			o.GetUnit(), int32(o.GetUnit()))
	}
	mult := uint32(1)
	if m := o.GetUnitMultiplier(); m != nil {
		mult = m.GetValue()
	}
	if mult == 0 {
		return Override{}, fmt.Errorf("unit_multiplier: 0; want at least 1 (unset is 1)")
	}
	if int64(mult) > int64(maxPeriod/UnitDuration(unit)) {
		return Override{}, fmt.Errorf("unit_multiplier: %d %ss is longer than a duration holds", mult, strings.ToLower(unit.String()))
	}
	return Override{RequestsPerUnit: o.GetRequestsPerUnit(), Unit: unit, Multiplier: mult}, nil
}

// overrideMarker separates an override rule's base from its limit.
const overrideMarker = "--"

// maxOverrideSuffix is the longest limit part of an override rule name:
// "--4294967295-per-4294967295-second".
const maxOverrideSuffix = len("--4294967295-per-4294967295-second")

// anyBaseSuffix ends the base of a domain's entries that match no
// configured limit.
const anyBaseSuffix = "--any"

// OverrideRuleName is the name of the rule that enforces override o for
// the descriptors of base (an override base: Config.OverrideBase):
// base, "--", requests_per_unit, "-per-", the multiplier and "-" when it
// is not 1, and the unit in lower case: "rls.edge.remote_address--5-per-second",
// "rls.edge--any--100-per-30-minute". Every node derives the same name,
// and ParseOverrideRuleName reads it back. At most MaxRuleNameBytes bytes
// for a base of Config's (they leave room for the limit).
func OverrideRuleName(base string, o Override) string {
	var b strings.Builder
	b.Grow(len(base) + maxOverrideSuffix)
	b.WriteString(base)
	b.WriteString(overrideMarker)
	b.WriteString(strconv.FormatUint(uint64(o.RequestsPerUnit), 10))
	b.WriteString("-per-")
	if o.Multiplier != 1 {
		b.WriteString(strconv.FormatUint(uint64(o.Multiplier), 10))
		b.WriteByte('-')
	}
	b.WriteString(strings.ToLower(o.Unit.String()))
	return b.String()
}

// overrideUnits are the units an override name may end with.
var overrideUnits = map[string]rlsv3.RateLimitResponse_RateLimit_Unit{
	"second": rlsv3.RateLimitResponse_RateLimit_SECOND,
	"minute": rlsv3.RateLimitResponse_RateLimit_MINUTE,
	"hour":   rlsv3.RateLimitResponse_RateLimit_HOUR,
	"day":    rlsv3.RateLimitResponse_RateLimit_DAY,
	"month":  rlsv3.RateLimitResponse_RateLimit_MONTH,
	"year":   rlsv3.RateLimitResponse_RateLimit_YEAR,
}

// ParseOverrideRuleName splits an override rule name (OverrideRuleName)
// into its base and override; ok is false for any other text, including a
// name OverrideRuleName would write otherwise (a leading zero, an explicit
// multiplier 1, an upper-case unit): a name parses back only from its one
// canonical form. The base is not checked against a Config
// (Config.Deriver does that).
func ParseOverrideRuleName(name string) (base string, o Override, ok bool) {
	i := strings.LastIndex(name, overrideMarker)
	if i <= 0 {
		return "", Override{}, false
	}
	base, rest := name[:i], name[i+len(overrideMarker):]
	rpu, rest, ok := strings.Cut(rest, "-per-")
	if !ok {
		return "", Override{}, false
	}
	n, ok := canonicalUint32(rpu)
	if !ok || n == 0 {
		return "", Override{}, false
	}
	o = Override{RequestsPerUnit: n, Multiplier: 1}
	if m, u, has := strings.Cut(rest, "-"); has {
		mult, ok := canonicalUint32(m)
		if !ok || mult <= 1 {
			return "", Override{}, false
		}
		o.Multiplier, rest = mult, u
	}
	if o.Unit, ok = overrideUnits[rest]; !ok {
		return "", Override{}, false
	}
	if int64(o.Multiplier) > int64(maxPeriod/UnitDuration(o.Unit)) {
		return "", Override{}, false
	}
	return base, o, true
}

// canonicalUint32 parses s as a uint32 written without sign or leading
// zeros.
func canonicalUint32(s string) (uint32, bool) {
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil || strconv.FormatUint(v, 10) != s {
		return 0, false
	}
	return uint32(v), true
}

// overrideBase is what the rules of one override base are made from: the
// configured limit's descriptor, or a domain's entries that match none.
type overrideBase struct {
	domain string
	// path is the descriptor's path (Limit.Path), or the domain followed
	// by ".*" for the domain's unmatched entries (a path no descriptor has).
	path string
	// seed is the configured limit's rule (Limit.Rule; "" for none: an
	// unlimited or requests_per_unit 0 limit, or a domain).
	seed      string
	strategy  string
	params    map[string]string
	algorithm string
}

// OverrideBase is the override base of the descriptors of l (a limit of c):
// RuleName's form of l.Path, shortened so that every override rule name
// fits in MaxRuleNameBytes.
func (l *Limit) OverrideBase() string { return l.overrideBase }

// baseName is the override base of a descriptor path.
func baseName(path string) string {
	return ruleName(path, MaxRuleNameBytes-maxOverrideSuffix)
}

// anyBaseName is the override base of a domain's entries that match no
// configured limit: the domain's name in RuleName's form, and "--any".
func anyBaseName(domain string) string {
	return ruleName(domain, MaxRuleNameBytes-maxOverrideSuffix-len(anyBaseSuffix)) + anyBaseSuffix
}

// overrideRule is the rule of override o on base b, for a node of time
// base epoch (fixed_window's alignment, as Config.Rules), validated as a
// configured limit's rule (config.CheckRule).
func (b *overrideBase) overrideRule(name string, o Override, epoch time.Time) (rule.Rule, error) {
	n, per := int64(o.RequestsPerUnit), o.Period()
	cr := rule.Rule{Name: name, Key: config.DefaultKey, Rate: bucket.Rate{Tokens: n, Per: per}.Reduced(),
		Burst: n, Strategy: b.strategy, Params: rule.Pairs(b.params)}
	if b.algorithm == AlgorithmFixedWindow {
		params := maps.Clone(b.params)
		if params == nil {
			params = map[string]string{}
		}
		params["align"] = (time.Duration(epoch.UnixNano()%int64(per)+int64(per)) % per).String()
		cr.Params = rule.Pairs(params)
	}
	return config.CheckRule(cr)
}

// derived is the cluster.Derived of override o on base b.
func (c *Config) derived(base string, o Override, epoch time.Time) (cluster.Derived, error) {
	b, ok := c.bases[base]
	if !ok {
		return cluster.Derived{}, fmt.Errorf("%w: no descriptor of the Envoy config has the override base %q", cluster.ErrNotDerived, base)
	}
	if b.algorithm == AlgorithmFixedWindow && epoch.IsZero() {
		return cluster.Derived{}, fmt.Errorf("limit override %s of %s: algorithm fixed_window needs a wall-clock time base, which this node did not start with (it had no peers and no fixed_window limit); restart the node", o, b.path)
	}
	name := OverrideRuleName(base, o)
	if other, dup := c.ruleNames[name]; dup {
		return cluster.Derived{}, fmt.Errorf("limit override %s of %s: its rule name %q is the rule of %s; rename that descriptor", o, b.path, name, other)
	}
	r, err := b.overrideRule(name, o, epoch)
	if err != nil {
		return cluster.Derived{}, fmt.Errorf("limit override %s of %s: as a tokenmesh rule: %w", o, b.path, err)
	}
	return cluster.Derived{Rule: r, Base: base, Seed: b.seed}, nil
}

// Deriver is the cluster.Deriver of c's limit overrides for a node of time
// base epoch (as Rules): it derives an override rule's name
// (OverrideRuleName of a base of c) into the rule every node derives for
// it, and refuses every other name (cluster.ErrNotDerived). Every node of
// a cluster must use the Deriver of the same files and epoch.
func (c *Config) Deriver(epoch time.Time) cluster.Deriver {
	return func(name string) (cluster.Derived, error) {
		base, o, ok := ParseOverrideRuleName(name)
		if !ok {
			return cluster.Derived{}, fmt.Errorf("%w: %q is not a limit override's rule name", cluster.ErrNotDerived, name)
		}
		return c.derived(base, o, epoch)
	}
}

// MatchOverride is Match for a descriptor that carries override o: the
// limit it is decided against and its key in that limit's rule. The
// limit is o on the descriptor Match finds (whatever its rate_limit:
// unlimited and requests_per_unit 0 too), with that descriptor's strategy,
// params, algorithm and key; or, for entries that match no configured
// limit, o on the domain (the domain's tokenmesh extension), keyed by the
// entries' keys and values. It has no name, no replaces, no shadow_mode or
// quota_mode, and Rule is OverrideRuleName of the base; d is the rule to
// create (cluster.Node.EnsureDerived) for a node of time base epoch. nil,
// with no error, for an unknown domain or no entries (no limit, as
// without an override). Errors: the override as a rule is refused (a
// period the bucket cannot hold), or its name is a configured rule's.
func (c *Config) MatchOverride(domain string, entries []Entry, o Override, epoch time.Time) (l *Limit, key string, d cluster.Derived, err error) {
	dom := c.Domains[domain]
	if dom == nil || len(entries) == 0 {
		return nil, "", cluster.Derived{}, nil
	}
	base := dom.anyBase
	matched, key := c.Match(domain, entries)
	if matched != nil {
		base = matched.overrideBase
	} else {
		kv := make([]string, 0, 2*len(entries))
		for _, e := range entries {
			kv = append(kv, e.Key, e.Value)
		}
		key = joinKey(kv)
	}
	ol, err := c.overrideLimit(base, o, epoch)
	if err != nil {
		return nil, "", cluster.Derived{}, err
	}
	return ol.limit, key, ol.d, nil
}

// overrideLimitKey names one override of one base for one time base.
type overrideLimitKey struct {
	base  string
	o     Override
	epoch int64 // epoch's Unix nanoseconds; 0 for the zero time
}

// overrideLimit is an override's Limit (shared, read-only) and rule.
type overrideLimit struct {
	limit *Limit
	d     cluster.Derived
}

// maxOverrideCache bounds the overrides a Config keeps made (the
// overrides clients send are not bounded; those beyond are made again at
// each request).
const maxOverrideCache = 4096

// overrideCache keeps the overrides a Config made, so that a request does
// not build and validate the same rule again.
type overrideCache struct {
	mu sync.Mutex
	m  map[overrideLimitKey]overrideLimit
}

// overrideLimit is the Limit and rule of override o on base (named in
// c.bases), made once (overrideCache).
func (c *Config) overrideLimit(base string, o Override, epoch time.Time) (overrideLimit, error) {
	k := overrideLimitKey{base: base, o: o}
	if !epoch.IsZero() {
		k.epoch = epoch.UnixNano()
	}
	if c.cache != nil {
		c.cache.mu.Lock()
		ol, ok := c.cache.m[k]
		c.cache.mu.Unlock()
		if ok {
			return ol, nil
		}
	}
	d, err := c.derived(base, o, epoch)
	if err != nil {
		return overrideLimit{}, err
	}
	b := c.bases[base]
	ol := overrideLimit{d: d, limit: &Limit{Domain: b.domain, Path: b.path, Rule: d.Rule.Name, RequestsPerUnit: o.RequestsPerUnit,
		Unit: o.Unit, Strategy: b.strategy, Params: b.params, Algorithm: b.algorithm, Override: true, period: o.Period(), overrideBase: base}}
	if c.cache != nil {
		c.cache.mu.Lock()
		if len(c.cache.m) < maxOverrideCache {
			c.cache.m[k] = ol
		}
		c.cache.mu.Unlock()
	}
	return ol, nil
}
