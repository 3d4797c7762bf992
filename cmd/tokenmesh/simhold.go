package main

import (
	"time"

	"github.com/tokenmesh/tokenmesh/sim"
)

// parseHold reads --hold: "" (no holds), a fixed duration ("100ms") or
// "uniform:MIN-MAX", as sim.Hold; durations positive and at most an hour.
// Errors name the flag and the forms.
func parseHold(s string) (sim.Hold, error) {
	if s == "" {
		return sim.Hold{}, nil
	}
	l, err := sim.ParseLatency(s)
	if err != nil {
		return sim.Hold{}, usageErr("--hold: %v", err)
	}
	var h sim.Hold
	switch l.Kind {
	case "fixed":
		h = sim.Hold{Min: l.Mean, Max: l.Mean}
	case "uniform":
		h = sim.Hold{Min: l.Min, Max: l.Max}
	default:
		return sim.Hold{}, usageErr("--hold %s: want a fixed service time (100ms) or uniform:50ms-200ms", s)
	}
	if h.Max <= 0 || h.Max > time.Hour {
		return sim.Hold{}, usageErr("--hold %s: want a service time above 0 and at most 1h", s)
	}
	return h, nil
}
