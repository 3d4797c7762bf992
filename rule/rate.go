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
	num, unit, slash := strings.Cut(t, "/")
	if !slash {
		return parseDecimalRate(s, t)
	}
	return parseCountRate(s, strings.TrimSpace(num), strings.TrimSpace(unit))
}

// badRate is ParseRate's error for s, with why (if any) in parentheses.
func badRate(s, why string) (bucket.Rate, error) {
	if why != "" {
		why = " (" + why + ")"
	}
	return bucket.Rate{}, fmt.Errorf("%q is not a rate%s %s", s, why, rateForms)
}

// parseDecimalRate is ParseRate of the form "X" (t, s trimmed): X tokens
// per second, a finite decimal number above 0.
func parseDecimalRate(s, t string) (bucket.Rate, error) {
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || strings.ContainsAny(t, "xXpP_") || strings.EqualFold(t, "nan") || strings.Contains(strings.ToLower(t), "inf") {
		return badRate(s, "")
	}
	if f <= 0 {
		return badRate(s, "must be above 0")
	}
	r, err := bucket.PerSecond(f)
	if err != nil {
		return badRate(s, err.Error())
	}
	return r, nil
}

// parseCountRate is ParseRate of the forms "N/UNIT" and "N/DURATION"
// (num and unit trimmed): the rate in lowest terms, valid for bucket and
// at most 1e12 tokens/s.
func parseCountRate(s, num, unit string) (bucket.Rate, error) {
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || strings.HasPrefix(num, "+") {
		return badRate(s, "the count before '/' must be a whole number")
	}
	if n <= 0 {
		return badRate(s, "must be above 0")
	}
	per, why, ok := parsePeriod(unit)
	if !ok {
		return badRate(s, why)
	}
	r := bucket.Rate{Tokens: n, Per: per}.Reduced()
	if err := r.Validate(); err != nil {
		return badRate(s, err.Error())
	}
	if r.PerSec() > 1e12 {
		return badRate(s, "above the supported 1e12 tokens/s")
	}
	return r, nil
}

// parsePeriod is the period after a rate's '/': a unit name (ms, s, m,
// h, d and their long forms) or a Go duration starting with a digit and
// above 0. Not ok: why it is not ("" when it is no period at all).
func parsePeriod(unit string) (per time.Duration, why string, ok bool) {
	switch strings.ToLower(unit) {
	case "ms":
		return time.Millisecond, "", true
	case "s", "sec", "second":
		return time.Second, "", true
	case "m", "min", "minute":
		return time.Minute, "", true
	case "h", "hr", "hour":
		return time.Hour, "", true
	case "d", "day":
		return 24 * time.Hour, "", true
	}
	d, err := time.ParseDuration(unit)
	if err != nil || unit == "" || !(unit[0] >= '0' && unit[0] <= '9') {
		return 0, "", false
	}
	if d <= 0 {
		return 0, "the period must be above 0", false
	}
	return d, "", true
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
