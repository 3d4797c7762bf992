package main

// --keys-dist, --limit and --burst : the keys the load
// generator draws, the limit every system is given, and the offered load
// that puts the hottest key above it.

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/tokenmesh/tokenmesh/loadgen"
	"github.com/tokenmesh/tokenmesh/rule"
)

// Key distributions --keys-dist names.
const (
	distUniform = "uniform"
	distZipf    = "zipf"
	distTenants = "tenants"
)

// Bounds of the distributions' parameters.
const (
	maxDistKeys = 10_000_000
	maxZipfS    = 10
	// defaults: the zipf:s=1.1,n=100000 and the simulator's
	// tenants workload, 20 tenants (workload.ParseGenerator, tenants:
	// users=20).
	defaultZipfS, defaultZipfN = 1.1, 100_000
	defaultTenants             = 20
)

const distForms = "want uniform, zipf[:s=S,n=N] or tenants[:N], e.g. zipf:s=1.1,n=100000 or tenants:20"

// keysDist is a parsed --keys-dist.
//
//   - uniform: --keys keys ("k0".."k{n-1}") drawn uniformly (the default,
//     the harness before realistic keys);
//   - zipf:s=S,n=N: N keys, key i (from 0) drawn with probability
//     proportional to (i+1)^-S (loadgen.Options.ZipfS), "k0" the hottest;
//     s 0 < S <= 10, default 1.1; n 2..10^7, default 100000;
//   - tenants:N: N hot tenant keys ("tenant0".."tenant{N-1}") carrying all
//     the load, drawn uniformly: the simulator's tenants workload
//     (workload.ParseGenerator: a few tenants at equal high rates, each
//     offered twice its limit, spread over every node), without its
//     Poisson arrivals (the load generator's open loop paces the calls);
//     N 1..10^7, default 20.
type keysDist struct {
	kind string
	n    int     // keys; 0 for uniform (--keys decides)
	s    float64 // zipf's exponent
}

// parseKeysDist parses --keys-dist; errors name the bad part and the forms.
func parseKeysDist(spec string) (keysDist, error) {
	kind, params, hasParams := strings.Cut(strings.TrimSpace(spec), ":")
	kind = strings.TrimSpace(kind)
	bad := func(format string, a ...any) error {
		return fmt.Errorf("--keys-dist %q: %s (%s)", spec, fmt.Sprintf(format, a...), distForms)
	}
	if hasParams && strings.TrimSpace(params) == "" {
		return keysDist{}, bad("nothing after ':'")
	}
	params = strings.TrimSpace(params)
	var d keysDist
	var err error
	switch kind {
	case distUniform:
		if hasParams {
			return keysDist{}, bad("uniform takes no parameter (its keys are --keys)")
		}
		return keysDist{kind: distUniform}, nil
	case distTenants:
		d, err = parseTenants(params, hasParams, bad)
	case distZipf:
		d, err = parseZipf(params, hasParams, bad)
	case "":
		return keysDist{}, bad("empty")
	default:
		return keysDist{}, bad("unknown distribution %q", kind)
	}
	if err != nil {
		return keysDist{}, err
	}
	return d, nil
}

// distBad is the error of a bad --keys-dist, naming the bad part.
type distBad func(format string, a ...any) error

// parseTenants parses the parameter of tenants (if hasParams): the
// number of tenants.
func parseTenants(params string, hasParams bool, bad distBad) (keysDist, error) {
	d := keysDist{kind: distTenants, n: defaultTenants}
	if !hasParams {
		return d, nil
	}
	n, err := strconv.Atoi(params)
	if err != nil || strings.HasPrefix(params, "+") {
		return keysDist{}, bad("%q is not a whole number of tenants", params)
	}
	if n < 1 || n > maxDistKeys {
		return keysDist{}, bad("%d tenants: want 1..%d", n, maxDistKeys)
	}
	d.n = n
	return d, nil
}

// parseZipf parses the parameters of zipf (if hasParams): s and n, each
// at most once.
func parseZipf(params string, hasParams bool, bad distBad) (keysDist, error) {
	d := keysDist{kind: distZipf, n: defaultZipfN, s: defaultZipfS}
	if !hasParams {
		return d, nil
	}
	seen := map[string]bool{}
	for _, kv := range strings.Split(params, ",") {
		name, value, ok := strings.Cut(kv, "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		switch {
		case name == "":
			return keysDist{}, bad("empty parameter")
		case name != "s" && name != "n":
			return keysDist{}, bad("unknown parameter %q (zipf takes s and n)", name)
		case !ok || value == "":
			return keysDist{}, bad("parameter %s has no value (want %s=VALUE)", name, name)
		case seen[name]:
			return keysDist{}, bad("parameter %s given twice", name)
		}
		seen[name] = true
		if err := d.setZipf(name, value, bad); err != nil {
			return keysDist{}, err
		}
	}
	return d, nil
}

