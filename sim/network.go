package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
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
		l, why := parseUniform(rest)
		if why != "" {
			return bad(why)
		}
		return l, nil
	case "exp", "exponential":
		l, why := parseExp(rest)
		if why != "" {
			return bad(why)
		}
		return l, nil
	}
	return bad("unknown distribution " + kind)
}

// parseUniform parses the MIN-MAX of "uniform:MIN-MAX"; why is what is
// wrong with it ("" when nothing is).
func parseUniform(rest string) (l Latency, why string) {
	lo, hi, ok := strings.Cut(rest, "-")
	a, err1 := time.ParseDuration(lo)
	b, err2 := time.ParseDuration(hi)
	if !ok || err1 != nil || err2 != nil || a < 0 || b < a {
		return Latency{}, "want uniform:MIN-MAX with 0 <= MIN <= MAX"
	}
	return Latency{Kind: "uniform", Min: a, Max: b, Mean: (a + b) / 2}, ""
}

// parseExp parses the MEAN or BASE+MEAN of "exp:..."; why is what is wrong
// with it ("" when nothing is).
func parseExp(rest string) (l Latency, why string) {
	base := time.Duration(0)
	meanText := rest
	if b, m, ok := strings.Cut(rest, "+"); ok {
		d, err := time.ParseDuration(b)
		if err != nil || d < 0 {
			return Latency{}, "base is not a non-negative duration"
		}
		base, meanText = d, m
	}
	m, err := time.ParseDuration(meanText)
	if err != nil || m <= 0 {
		return Latency{}, "mean is not a positive duration"
	}
	return Latency{Kind: "exponential", Min: base, Max: time.Duration(math.MaxInt64), Mean: base + m}, ""
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
//
// With regions (Config.Regions) links are of two classes: a message between
// two nodes of one region takes Latency and is lost with probability Loss;
// a message between regions (a WAN link) takes WANLatency (or the pair's
// entry of Pairs) and is lost with probability WANLoss. Duplicate and
// Reorder apply to both. Without regions the WAN fields are not used.
type Network struct {
	Latency   Latency
	Loss      float64
	Duplicate float64
	Reorder   float64
	// WANLatency is the one-way latency between regions; the zero value
	// (Kind "") is Latency's.
	WANLatency Latency
	// WANLoss is the loss probability of a message between regions.
	WANLoss float64
	// Pairs overrides WANLatency for given pairs of regions, in either
	// direction: the key is the two region names joined by '/' in any
	// order ("eu/us"; PairKey). Names are checked against the regions when the run
	// starts.
	Pairs map[string]Latency
}

// link is one link class's latency and loss.
type link struct {
	lat  Latency
	loss float64
}

// Validate checks the probabilities.
func (n Network) Validate() error {
	for _, p := range []struct {
		name string
		v    float64
	}{{"loss", n.Loss}, {"duplicate", n.Duplicate}, {"reorder", n.Reorder}, {"wan loss", n.WANLoss}} {
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
// (none when it is lost), on the network's one link class (no regions).
func (n Network) deliveries(r *rand.Rand, buf []time.Duration) []time.Duration {
	return n.deliveriesOn(r, buf, link{n.Latency, n.Loss})
}

// deliveriesOn is deliveries over link l: l's latency and loss, the
// network's duplication and reordering. The draws are deliveries' own, so
// that a run without regions is what it was.
func (n Network) deliveriesOn(r *rand.Rand, buf []time.Duration, l link) []time.Duration {
	buf = buf[:0]
	if l.loss > 0 && r.Float64() < l.loss {
		return buf
	}
	copies := 1
	if n.Duplicate > 0 && r.Float64() < n.Duplicate {
		copies = 2
	}
	for i := 0; i < copies; i++ {
		d := l.lat.Sample(r)
		if n.Reorder > 0 && r.Float64() < n.Reorder {
			d += time.Duration(r.Int64N(int64(2*l.lat.Hint()) + 1))
		}
		buf = append(buf, d)
	}
	return buf
}

// PairKey is the key of Network.Pairs for regions a and b: their names
// in order, joined by '/' (region names have no '/').
func PairKey(a, b string) string {
	if b < a {
		a, b = b, a
	}
	return a + "/" + b
}

// links returns the link of every ordered pair of the regions, by index:
// Latency and Loss within a region, Pairs' entry or WANLatency and WANLoss
// between two. Errors: a Pairs key that is not two of the regions.
func (n Network) links(regions []string) ([][]link, error) {
	wan := n.WANLatency
	if wan.Kind == "" {
		wan = n.Latency
	}
	pairs := map[string]Latency{}
	for k, l := range n.Pairs {
		a, b, ok := strings.Cut(k, "/")
		if !ok || !slices.Contains(regions, a) || !slices.Contains(regions, b) || a == b {
			return nil, fmt.Errorf("network pair %q: want two different regions of %s joined by '/'", k, strings.Join(regions, ", "))
		}
		pairs[PairKey(a, b)] = l
	}
	out := make([][]link, len(regions))
	for i := range regions {
		out[i] = make([]link, len(regions))
		for j := range regions {
			switch l, ok := pairs[PairKey(regions[i], regions[j])]; {
			case i == j:
				out[i][j] = link{n.Latency, n.Loss}
			case ok:
				out[i][j] = link{l, n.WANLoss}
			default:
				out[i][j] = link{wan, n.WANLoss}
			}
		}
	}
	return out, nil
}
