package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// Latency is a distribution of one-way message latency.
//   - fixed:       every message takes Mean.
//   - uniform:     uniform in [Min, Max].
//   - exponential: Min plus an exponential with mean Mean-Min.
//   - samples:     one of measured values, uniformly (ReadLatencySamples);
//     Min, Max and Mean are theirs.
type Latency struct {
	Kind string // "fixed", "uniform", "exponential" or "samples"
	Min  time.Duration
	Max  time.Duration
	Mean time.Duration

	samples *samples // Kind "samples"
}

// ParseLatency parses "2ms" (fixed), "uniform:1ms-5ms", or "exp:2ms"
// (exponential with mean 2ms) / "exp:1ms+2ms" (1ms plus an exponential with
// mean 2ms), or "samples:FILE" (measured values, one duration per line:
// ReadLatencySamples). Errors name the text and the accepted forms.
func ParseLatency(s string) (Latency, error) {
	if path, ok := strings.CutPrefix(strings.TrimSpace(s), "samples:"); ok {
		return readSampleFile(path)
	}
	bad := func(why string) (Latency, error) {
		return Latency{}, fmt.Errorf("latency %q: %s (forms: 2ms, uniform:1ms-5ms, exp:2ms, exp:1ms+2ms, samples:FILE)", s, why)
	}
	kind, rest, hasKind := strings.Cut(strings.TrimSpace(s), ":")
	if !hasKind {
		d, err := time.ParseDuration(kind)
		if err != nil || d < 0 {
			return bad("not a non-negative duration")
		}
		return Latency{Kind: "fixed", Min: d, Max: d, Mean: d}, nil
	}
	switch kind {
	case "uniform":
		lo, hi, ok := strings.Cut(rest, "-")
		a, err1 := time.ParseDuration(lo)
		b, err2 := time.ParseDuration(hi)
		if !ok || err1 != nil || err2 != nil || a < 0 || b < a {
			return bad("want uniform:MIN-MAX with 0 <= MIN <= MAX")
		}
		return Latency{Kind: "uniform", Min: a, Max: b, Mean: (a + b) / 2}, nil
	case "exp", "exponential":
		base := time.Duration(0)
		meanText := rest
		if b, m, ok := strings.Cut(rest, "+"); ok {
			d, err := time.ParseDuration(b)
			if err != nil || d < 0 {
				return bad("base is not a non-negative duration")
			}
			base, meanText = d, m
		}
		m, err := time.ParseDuration(meanText)
		if err != nil || m <= 0 {
			return bad("mean is not a positive duration")
		}
		return Latency{Kind: "exponential", Min: base, Max: time.Duration(math.MaxInt64), Mean: base + m}, nil
	}
	return bad("unknown distribution " + kind)
}

// Sample draws one latency.
func (l Latency) Sample(r *rand.Rand) time.Duration {
	switch l.Kind {
	case "uniform":
		if l.Max == l.Min {
			return l.Min
		}
		return l.Min + time.Duration(r.Int64N(int64(l.Max-l.Min)+1))
	case "exponential":
		return l.Min + time.Duration(r.ExpFloat64()*float64(l.Mean-l.Min))
	case "samples":
		return l.samples.draw(r)
	}
	return l.Mean
}

// Hint is the latency strategies are told to expect (strategy.Config's
// LatencyHint): the fixed value, the maximum of a uniform, and the 99th
// percentile of an exponential or of samples.
func (l Latency) Hint() time.Duration {
	switch l.Kind {
	case "samples":
		return l.samples.p99()
	case "uniform":
		return l.Max
	case "exponential":
		return l.Min + time.Duration(math.Log(100)*float64(l.Mean-l.Min))
	}
	return l.Mean
}

// String prints l in the form ParseLatency reads.
func (l Latency) String() string {
	switch l.Kind {
	case "samples":
		return "samples:" + l.samples.source
	case "uniform":
		return fmt.Sprintf("uniform:%v-%v", l.Min, l.Max)
	case "exponential":
		if l.Min > 0 {
			return fmt.Sprintf("exp:%v+%v", l.Min, l.Mean-l.Min)
		}
		return fmt.Sprintf("exp:%v", l.Mean)
	}
	return l.Mean.String()
}

// Network is the simulated network between nodes: every message independently
// is lost with probability Loss, duplicated (a second copy with its own
// latency) with probability Duplicate, and, with probability Reorder, delayed
// by an extra uniform [0, 2*Hint] so that it overtakes or is overtaken.
type Network struct {
	Latency   Latency
	Loss      float64
	Duplicate float64
	Reorder   float64
}

// Validate checks the probabilities.
func (n Network) Validate() error {
	for _, p := range []struct {
		name string
		v    float64
	}{{"loss", n.Loss}, {"duplicate", n.Duplicate}, {"reorder", n.Reorder}} {
		if math.IsNaN(p.v) || p.v < 0 || p.v > 1 {
			return fmt.Errorf("network %s %v is not a probability in [0, 1]", p.name, p.v)
		}
	}
	if n.Latency.Kind == "" {
		return fmt.Errorf("network latency is not set")
	}
	return nil
}

// deliveries returns the delays after which copies of one message arrive
// (none when it is lost).
func (n Network) deliveries(r *rand.Rand, buf []time.Duration) []time.Duration {
	buf = buf[:0]
	if n.Loss > 0 && r.Float64() < n.Loss {
		return buf
	}
	copies := 1
	if n.Duplicate > 0 && r.Float64() < n.Duplicate {
		copies = 2
	}
	for i := 0; i < copies; i++ {
		d := n.Latency.Sample(r)
		if n.Reorder > 0 && r.Float64() < n.Reorder {
			d += time.Duration(r.Int64N(int64(2*n.Latency.Hint()) + 1))
		}
		buf = append(buf, d)
	}
	return buf
}
