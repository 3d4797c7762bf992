// Package memtest measures the Go heap a strategy's state takes, for the
// tests that hold a strategy.MemoryReporter to it: the growth of
// runtime.MemStats.HeapAlloc (live bytes after a full runtime.GC) across
// building the state. Test support only.
package memtest

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
)

// Tolerance is how far an estimate may be from the measured heap growth:
// within 20% (issue 28: tokenmesh_state_bytes within 20% of the heap the
// rule holds).
const Tolerance = 0.20

// Keys is the number of keys a memory test creates: 100,000, or
// TOKENMESH_MEMKEYS when set (e.g. 1000000 for docs/PERFORMANCE.md).
func Keys(t testing.TB) int {
	s := os.Getenv("TOKENMESH_MEMKEYS")
	if s == "" {
		return 100_000
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("TOKENMESH_MEMKEYS=%q: want a positive number", s)
	}
	return n
}

// Names returns n distinct keys "tenant-<i>" (allocated before a
// measurement; a strategy keeps its own copy, see Copy).
func Names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "tenant-" + strconv.Itoa(i)
	}
	return out
}

// Copy is s in an allocation of its own, as a key decoded from a request
// or a peer message is.
func Copy(s string) string { return string([]byte(s)) }

// HeapAlloc is the live heap after a full collection, in bytes.
func HeapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// Growth is the live heap's growth across build, in bytes (negative when
// it shrank).
func Growth(build func()) float64 {
	before := HeapAlloc()
	build()
	return float64(HeapAlloc()) - float64(before)
}

// Compare logs estimate against the measured growth and fails t when it
// is more than Tolerance away from it.
func Compare(t testing.TB, what string, estimate int, growth float64) {
	t.Helper()
	r := float64(estimate) / growth
	t.Logf("%s: heap +%.2f MB, estimate %.2f MB (ratio %.3f)", what, growth/1e6, float64(estimate)/1e6, r)
	if r < 1-Tolerance || r > 1+Tolerance || growth <= 0 {
		t.Errorf("%s: estimate %d B is %.2f times the heap growth %.0f B; want within %.0f%%", what, estimate, r, growth, 100*Tolerance)
	}
}

// Sprint formats bytes as MB for logs.
func Sprint(b float64) string { return fmt.Sprintf("%.2f MB", b/1e6) }
