package main

// --limit and --burst : the limit every system is given, and the offered
// load that puts the hottest key of --keys-dist (loadgen.KeysDist) above it.

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/tokenmesh/tokenmesh/loadgen"
	"github.com/tokenmesh/tokenmesh/rule"
)

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
func offered(l limitSpec, d loadgen.KeysDist, uniformKeys int, overload float64) (float64, error) {
	if math.IsNaN(overload) || overload <= 0 || overload > 100 {
		return 0, fmt.Errorf("--overload %v: want 0 < x <= 100", overload)
	}
	c := overload * float64(l.perS) / d.Hottest(uniformKeys)
	if c > maxOfferedPerS {
		return 0, fmt.Errorf("--limit %s with --keys-dist %s (%d keys): %.0f checks/s to offer the hottest key %gx its limit, above the harness's %d; lower --limit or use fewer keys",
			l.rate(), d, d.Keys(uniformKeys), c, overload, maxOfferedPerS)
	}
	return c, nil
}
