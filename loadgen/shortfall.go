package loadgen

// What an exact limiter would have admitted of the same checks
// (Shortfall): the refusals below the limit beside the excess above it,
// so a table of peers shows accuracy in both directions (issue 26, item
// 2). Ours.

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
)

// Answered is one answered check of a run with Options.RecordAdmissions:
// its key, its tokens, whether it was admitted, and when the load
// generator saw the answer, on its own clock, from the start of the
// measured Duration (negative in the warmup).
type Answered struct {
	At       time.Duration
	Key      string
	Tokens   int64
	Admitted bool
}

// ShortfallResult compares what a system admitted of the measured
// Duration's checks with what one exact token bucket per key (rate r,
// burst b, full at the key's first check of the run, warmup included)
// admits of the same checks at the same times. Counts are tokens of the
// measured Duration.
type ShortfallResult struct {
	// Exact is what the exact buckets admit, summed over keys.
	Exact int64 `json:"exact_admitted"`
	// Admitted is what the system admitted, summed over keys.
	Admitted int64 `json:"admitted"`
	// Missed is, summed over keys, what the exact bucket admitted beyond
	// the system (a key's refusals below the limit: false rejections).
	Missed int64 `json:"missed"`
	// Extra is, summed over keys, what the system admitted beyond the
	// exact bucket (not the same as the excess over b + r*T: an exact
	// limiter whose clock differs a little shows a little of both).
	Extra int64 `json:"extra"`
	// KeysMissed is how many keys have Missed above 0.
	KeysMissed int `json:"keys_missed"`
}

// MissedPct is Missed as a percentage of Exact (0 when Exact is 0).
func (s ShortfallResult) MissedPct() float64 {
	if s.Exact == 0 {
		return 0
	}
	return 100 * float64(s.Missed) / float64(s.Exact)
}

// ExtraPct is Extra as a percentage of Exact (0 when Exact is 0).
func (s ShortfallResult) ExtraPct() float64 {
	if s.Exact == 0 {
		return 0
	}
	return 100 * float64(s.Extra) / float64(s.Exact)
}

// Shortfall replays ans per key, in the order of At (ties in ans's
// order), through an exact token bucket of rate r (ratePerS tokens/s) and
// burst b, full at the key's first answered check, and compares its
// admissions of the checks at At >= 0 with the system's. The times are
// the answers' on the load generator's clock, not the system's decision
// times, so a check near the moment the bucket refills may be decided
// either way by an exact system: a few tokens of Missed and Extra per key
// are timing, not inaccuracy. Errors: a rate or burst a bucket cannot
// take (bucket.PerSecond, bucket.New), or a check of fewer than 1 token.
func Shortfall(ans []Answered, ratePerS float64, burst int64) (ShortfallResult, error) {
	var s ShortfallResult
	r, err := bucket.PerSecond(ratePerS)
	if err != nil {
		return s, err
	}
	if len(ans) == 0 {
		return s, nil
	}
	sorted := slices.Clone(ans)
	slices.SortStableFunc(sorted, func(a, b Answered) int { return cmp.Compare(a.At, b.At) })
	origin := sorted[0].At // bucket times from 0
	type account struct {
		b               bucket.Bucket
		exact, admitted int64
	}
	keys := map[string]*account{}
	for _, a := range sorted {
		if a.Tokens < 1 {
			return ShortfallResult{}, errors.New("a check of fewer than 1 token")
		}
		now := a.At - origin
		k := keys[a.Key]
		if k == nil {
			b, err := bucket.New(r, burst, now)
			if err != nil {
				return ShortfallResult{}, fmt.Errorf("burst %d at rate %v/s: %w", burst, ratePerS, err)
			}
			k = &account{b: b}
			keys[a.Key] = k
		}
		ok := k.b.AllowN(now, a.Tokens)
		if a.At < 0 {
			continue
		}
		if ok {
			k.exact += a.Tokens
		}
		if a.Admitted {
			k.admitted += a.Tokens
		}
	}
	for _, k := range keys {
		s.Exact += k.exact
		s.Admitted += k.admitted
		if d := k.exact - k.admitted; d > 0 {
			s.Missed += d
			s.KeysMissed++
		} else {
			s.Extra -= d
		}
	}
	return s, nil
}
