package gdrl

import (
	"testing"

	"pgregory.net/rapid"
)

// TestResponseFlowTowardsLongerWait: under the response indicator the flow
// from j to i (responseFlow) goes towards the end whose requests wait
// longer (001 eq. (3): q larger is worse), is antisymmetric, is 0 when the
// waits are equal, and is at most eta times the pair's smaller share.
func TestResponseFlowTowardsLongerWait(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		eta := rapid.Float64Range(0.01, 0.25).Draw(t, "eta")
		i := side{c: rapid.Int64Range(0, 1e9).Draw(t, "ci"), ind: rapid.Float64Range(0, 30).Draw(t, "qi")}
		j := side{c: rapid.Int64Range(0, 1e9).Draw(t, "cj"), ind: rapid.Float64Range(0, 30).Draw(t, "qj")}
		f, _ := responseFlow(i, j, eta, 1, 0)
		g, _ := responseFlow(j, i, eta, 1, 0)
		bound := eta * max(float64(min(i.c, j.c)), 1)
		switch {
		case f != -g:
			t.Fatalf("flow %v one way, %v the other", f, g)
		case i.ind > j.ind && f <= 0, i.ind < j.ind && f >= 0, i.ind == j.ind && f != 0:
			t.Fatalf("waits %v at i, %v at j: flow %v from j to i", i.ind, j.ind, f)
		case f > bound*(1+1e-12) || f < -bound*(1+1e-12):
			t.Fatalf("flow %v beyond eta * smaller share %v", f, bound)
		}
	})
}