// setZipf sets zipf's parameter name (s or n) to value.
func (d *keysDist) setZipf(name, value string, bad distBad) error {
	if name == "s" {
		s, err := strconv.ParseFloat(value, 64)
		if err != nil || strings.ContainsAny(value, "xXpP_") {
			return bad("s=%s is not a number", value)
		}
		if math.IsNaN(s) || s <= 0 || s > maxZipfS {
			return bad("s=%s: want 0 < s <= %d", value, maxZipfS)
		}
		d.s = s
		return nil
	}
	n, err := strconv.Atoi(value)
	if err != nil || strings.HasPrefix(value, "+") {
		return bad("n=%s is not a whole number of keys", value)
	}
	if n < 2 || n > maxDistKeys {
		return bad("n=%d: want 2..%d keys", n, maxDistKeys)
	}
	d.n = n
	return nil
}

// String writes d as parseKeysDist reads it back.
func (d keysDist) String() string {
	switch d.kind {
	case distZipf:
		return fmt.Sprintf("zipf:s=%s,n=%d", strconv.FormatFloat(d.s, 'g', -1, 64), d.n)
	case distTenants:
		return fmt.Sprintf("tenants:%d", d.n)
	}
	return distUniform
}

// keys is the number of distinct keys drawn (uniform: --keys).
func (d keysDist) keys(uniformKeys int) int {
	if d.kind == distUniform {
		return uniformKeys
	}
	return d.n
}

// hottest is the probability that a check draws the hottest key.
func (d keysDist) hottest(uniformKeys int) float64 {
	if d.kind == distZipf {
		return loadgen.ZipfCDF(d.n, d.s)[0]
	}
	return 1 / float64(d.keys(uniformKeys))
}

// apply sets the load generator's keys.
func (d keysDist) apply(o *loadgen.Options, uniformKeys int) {
	o.Keys = d.keys(uniformKeys)
	switch d.kind {
	case distZipf:
		o.ZipfS = d.s
	case distTenants:
		o.KeyPrefix = "tenant"
	}
}

// The default limit: every check admitted (the harness before realistic keys).
const unlimited = 1_000_000_000

// limitSpec is --limit and --burst: the token bucket (r tokens/s, burst b)
// every system enforces per key, each in its own terms (tokenmesh: the
// rule's rate and burst; Gubernator: limit r per duration 1s, burst b;
// envoy ratelimit: requests_per_unit r, unit second; redis_rate: rate r
// per period 1s, burst b).
type limitSpec struct {
	perS, burst int64
	set         bool // --limit given: open loop, admissions counted
}

// parseLimit parses --limit (a rate rule.ParseRate reads that is a whole
// number of tokens per second, 1..10^9: Gubernator and envoy ratelimit
// take a count per second) and --burst (1..10^9; 0: one second's tokens).
func parseLimit(limit string, burst int64) (limitSpec, error) {
	if strings.TrimSpace(limit) == "" {
		if burst != 0 {
			return limitSpec{}, errors.New("--burst needs --limit")
		}
		return limitSpec{perS: unlimited, burst: unlimited}, nil
	}
	r, err := rule.ParseRate(limit)
	if err != nil {
		return limitSpec{}, fmt.Errorf("--limit: %v", err)
	}
	f := r.PerSec()
	perS := int64(math.Round(f))
	if perS < 1 || perS > unlimited || math.Abs(f-float64(perS)) > 1e-9*f {
		return limitSpec{}, fmt.Errorf("--limit %q: want a whole number of tokens per second, 1/s..%d/s (Gubernator and envoy ratelimit take a count per second)", limit, unlimited)
	}
	if burst == 0 {
		burst = perS
	}
	if burst < 1 || burst > unlimited {
		return limitSpec{}, fmt.Errorf("--burst %d: want 1..%d tokens (0: one second's tokens)", burst, unlimited)
	}
	return limitSpec{perS: perS, burst: burst, set: true}, nil
}

// rate is the limit as a tokenmesh rule's rate.
func (l limitSpec) rate() string { return strconv.FormatInt(l.perS, 10) + "/s" }

// maxOfferedPerS bounds the open loop's checks/s: a limit and a key
// distribution whose hottest key needs more than this to be overloaded
// are an error (lower --limit, or use fewer keys).
const maxOfferedPerS = 2_000_000

// offered returns the open loop's checks/s: overload times the limit on
// the hottest key.
func offered(l limitSpec, d keysDist, uniformKeys int, overload float64) (float64, error) {
	if math.IsNaN(overload) || overload <= 0 || overload > 100 {
		return 0, fmt.Errorf("--overload %v: want 0 < x <= 100", overload)
	}
	c := overload * float64(l.perS) / d.hottest(uniformKeys)
	if c > maxOfferedPerS {
		return 0, fmt.Errorf("--limit %s with --keys-dist %s (%d keys): %.0f checks/s to offer the hottest key %gx its limit, above the harness's %d; lower --limit or use fewer keys",
			l.rate(), d, d.keys(uniformKeys), c, overload, maxOfferedPerS)
	}
	return c, nil
}
