package cluster

import (
	"runtime"
	_ "unsafe" // go:linkname
)

// The calling goroutine's P, for the fast path's per-P counters
// (fastShard). runtime.procPin returns the id of the P the goroutine
// runs on (and keeps it there until procUnpin); sync.Pool and
// sync/atomic.Value use it for the same purpose. It is not exported, but
// the runtime marks it as reachable by linkname and promises not to
// change it ("Do not remove or change the type signature", go.dev/issue/67401).
// The id is a hint: the goroutine may move to another P right after
// procUnpin, which costs a cache line shared between two cores for a
// while, never a wrong decision (every counter is atomic).

//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()

// procID is the id of the P the caller runs on now, in [0, GOMAXPROCS).
func procID() int {
	p := procPin()
	procUnpin()
	return p
}

// fastMaxShards bounds the counters one key's lent bucket is split over
// (fastShards): each takes a pair of cache lines (fastShard).
const fastMaxShards = 8

// fastShards is the number of per-P counters a lent bucket's entry gets:
// GOMAXPROCS rounded up to a power of two, at most fastMaxShards (Ps
// beyond share counters: id & (shards-1)).
func fastShards() int {
	n := 1
	for n < min(runtime.GOMAXPROCS(0), fastMaxShards) {
		n <<= 1
	}
	return n
}
