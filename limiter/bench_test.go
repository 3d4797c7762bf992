package limiter

// Benchmarks of one keyed decision in process (issue 14, part 1):
// tokenmesh's Limiter.Allow against golang.org/x/time/rate's limiters kept
// in a keyed map (the two ways Go users write it: a map under a mutex, and
// a sync.Map), on 10k keys and on one hot key, sequential (-cpu 1) and
// with b.RunParallel (-cpu 2). Every check is admitted (a rate and burst
// of 1e9 per key), as in the service measurements. Besides ns/op
// (wall) they report cpu-ns/op: the process's CPU time per op (all
// threads: the node's loop included), steadier on a shared machine.
//
//	go test -run '^$' -bench 'Allow' -benchmem -cpu 1,2 -count 3 ./limiter

import (
	"context"
	"github.com/tokenmesh/tokenmesh/rule"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/time/rate"
)

const (
	benchRate  = 1e9 // tokens/s per key: every check is admitted
	benchBurst = 1e9
)

// benchKeys returns n keys ("user-0", ...); one key for n = 1.
func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	return keys
}

var benchShapes = []struct {
	name string
	keys int
}{{"keys=10k", 10000}, {"keys=1", 1}}

// allowFunc is one keyed decision.
type allowFunc func(key string) bool

// runAllow runs allow over keys: sequentially, or with b.RunParallel (each
// goroutine starting at its own offset). A refusal fails the benchmark
// (every check must be admitted, or the numbers compare different work).
func runAllow(b *testing.B, keys []string, parallel bool, allow allowFunc) {
	b.ReportAllocs()
	var refused atomic.Int64
	cpu0 := processCPU()
	if !parallel {
		b.ResetTimer()
		j := 0
		for range b.N {
			if !allow(keys[j]) {
				refused.Add(1)
			}
			if j++; j == len(keys) {
				j = 0
			}
		}
	} else {
		var offset atomic.Int64
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			j := int(offset.Add(7919)) % len(keys)
			for pb.Next() {
				if !allow(keys[j]) {
					refused.Add(1)
				}
				if j++; j == len(keys) {
					j = 0
				}
			}
		})
	}
	b.StopTimer()
	if cpu1 := processCPU(); cpu0 >= 0 && cpu1 >= 0 && b.N > 0 {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
	}
	if r := refused.Load(); r > 0 {
		b.Fatalf("%d of %d checks refused; every one should be admitted", r, b.N)
	}
}

// benchLimiter runs Limiter.Allow of a single node under strategy.
func benchLimiter(b *testing.B, strat string, parallel bool) {
	for _, sh := range benchShapes {
		n, err := Start(context.Background(), Config{Name: "bench", Rules: []rule.Rule{{Name: "api", Rate: perSec(benchRate), Burst: benchBurst, Strategy: strat}}})
		if err != nil {
			b.Fatal(err)
		}
		l, err := n.Limiter("api")
		if err != nil {
			b.Fatal(err)
		}
		keys := benchKeys(sh.keys)
		for range 3 { // warm up: every key decided (and given its allowance) once
			for _, k := range keys {
				l.Allow(k)
			}
		}
		b.Run("strategy="+strat+"/"+sh.name, func(b *testing.B) { runAllow(b, keys, parallel, l.Allow) })
		n.Close()
	}
}

// mutexMap is x/time/rate's limiters in a map under a mutex.
type mutexMap struct {
	mu sync.Mutex
	m  map[string]*rate.Limiter
}

func (mm *mutexMap) allow(key string) bool {
	mm.mu.Lock()
	l, ok := mm.m[key]
	if !ok {
		l = rate.NewLimiter(benchRate, benchBurst)
		mm.m[key] = l
	}
	mm.mu.Unlock()
	return l.Allow()
}

// syncMap is x/time/rate's limiters in a sync.Map.
type syncMap struct{ m sync.Map }

func (sm *syncMap) allow(key string) bool {
	v, ok := sm.m.Load(key)
	if !ok {
		v, _ = sm.m.LoadOrStore(key, rate.NewLimiter(benchRate, benchBurst))
	}
	return v.(*rate.Limiter).Allow()
}

// benchXRate runs x/time/rate in both keyed maps.
func benchXRate(b *testing.B, parallel bool) {
	for _, sh := range benchShapes {
		keys := benchKeys(sh.keys)
		mm := &mutexMap{m: map[string]*rate.Limiter{}}
		sm := &syncMap{}
		for _, k := range keys {
			mm.allow(k)
			sm.allow(k)
		}
		b.Run("xrate=mutexmap/"+sh.name, func(b *testing.B) { runAllow(b, keys, parallel, mm.allow) })
		b.Run("xrate=syncmap/"+sh.name, func(b *testing.B) { runAllow(b, keys, parallel, sm.allow) })
	}
}

// BenchmarkLimiterAllow is one Limiter.Allow per op, sequential: local and
// static are decided on the fast path (an allowance), owner through the
// node's event loop (the cost before the fast path), against x/time/rate.
func BenchmarkLimiterAllow(b *testing.B) {
	for _, s := range []string{"local", "static", "owner"} {
		benchLimiter(b, s, false)
	}
	benchXRate(b, false)
}

// BenchmarkLimiterAllowParallel is BenchmarkLimiterAllow under
// b.RunParallel (GOMAXPROCS goroutines: run it with -cpu 2).
func BenchmarkLimiterAllowParallel(b *testing.B) {
	for _, s := range []string{"local", "static", "owner"} {
		benchLimiter(b, s, true)
	}
	benchXRate(b, true)
}
