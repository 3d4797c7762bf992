package sim

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"
)

// maxSampleFileBytes bounds a samples file (about 4 million lines).
const maxSampleFileBytes = 64 << 20

// samples is a measured latency distribution: draws pick one of the
// values uniformly (Latency's "samples" kind).
type samples struct {
	source string          // the file, for String
	d      []time.Duration // sorted
}

// ReadLatencySamples reads a measured latency distribution: one duration
// per line in Go's syntax ("0.25ms", "310µs"), blank lines and lines
// starting with '#' skipped; source names the input in errors and in the
// latency's String ("samples:" + source). At least one value, none
// negative. Errors name the line.
func ReadLatencySamples(source string, r io.Reader) (Latency, error) {
	sc := bufio.NewScanner(r)
	var d []time.Duration
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		v, err := time.ParseDuration(text)
		if err != nil || v < 0 {
			return Latency{}, fmt.Errorf("latency samples %s:%d: %q is not a non-negative duration (e.g. 0.25ms)", source, line, text)
		}
		d = append(d, v)
	}
	if err := sc.Err(); err != nil {
		return Latency{}, fmt.Errorf("latency samples %s: %w", source, err)
	}
	if len(d) == 0 {
		return Latency{}, fmt.Errorf("latency samples %s: no values", source)
	}
	slices.Sort(d)
	var sum float64
	for _, v := range d {
		sum += float64(v)
	}
	mean := min(max(time.Duration(sum/float64(len(d))), d[0]), d[len(d)-1])
	return Latency{Kind: "samples", Min: d[0], Max: d[len(d)-1], Mean: mean, samples: &samples{source: source, d: d}}, nil
}

// readSampleFile is ParseLatency's "samples:FILE".
func readSampleFile(path string) (Latency, error) {
	f, err := os.Open(path)
	if err != nil {
		return Latency{}, fmt.Errorf("latency samples: %w", err)
	}
	defer f.Close()
	return ReadLatencySamples(path, io.LimitReader(f, maxSampleFileBytes))
}

func (s *samples) draw(r *rand.Rand) time.Duration { return s.d[r.IntN(len(s.d))] }

// p99 is the 99th percentile (nearest rank) of the samples.
func (s *samples) p99() time.Duration { return s.d[(len(s.d)*99+99)/100-1] }
