//go:build !linux

package limiter

// processCPU is unknown here (-1): the benchmarks report wall time only.
func processCPU() int64 { return -1 }
