package limiter

// Benchmarks of one keyed decision in process (issue
// 26, item 1): tokenmesh's Limiter.Allow against golang.org/x/time/rate's
// limiters kept in a keyed map (the two ways Go users write it: a map
// under a mutex, and a sync.Map), on 10k keys and on one hot key,
// sequential (-cpu 1) and with b.RunParallel (-cpu 1,2). Every check is
// admitted (a rate and burst of 1e9 per key), as in the service
// measurements; the Refill and Refused benchmarks take the other two
// paths of a lent bucket (local, static): a check the key's allowance
// cannot cover refills the bucket in the caller's goroutine, and a key
// over its limit is refused there. Besides ns/op (wall) they report
// cpu-ns/op: the process's CPU time per op (all threads: the node's loop
// included), steadier on a shared machine.
//
//	go test -run '^$' -bench 'Allow' -benchmem -cpu 1,2 -count 5 ./limiter

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rule"
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

type benchShape struct {
	name string
	keys int
}

var benchShapes = []benchShape{{"keys=10k", 10000}, {"keys=1", 1}}

// allowFunc is one keyed decision.
type allowFunc func(key string) bool

// runDecide runs allow over keys: sequentially, or with b.RunParallel (each
// goroutine starting at its own offset). Every check must be admitted (want
// true) or every one refused (want false): a check that is not fails the
// benchmark, or the numbers would compare different work.
func runDecide(b *testing.B, keys []string, parallel, want bool, allow allowFunc) {
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
	switch r := refused.Load(); {
	case want && r > 0:
		b.Fatalf("%d of %d checks refused; every one should be admitted", r, b.N)
	case !want && r < int64(b.N):
		b.Fatalf("%d of %d checks admitted; every one should be refused", int64(b.N)-r, b.N)
	}
}

// benchLimiter runs Limiter.Allow of a single node under strategy.
func benchLimiter(b *testing.B, strat string, parallel bool) {
	benchLimiterAt(b, strat, parallel, perSec(benchRate), benchBurst, true, benchShapes)
}

// benchLimiterAt is benchLimiter with the rule's rate and burst per key,
// every check admitted (want) or refused, over shapes.
func benchLimiterAt(b *testing.B, strat string, parallel bool, r bucket.Rate, burst int64, want bool, shapes []benchShape) {
	for _, sh := range shapes {
		n, err := Start(context.Background(), Config{Name: "bench", Rules: []rule.Rule{{Name: "api", Rate: r, Burst: burst, Strategy: strat}}})
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
		b.Run("strategy="+strat+"/"+sh.name, func(b *testing.B) { runDecide(b, keys, parallel, want, l.Allow) })
		n.Close()
	}
}

// mutexMap is x/time/rate's limiters in a map under a mutex.
type mutexMap struct {
	mu    sync.Mutex
	m     map[string]*rate.Limiter
	limit rate.Limit
	burst int
}

func (mm *mutexMap) allow(key string) bool {
	mm.mu.Lock()
	l, ok := mm.m[key]
	if !ok {
		l = rate.NewLimiter(mm.limit, mm.burst)
		mm.m[key] = l
	}
	mm.mu.Unlock()
	return l.Allow()
}

// syncMap is x/time/rate's limiters in a sync.Map.
type syncMap struct {
	m     sync.Map
	limit rate.Limit
	burst int
}

func (sm *syncMap) allow(key string) bool {
	v, ok := sm.m.Load(key)
	if !ok {
		v, _ = sm.m.LoadOrStore(key, rate.NewLimiter(sm.limit, sm.burst))
	}
	return v.(*rate.Limiter).Allow()
}

// benchXRate runs x/time/rate in both keyed maps.
func benchXRate(b *testing.B, parallel bool) {
	benchXRateAt(b, parallel, benchRate, benchBurst, true, benchShapes)
}

