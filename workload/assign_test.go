package workload

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/bits"
	"strings"
	"testing"
	"time"
)

func mustAssigner(t testing.TB, policy string, seed uint64) Assigner {
	t.Helper()
	a, err := NewAssigner(policy, seed)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestPolicies(t *testing.T) {
	if got := strings.Join(Policies(), ","); got != "hash,roundrobin,random,key" {
		t.Errorf("Policies() = %s", got)
	}
	_, err := NewAssigner("sticky", 0)
	if err == nil || err.Error() != `workload: unknown assignment policy "sticky" (want hash, roundrobin, random, key)` {
		t.Errorf("got %v", err)
	}
	for _, p := range Policies() {
		a := mustAssigner(t, p, 0)
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "n must be >= 1") {
					t.Errorf("%s: Assign with n=0 did not panic clearly: %v", p, r)
				}
			}()
			a.Assign(&Request{Key: "k", Tokens: 1}, 0, 0)
		}()
	}
}

// refHash is the documented hash computed independently: hash/fnv, fmix64, multiply-shift.
func refHash(key string, arrival time.Duration, n int, withTime bool) int {
	h := fnv.New64a()
	h.Write([]byte(key))
	if withTime {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(arrival/time.Millisecond))
		h.Write(b[:])
	}
	x := h.Sum64()
	x = (x ^ x>>33) * 0xff51afd7ed558ccd
	x = (x ^ x>>33) * 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	hi, _ := bits.Mul64(x, uint64(n))
	return int(hi)
}

func TestHashMatchesFNV(t *testing.T) {
	hash, key := mustAssigner(t, "hash", 0), mustAssigner(t, "key", 0)
	for i := range 2000 {
		r := Request{Arrival: time.Duration(i*7919) * ms, Key: fmt.Sprintf("h%x", i*31), Tokens: 1}
		for _, n := range []int{1, 2, 3, 7, 64, 1000} {
			if got, want := hash.Assign(&r, i, n), refHash(r.Key, r.Arrival, n, true); got != want {
				t.Fatalf("hash %+v n=%d: %d, want %d", r, n, got, want)
			}
			if got, want := key.Assign(&r, i, n), refHash(r.Key, 0, n, false); got != want {
				t.Fatalf("key %+v n=%d: %d, want %d", r, n, got, want)
			}
		}
	}
	// A different seed gives a different mapping.
	other, same := mustAssigner(t, "hash", 1), 0
	for i := range 1000 {
		r := Request{Arrival: time.Duration(i) * ms, Key: "k", Tokens: 1}
		if other.Assign(&r, i, 16) == hash.Assign(&r, i, 16) {
			same++
		}
	}
	if same > 150 {
		t.Errorf("seed 1 agrees with seed 0 on %d/1000 requests", same)
	}
}

// chi2 returns the chi-squared statistic of counts against a uniform distribution.
func chi2(counts []int) float64 {
	total := 0
	for _, c := range counts {
		total += c
	}
	exp := float64(total) / float64(len(counts))
	var x float64
	for _, c := range counts {
		x += (float64(c) - exp) * (float64(c) - exp) / exp
	}
	return x
}

func TestAssignUniform(t *testing.T) {
	const n, reqs = 7, 70000
	// Keys like the real traces: one key over consecutive ms, and many keys at one ms.
	// The chi-squared statistic with 6 degrees of freedom exceeds 30 with p < 5e-5.
	for _, p := range []string{"hash", "random"} {
		for _, pattern := range []string{"one key, consecutive ms", "many keys, one ms", "many keys, 1s steps"} {
			a := mustAssigner(t, p, 0)
			counts := make([]int, n)
			for i := range reqs {
				r := Request{Key: "h14b2a393c5947a93", Tokens: 1}
				switch pattern {
				case "one key, consecutive ms":
					r.Arrival = time.Duration(i) * ms
				case "many keys, one ms":
					r.Key = fmt.Sprintf("h%016x", i)
				default:
					r.Key = fmt.Sprintf("u%04d", i%500)
					r.Arrival = time.Duration(i/500) * time.Second
				}
				counts[a.Assign(&r, i, n)]++
			}
			if x := chi2(counts); x > 30 {
				t.Errorf("%s, %s: counts %v, chi2 %.1f", p, pattern, counts, x)
			}
		}
	}
	// key: many keys spread evenly.
	a := mustAssigner(t, "key", 0)
	counts := make([]int, n)
	for i := range reqs {
		counts[a.Assign(&Request{Key: fmt.Sprintf("u%05d", i), Tokens: 1}, i, n)]++
	}
	if x := chi2(counts); x > 30 {
		t.Errorf("key: counts %v, chi2 %.1f", counts, x)
	}
}

func TestAssignBehaviour(t *testing.T) {
	r := func(key string, at int) *Request {
		return &Request{Key: key, Arrival: time.Duration(at) * ms, Tokens: 1}
	}

	rr := mustAssigner(t, "roundrobin", 9)
	var got []int
	for i := range 7 {
		got = append(got, rr.Assign(r("a", 0), 100-i, 3))
	}
	if fmt.Sprint(got) != "[0 1 2 0 1 2 0]" {
		t.Errorf("roundrobin: %v", got)
	}
	if v := rr.Assign(r("a", 0), 0, 5); v != 2 { // counter 7 mod 5
		t.Errorf("roundrobin after n change: %d", v)
	}

	// random: deterministic per seed, differs across seeds.
	seq := func(seed uint64) string {
		a := mustAssigner(t, "random", seed)
		var b strings.Builder
		for i := range 50 {
			fmt.Fprint(&b, a.Assign(r("a", 0), i, 10), " ")
		}
		return b.String()
	}
	if seq(1) != seq(1) || seq(1) == seq(2) {
		t.Errorf("random: %s / %s", seq(1), seq(2))
	}

	// hash: same key and ms -> same node; sub-ms differences do not matter.
	h := mustAssigner(t, "hash", 0)
	a1 := h.Assign(&Request{Key: "k", Arrival: 5*ms + 300*time.Microsecond, Tokens: 1}, 0, 16)
	if a2 := h.Assign(r("k", 5), 1, 16); a1 != a2 {
		t.Errorf("hash: same ms, nodes %d and %d", a1, a2)
	}
	nodes := map[int]bool{}
	for at := range 200 {
		nodes[h.Assign(r("k", at), at, 16)] = true
	}
	if len(nodes) < 14 {
		t.Errorf("hash: one key over 200 ms reached only %d of 16 nodes", len(nodes))
	}

	// key: sticky whatever the time and index.
	k := mustAssigner(t, "key", 0)
	first := k.Assign(r("k", 0), 0, 16)
	for at := range 200 {
		if k.Assign(r("k", at*997), at, 16) != first {
			t.Fatal("key policy is not sticky")
		}
	}
	// n = 1 always gives node 0.
	for _, p := range Policies() {
		a := mustAssigner(t, p, 3)
		for i := range 10 {
			if v := a.Assign(r("x", i), i, 1); v != 0 {
				t.Errorf("%s with n=1: %d", p, v)
			}
		}
	}
}

func TestAssignAllocs(t *testing.T) {
	req := &Request{Key: "h14b2a393c5947a93", Arrival: 1234 * ms, Tokens: 1}
	for _, p := range Policies() {
		a := mustAssigner(t, p, 1)
		i := 0
		if allocs := testing.AllocsPerRun(1000, func() { a.Assign(req, i, 7); i++ }); allocs != 0 {
			t.Errorf("%s: %v allocations per Assign", p, allocs)
		}
	}
}
