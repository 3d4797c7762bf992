package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/tokenmesh/tokenmesh/cluster"
)

// LatencyHint is node.latency_hint: a fixed one-way peer latency (the zero
// value: 0s, the default) or measured (auto).
type LatencyHint struct {
	// Auto is true for "auto": measured from gossip's probe round trips
	// (cluster.LatencyEstimator); false: Value, fixed.
	Auto bool
	// Value is the fixed hint (not Auto), in [0, cluster.MaxLatencyHint].
	Value time.Duration
}

// ParseLatencyHint reads node.latency_hint: "auto" or a Go duration
// ("0s", "2ms") in [0, cluster.MaxLatencyHint]. Errors name the value.
func ParseLatencyHint(s string) (LatencyHint, error) {
	s = strings.TrimSpace(s)
	if s == "auto" {
		return LatencyHint{Auto: true}, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return LatencyHint{}, fmt.Errorf("%q is neither auto nor a duration (forms: auto, 2ms, 0s)", s)
	}
	h := LatencyHint{Value: d}
	return h, h.validate()
}

func (h LatencyHint) validate() error {
	if !h.Auto && (h.Value < 0 || h.Value > cluster.MaxLatencyHint) {
		return fmt.Errorf("%v is outside [0, %v]", h.Value, cluster.MaxLatencyHint)
	}
	return nil
}

// String is "auto" or the fixed duration.
func (h LatencyHint) String() string {
	if h.Auto {
		return "auto"
	}
	return h.Value.String()
}
