package workload

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"strings"
	"time"
)

// Assigner picks the node index in [0, n) that receives request i. n >= 1.
//
// i is the request's index in the trace (0-based); req is not modified. Assign panics if
// n < 1. Assigners may keep state (roundrobin, random), so one Assigner must not be used
// by several goroutines at once; its answers depend only on the policy, the seed and the
// sequence of calls. Assign does not allocate.
type Assigner interface {
	Assign(req *Request, i int, n int) int
}

// Policies returns the assignment policy names accepted by [NewAssigner], in the order
// "hash", "roundrobin", "random", "key". The slice is new on every call.
func Policies() []string {
	return []string{"hash", "roundrobin", "random", "key"}
}

// NewAssigner returns the Assigner for policy:
//
//   - "hash": the traffic injector of Henriksson & Bennhage (2021, §4.3.1): the node is
//     a hash of the request's key and its arrival time in whole milliseconds, so all
//     requests of one key in the same ms go to the same node and a key's requests are
//     otherwise spread over all nodes. The hash is 64-bit FNV-1a over the key bytes
//     followed by the 8 little-endian bytes of the arrival in ms, finalized with
//     MurmurHash3's fmix64 and reduced to [0, n) by multiply-shift (the high 64 bits
//     of hash*n).
//   - "roundrobin": the k-th call (from 0) returns k mod n, whatever the request.
//   - "random": uniform in [0, n) from a PCG generator seeded with seed.
//   - "key": sticky: FNV-1a of the key bytes only, reduced like "hash", so a key always
//     goes to the same node (for a fixed n).
//
// For "hash" and "key", seed is XORed into the FNV offset basis (seed 0 gives plain
// FNV-1a), so different seeds give different but equally sticky mappings; "roundrobin"
// ignores seed. An unknown policy is an error that lists the policies.
func NewAssigner(policy string, seed uint64) (Assigner, error) {
	switch policy {
	case "hash":
		return &hashAssigner{basis: fnvOffset ^ seed}, nil
	case "roundrobin":
		return &roundRobinAssigner{}, nil
	case "random":
		return &randomAssigner{r: rand.New(rand.NewPCG(seed, streamRandom))}, nil
	case "key":
		return &keyAssigner{basis: fnvOffset ^ seed}, nil
	}
	return nil, fmt.Errorf("workload: unknown assignment policy %q (want %s)", policy, strings.Join(Policies(), ", "))
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvKey(h uint64, key string) uint64 {
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= fnvPrime
	}
	return h
}

// reduce maps a 64-bit hash to [0, n): it first mixes all bits of h into the high ones
// (the MurmurHash3 fmix64 finalizer; FNV-1a alone leaves the high bits of short,
// similar keys such as "u00001", "u00002" visibly uneven), then takes the high 64 bits
// of h*n (multiply-shift range reduction).
func reduce(h uint64, n int) int {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	hi, _ := bits.Mul64(h, uint64(n))
	return int(hi)
}

func checkN(n int) {
	if n < 1 {
		panic(fmt.Sprintf("workload: Assign with n = %d nodes; n must be >= 1", n))
	}
}

type hashAssigner struct{ basis uint64 }

func (a *hashAssigner) Assign(req *Request, _ int, n int) int {
	checkN(n)
	h := fnvKey(a.basis, req.Key)
	ms := uint64(req.Arrival / time.Millisecond)
	for range 8 {
		h ^= ms & 0xff
		h *= fnvPrime
		ms >>= 8
	}
	return reduce(h, n)
}

type keyAssigner struct{ basis uint64 }

func (a *keyAssigner) Assign(req *Request, _ int, n int) int {
	checkN(n)
	return reduce(fnvKey(a.basis, req.Key), n)
}

type roundRobinAssigner struct{ next uint64 }

func (a *roundRobinAssigner) Assign(_ *Request, _ int, n int) int {
	checkN(n)
	k := a.next % uint64(n)
	a.next++
	return int(k)
}

type randomAssigner struct{ r *rand.Rand }

func (a *randomAssigner) Assign(_ *Request, _ int, n int) int {
	checkN(n)
	return a.r.IntN(n)
}