// benchXRateAt is benchXRate with limiters of limit (tokens/s) and burst,
// every check admitted (want) or refused, over shapes.
func benchXRateAt(b *testing.B, parallel bool, limit rate.Limit, burst int, want bool, shapes []benchShape) {
	for _, sh := range shapes {
		keys := benchKeys(sh.keys)
		mm := &mutexMap{m: map[string]*rate.Limiter{}, limit: limit, burst: burst}
		sm := &syncMap{limit: limit, burst: burst}
		for range 2 { // the second pass empties the buckets of burst 1 (Refused)
			for _, k := range keys {
				mm.allow(k)
				sm.allow(k)
			}
		}
		b.Run("xrate=mutexmap/"+sh.name, func(b *testing.B) { runDecide(b, keys, parallel, want, mm.allow) })
		b.Run("xrate=syncmap/"+sh.name, func(b *testing.B) { runDecide(b, keys, parallel, want, sm.allow) })
	}
}

// BenchmarkLimiterAllow is one Limiter.Allow per op, sequential: local and
// static are decided on the fast path (a lent bucket), owner, lease,
// adaptive and gdrl from allowances of the key's bucket, pool or share
// (at one node every key is the node's own); gcounter, with no fast path,
// decides every check in the node's loop (the cost of the hand-off);
// against x/time/rate.
func BenchmarkLimiterAllow(b *testing.B) {
	for _, s := range []string{"local", "static", "owner", "lease", "adaptive", "gdrl", "gcounter"} {
		benchLimiter(b, s, false)
	}
	benchXRate(b, false)
}

// BenchmarkLimiterAllowParallel is BenchmarkLimiterAllow under
// b.RunParallel (GOMAXPROCS goroutines: run it with -cpu 2).
func BenchmarkLimiterAllowParallel(b *testing.B) {
	for _, s := range []string{"local", "static", "owner", "lease", "adaptive", "gdrl"} {
		benchLimiter(b, s, true)
	}
	benchXRate(b, true)
}

// refillRate is a rate at which an allowance holds no token
// (strategy.AllowanceCap is 0 below 200/s), with a burst no benchmark
// empties: every check of a key is decided by refilling its lent bucket,
// in the caller's goroutine (the key's mutex, one clock read), admitted.
var refillRate = bucket.Rate{Tokens: 100, Per: time.Second}

const refillBurst = 1e9

// refusedRate refills a key's bucket of burst 1 in an hour: after its
// first check every check of a key is refused.
var refusedRate = bucket.Rate{Tokens: 1, Per: time.Hour}

var tenK = []benchShape{{"keys=10k", 10000}}

// BenchmarkLimiterAllowRefill is one Limiter.Allow per op at a rate whose
// allowances hold no token (100/s per key, burst 1e9): local and static
// decide every check by refilling the key's lent bucket in the caller's
// goroutine, without the node's loop; against x/time/rate at the same
// rate and burst. Run it with -cpu 1,2.
func BenchmarkLimiterAllowRefill(b *testing.B) {
	for _, s := range []string{"local", "static"} {
		benchLimiterAt(b, s, true, refillRate, refillBurst, true, tenK)
	}
	benchXRateAt(b, true, rate.Limit(refillRate.PerSec()), refillBurst, true, tenK)
}

// BenchmarkLimiterAllowRefused is one Limiter.Allow per op on keys over
// their limit (burst 1, one token an hour): every check is refused, by
// local and static in the caller's goroutine from the key's lent bucket
// (before lent buckets, each refusal was a round trip through the node's
// loop), by adaptive and gdrl in the caller's goroutine while the key's refusal
// window lasts (strategy.Refuser: at most 5 ms, so only a key checked
// more often than that, as the single hot key is, gains); against
// x/time/rate refusing. Run it with -cpu 1,2.
func BenchmarkLimiterAllowRefused(b *testing.B) {
	shapes := []benchShape{{"keys=1", 1}, {"keys=10k", 10000}}
	for _, s := range []string{"local", "static", "adaptive", "gdrl"} {
		benchLimiterAt(b, s, true, refusedRate, 1, false, shapes)
	}
	benchXRateAt(b, true, rate.Limit(refusedRate.PerSec()), 1, false, shapes)
}
