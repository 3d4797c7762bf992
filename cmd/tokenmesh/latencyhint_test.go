package main

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// cannedMetrics answers /metrics texts by node; an empty text is an error.
type cannedMetrics []string

func (c cannedMetrics) Metrics(_ context.Context, i int) (string, error) {
	if c[i] == "" {
		return "", errors.New("connection refused")
	}
	return c[i], nil
}

// reportHints prints a measured peer latency only where the node measures
// one: a fixed hint (the default 0s) has no tokenmesh_peer_latency_seconds,
// and printing it as "up to 0s" read as a measured 0.
func TestReportHints(t *testing.T) {
	measured := "# TYPE tokenmesh_latency_hint_seconds gauge\ntokenmesh_latency_hint_seconds 0.002\n" +
		"# TYPE tokenmesh_peer_latency_seconds gauge\ntokenmesh_peer_latency_seconds{peer=\"n1\"} 0.0004\ntokenmesh_peer_latency_seconds{peer=\"n2\"} 0.0009\n"
	fixed := "# TYPE tokenmesh_latency_hint_seconds gauge\ntokenmesh_latency_hint_seconds 0\n"
	var b strings.Builder
	reportHints(context.Background(), &b, "owner", cannedMetrics{measured, fixed, ""}, 3)
	got := b.String()
	for _, want := range []string{
		"tokenmesh: owner: latency hint at the end: ",
		"n0 2ms (peers' p90 one-way up to 900µs)",
		"n1 0s (fixed: peers' latency not measured)",
		"n2 unknown (connection refused)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("reportHints printed %q, want it to contain %q", got, want)
		}
	}
}
