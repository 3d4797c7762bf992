package rule

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
)

// rateForms is the hint every rate error ends with.
const rateForms = "(forms: 100/s, 6000/min, 1/3s, 2.5)"

// ParseRate parses a rate exactly into a bucket.Rate:
//
//   - "N/UNIT": N tokens per unit, N a whole number, UNIT one of ms, s
//     (sec, second), m (min, minute), h (hour), d (day): "100/s",
//     "6000/min" (= 100/s), "10/d";
//   - "N/DURATION": N tokens per a Go duration: "1/3s", "5/1m30s",
//     "1/250ms";
//   - "X": X tokens per second, a decimal number: "2.5" (= 5 per 2 s),
//     "100", "0.001" (up to 6 decimal places convert exactly).
//
// The result is in lowest terms, Tokens over Per in nanoseconds, as
// bucket.PerSecond returns it (6000/min and "100" are both Rate{1, 10ms}). Errors: anything
// else, a rate of 0 or below, or a period above bucket's 1e6 s.
func ParseRate(s string) (bucket.Rate, error) {
	t := strings.TrimSpace(s)
	bad := func(why string) (bucket.Rate, error) {
		if why != "" {
			why = " (" + why + ")"
		}
		return bucket.Rate{}, fmt.Errorf("%q is not a rate%s %s", s, why, rateForms)
	}
	num, unit, slash := strings.Cut(t, "/")
	if !slash {
		f, err := strconv.ParseFloat(t, 64)
		if err != nil || strings.ContainsAny(t, "xXpP_") || strings.EqualFold(t, "nan") || strings.Contains(strings.ToLower(t), "inf") {
			return bad("")
		}
		if f <= 0 {
			return bad("must be above 0")
		}
		r, err := bucket.PerSecond(f)
		if err != nil {
			return bad(err.Error())
		}
		return r, nil
	}
	num, unit = strings.TrimSpace(num), strings.TrimSpace(unit)
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || strings.HasPrefix(num, "+") {
		return bad("the count before '/' must be a whole number")
	}
	if n <= 0 {
		return bad("must be above 0")
	}
	var per time.Duration
	switch strings.ToLower(unit) {
	case "ms":
		per = time.Millisecond
	case "s", "sec", "second":
		per = time.Second
	case "m", "min", "minute":
		per = time.Minute
	case "h", "hr", "hour":
		per = time.Hour
	case "d", "day":
		per = 24 * time.Hour
	default:
		d, err := time.ParseDuration(unit)
		if err != nil || unit == "" || !(unit[0] >= '0' && unit[0] <= '9') {
			return bad("")
		}
		if d <= 0 {
			return bad("the period must be above 0")
		}
		per = d
	}
	r := bucket.Rate{Tokens: n, Per: per}.Reduced()
	if err := r.Validate(); err != nil {
		return bad(err.Error())
	}
	if r.PerSec() > 1e12 {
		return bad("above the supported 1e12 tokens/s")
	}
	return r, nil
}

// FormatRate writes r as ParseRate reads it back exactly: "N/s", "N/m",
// "N/h", "N/d", "N/ms" for those periods, "N/DURATION" otherwise
// ("1/3s", "1/333.333333ms").
func FormatRate(r bucket.Rate) string {
	switch r.Per {
	case time.Millisecond:
		return fmt.Sprintf("%d/ms", r.Tokens)
	case time.Second:
		return fmt.Sprintf("%d/s", r.Tokens)
	case time.Minute:
		return fmt.Sprintf("%d/m", r.Tokens)
	case time.Hour:
		return fmt.Sprintf("%d/h", r.Tokens)
	case 24 * time.Hour:
		return fmt.Sprintf("%d/d", r.Tokens)
	}
	return fmt.Sprintf("%d/%s", r.Tokens, r.Per)
}

// MustRate is ParseRate for rates written in Go source
// (rule.MustRate("100/s")): it panics on an error, like
// regexp.MustCompile.
func MustRate(s string) bucket.Rate {
	r, err := ParseRate(s)
	if err != nil {
		panic("rule.MustRate: " + err.Error())
	}
	return r
}

// DefaultBurst is the burst of a rule that gives none: one second's worth
// of tokens at r, rounded up, at least 1 and at most 1e15 tokens.
func DefaultBurst(r bucket.Rate) int64 {
	b := math.Ceil(r.PerSec())
	if b < 1 || math.IsNaN(b) {
		return 1
	}
	if b > 1e15 {
		return 1e15
	}
	return int64(b)
}
