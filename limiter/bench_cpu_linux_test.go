package limiter

import "syscall"

// processCPU is the CPU time this process used so far (user + system), in
// nanoseconds, or -1 when unknown. The benchmarks report it per op
// (cpu-ns/op) beside the wall time: on a loaded machine the wall time
// counts the time the benchmark waited for a core, the CPU time does not.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
