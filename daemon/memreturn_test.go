package daemon

import "testing"

// TestMemReturner: memory is returned once the rules' estimated heap fell
// by at least MemoryReturnMin and to half of its peak, and not for small
// or partial falls; the peak restarts after a return.
func TestMemReturner(t *testing.T) {
	freed := 0
	r := memReturner{free: func() { freed++ }}
	const mb = 1 << 20
	for _, step := range []struct {
		total int64
		want  bool
	}{
		{0, false},
		{300 * mb, false}, // keys created
		{200 * mb, false}, // fell by a third: not half
		{150 * mb, true},  // half of the peak, 150 MB down
		{140 * mb, false}, // the peak restarted at 150 MB
		{40 * mb, true},   // 110 MB down, under half of 150
		{20 * mb, false},  // half of 40, but 20 MB: below MemoryReturnMin
		{10 * mb, false},
	} {
		if got := r.observe(step.total); got != step.want {
			t.Errorf("observe(%d MB) = %v, want %v (peak %d MB)", step.total/mb, got, step.want, r.peak/mb)
		}
	}
	if freed != 2 {
		t.Errorf("free called %d times, want 2", freed)
	}
}
