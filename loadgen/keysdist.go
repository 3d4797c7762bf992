package loadgen

// Key distributions by name (--keys-dist of tokenmesh bench and of
// bench/peers): peers and tokenmesh on realistic keys (issue 26, item 2).

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Key distributions --keys-dist names.
const (
	DistUniform = "uniform"
	DistZipf    = "zipf"
	DistTenants = "tenants"
)

// Bounds of the distributions' parameters.
const (
	MaxDistKeys = 10_000_000
	MaxZipfS    = 10
	// defaults: the zipf:s=1.1,n=100000 and the simulator's
	// tenants workload, 20 tenants (workload.ParseGenerator, tenants:
	// users=20).
	defaultZipfS, defaultZipfN = 1.1, 100_000
	defaultTenants             = 20
)

const distForms = "want uniform, zipf[:s=S,n=N] or tenants[:N], e.g. zipf:s=1.1,n=100000 or tenants:20"

// KeysDist is a parsed --keys-dist (tokenmesh bench and bench/peers take
// the flag by that name; parse errors name it):
//
//   - uniform: --keys keys ("k0".."k{n-1}") drawn uniformly (the default,
//     the harness before realistic keys);
//   - zipf:s=S,n=N: N keys, key i (from 0) drawn with probability
//     proportional to (i+1)^-S (Options.ZipfS), "k0" the hottest;
//     s 0 < S <= 10, default 1.1; n 2..10^7, default 100000;
//   - tenants:N: N hot tenant keys ("tenant0".."tenant{N-1}") carrying all
//     the load, drawn uniformly: the simulator's tenants workload
//     (workload.ParseGenerator: a few tenants at equal high rates, each
//     offered twice its limit, spread over every node), without its
//     Poisson arrivals (the load generator's open loop paces the calls);
//     N 1..10^7, default 20.
type KeysDist struct {
	Kind string  // DistUniform, DistZipf or DistTenants
	N    int     // keys; 0 for uniform (the caller's --keys decides)
	S    float64 // zipf's exponent; 0 otherwise
}

// ParseKeysDist parses a --keys-dist value: uniform, zipf[:s=S,n=N] or
// tenants[:N]. Errors start with "--keys-dist", name the bad part and
// show the forms.
func ParseKeysDist(spec string) (KeysDist, error) {
	kind, params, hasParams := strings.Cut(strings.TrimSpace(spec), ":")
	kind = strings.TrimSpace(kind)
	bad := func(format string, a ...any) error {
		return fmt.Errorf("--keys-dist %q: %s (%s)", spec, fmt.Sprintf(format, a...), distForms)
	}
	if hasParams && strings.TrimSpace(params) == "" {
		return KeysDist{}, bad("nothing after ':'")
	}
	params = strings.TrimSpace(params)
	var d KeysDist
	var err error
	switch kind {
	case DistUniform:
		if hasParams {
			return KeysDist{}, bad("uniform takes no parameter (its keys are --keys)")
		}
		return KeysDist{Kind: DistUniform}, nil
	case DistTenants:
		d, err = parseTenants(params, hasParams, bad)
	case DistZipf:
		d, err = parseZipf(params, hasParams, bad)
	case "":
		return KeysDist{}, bad("empty")
	default:
		return KeysDist{}, bad("unknown distribution %q", kind)
	}
	if err != nil {
		return KeysDist{}, err
	}
	return d, nil
}

// distBad is the error of a bad --keys-dist, naming the bad part.
type distBad func(format string, a ...any) error

// parseTenants parses the parameter of tenants (if hasParams): the
// number of tenants.
func parseTenants(params string, hasParams bool, bad distBad) (KeysDist, error) {
	d := KeysDist{Kind: DistTenants, N: defaultTenants}
	if !hasParams {
		return d, nil
	}
	n, err := strconv.Atoi(params)
	if err != nil || strings.HasPrefix(params, "+") {
		return KeysDist{}, bad("%q is not a whole number of tenants", params)
	}
	if n < 1 || n > MaxDistKeys {
		return KeysDist{}, bad("%d tenants: want 1..%d", n, MaxDistKeys)
	}
	d.N = n
	return d, nil
}

// parseZipf parses the parameters of zipf (if hasParams): s and n, each
// at most once.
func parseZipf(params string, hasParams bool, bad distBad) (KeysDist, error) {
	d := KeysDist{Kind: DistZipf, N: defaultZipfN, S: defaultZipfS}
	if !hasParams {
		return d, nil
	}
	seen := map[string]bool{}
	for _, kv := range strings.Split(params, ",") {
		name, value, ok := strings.Cut(kv, "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		switch {
		case name == "":
			return KeysDist{}, bad("empty parameter")
		case name != "s" && name != "n":
			return KeysDist{}, bad("unknown parameter %q (zipf takes s and n)", name)
		case !ok || value == "":
			return KeysDist{}, bad("parameter %s has no value (want %s=VALUE)", name, name)
		case seen[name]:
			return KeysDist{}, bad("parameter %s given twice", name)
		}
		seen[name] = true
		if err := d.setZipf(name, value, bad); err != nil {
			return KeysDist{}, err
		}
	}
	return d, nil
}

// setZipf sets zipf's parameter name (s or n) to value.
func (d *KeysDist) setZipf(name, value string, bad distBad) error {
	if name == "s" {
		s, err := strconv.ParseFloat(value, 64)
		if err != nil || strings.ContainsAny(value, "xXpP_") {
			return bad("s=%s is not a number", value)
		}
		if math.IsNaN(s) || s <= 0 || s > MaxZipfS {
			return bad("s=%s: want 0 < s <= %d", value, MaxZipfS)
		}
		d.S = s
		return nil
	}
	n, err := strconv.Atoi(value)
	if err != nil || strings.HasPrefix(value, "+") {
		return bad("n=%s is not a whole number of keys", value)
	}
	if n < 2 || n > MaxDistKeys {
		return bad("n=%d: want 2..%d keys", n, MaxDistKeys)
	}
	d.N = n
	return nil
}

// String writes d as ParseKeysDist reads it back.
func (d KeysDist) String() string {
	switch d.Kind {
	case DistZipf:
		return fmt.Sprintf("zipf:s=%s,n=%d", strconv.FormatFloat(d.S, 'g', -1, 64), d.N)
	case DistTenants:
		return fmt.Sprintf("tenants:%d", d.N)
	}
	return DistUniform
}

// Keys is the number of distinct keys drawn (uniform: --keys).
func (d KeysDist) Keys(uniformKeys int) int {
	if d.Kind == DistUniform {
		return uniformKeys
	}
	return d.N
}

// Hottest is the probability that a check draws the hottest key.
func (d KeysDist) Hottest(uniformKeys int) float64 {
	if d.Kind == DistZipf {
		return ZipfCDF(d.N, d.S)[0]
	}
	return 1 / float64(d.Keys(uniformKeys))
}

// Apply sets the load generator's keys.
func (d KeysDist) Apply(o *Options, uniformKeys int) {
	o.Keys = d.Keys(uniformKeys)
	switch d.Kind {
	case DistZipf:
		o.ZipfS = d.S
	case DistTenants:
		o.KeyPrefix = "tenant"
	}
}
