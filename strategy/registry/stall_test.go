package registry

import (
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/internal/minheap"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// stallKeys is the number of keys BenchmarkLoopStalls creates: 100,000, or
// TOKENMESH_STALLKEYS (e.g. 1000000 for docs/PERFORMANCE.md).
func stallKeys(b *testing.B) int {
	s := os.Getenv("TOKENMESH_STALLKEYS")
	if s == "" {
		return 100_000
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		b.Fatalf("TOKENMESH_STALLKEYS=%q: want a positive number", s)
	}
	return n
}

// stallRun drives one strategy as the node's loop does (cluster/loop.go):
// calls at the wake-up times it asks for, and records how long the
// longest single call held the loop.
type stallRun struct {
	s     strategy.Strategy
	fx    strategy.Effects
	wakes *minheap.Heap[time.Duration]
	now   time.Duration

	maxTick   time.Duration // the longest single Tick, wall clock
	maxTickAt time.Duration // its strategy time
	ticks     int
	took      []time.Duration // every Tick's wall time, for the percentiles
	cpu       []time.Duration // every Tick's CPU time on the loop's thread

	// A strategy.ChangeSnapshotter's SnapshotFull, and SnapshotChanges
	// after 1% of the keys were checked again (stallChanges): wall and
	// thread CPU time, and the keys the latter reported.
	full, fullCPU, changes, changesCPU time.Duration
	changed                            int
}

// stallChanges times, at r.now, a SnapshotFull of cs (every key: the
// snapshot a node takes at its start, after a reload or an error, and
// when its store compacts), then checks 1% of the keys again (drawn at
// random, a wake-up's ticks run so that owner decides them) and times the
// SnapshotChanges that follows (the snapshot a node takes every second
// between: cluster.Node.SnapshotChanges).
func stallChanges(b *testing.B, r *stallRun, cs strategy.ChangeSnapshotter, names []string) {
	states := make([]strategy.KeyState, 0, len(names))
	emit := func(st strategy.KeyState) { states = append(states, st) }
	start, cpu := time.Now(), threadCPU()
	cs.SnapshotFull(r.now, emit)
	r.full, r.fullCPU = time.Since(start), threadCPU()-cpu
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range len(names) / 100 {
		r.s.Request(r.now, strategy.Request{ID: uint64(len(names) + 1 + i), Key: names[rng.IntN(len(names))], Tokens: 1, Arrival: r.now}, &r.fx)
		r.collect()
	}
	at := r.now
	r.tickUntil(r.now + 50*time.Millisecond) // owner's ordering buffer
	states = states[:0]
	gone := 0
	start, cpu = time.Now(), threadCPU()
	ok := cs.SnapshotChanges(at, emit, func(string) { gone++ })
	r.changes, r.changesCPU = time.Since(start), threadCPU()-cpu
	if !ok {
		b.Fatal("SnapshotChanges after SnapshotFull reported false")
	}
	r.changed = len(states) + gone
	runtime.KeepAlive(states)
}

// threadCPU is the CPU time the calling OS thread has used
// (CLOCK_THREAD_CPUTIME_ID): unlike the wall clock it does not count the
// time the thread waited for a core on a loaded machine.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

func (r *stallRun) collect() {
	for _, w := range r.fx.Wakeups {
		r.wakes.Push(w)
	}
	r.fx.Reset()
}

// tickUntil runs every wake-up due up to end (one Tick per instant, as
// runDue does), timing each Tick; at most 1e6 ticks.
func (r *stallRun) tickUntil(end time.Duration) {
	for r.wakes.Len() > 0 && r.wakes.Peek() <= end && r.ticks < 1_000_000 {
		at := max(r.wakes.Pop(), r.now)
		for r.wakes.Len() > 0 && r.wakes.Peek() <= at {
			r.wakes.Pop()
		}
		r.now = at
		start, cpu := time.Now(), threadCPU()
		r.s.Tick(at, &r.fx)
		d := time.Since(start)
		r.cpu = append(r.cpu, threadCPU()-cpu)
		if d > r.maxTick {
			r.maxTick, r.maxTickAt = d, at
		}
		r.took = append(r.took, d)
		r.ticks++
		r.collect()
	}
	r.now = max(r.now, end)
}

// timed is how long f held the loop.
func timed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}

// BenchmarkLoopStalls measures, for every strategy at one node (its own
// owner) with TOKENMESH_STALLKEYS keys (100k by default; rate 10/s, burst
// 20: a key is full again 2 s after its request), the longest the node's
// event loop is held by one call that may do work in proportion to the
// keys: a Tick, over the 3 minutes after the keys were created (every
// expiry sweep and timer; ticked at the wake-ups the strategy asks for,
// as cluster/loop.go's runDue does); the metrics' read (MemoryBytes, or
// StateBytes without an estimate, and CapacityShares: the scrape's part
// in the loop, server/metrics.go); and a Snapshot (cluster/snapshot.go,
// every Snapshotter, once a second on a node with a state_dir). Reported
// per strategy: max-tick-ms (and at which second after the load), the
// second longest and the 99th percentile of the Ticks (2nd-tick-ms,
// p99-tick-ms: a GC pause that hits one Tick shows in max alone), peek-ms,
// snapshot-ms, and the estimate left after the 3 minutes (keys expired);
// for a strategy.ChangeSnapshotter also a SnapshotFull and, after 1% of
// the keys were checked again, a SnapshotChanges (snapshot-full-ms,
// snapshot-changes-ms, their -cpu-ms in the thread's CPU time, and the
// keys the latter reported, snapshot-changes-keys: stallChanges).
// Run: TOKENMESH_STALLKEYS=1000000 go test -run XXX -bench BenchmarkLoopStalls -benchtime=1x ./strategy/registry
// (one strategy: -bench 'BenchmarkLoopStalls/owner$'). Times are wall
// clock on a shared machine: a max includes any GC pause or assist that
// hit it, and the time the loop's thread waited for a core;
// max-tick-cpu-ms is the longest Tick in CPU time of the thread (it
// counts neither), the measure that does not depend on the machine's
// load. TOKENMESH_STALLGC=off turns the collector off for the ticks
// (no assist in the Tick's CPU time either).
func BenchmarkLoopStalls(b *testing.B) {
	n := stallKeys(b)
	names := make([]string, n)
	for i := range names {
		names[i] = "tenant-" + strconv.Itoa(i)
	}
	for _, info := range List() {
		b.Run(info.Name, func(b *testing.B) {
			for range b.N {
				stallOne(b, info, names)
			}
		})
	}
}

// stallStart is when the keys are created: after every strategy's start
// wait (concurrency's permit_ttl + join_wait, 20 s by default).
const stallStart = 30 * time.Second

func stallOne(b *testing.B, info Info, names []string) {
	runtime.LockOSThread() // threadCPU reads this thread's clock
	defer runtime.UnlockOSThread()
	s, err := info.New(strategy.Config{Self: "n0", Members: []strategy.NodeID{"n0"}, Rate: bucket.Rate{Tokens: 10, Per: time.Second},
		Burst: 20, Rand: rand.New(rand.NewPCG(1, 2)), LatencyHint: time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	r := &stallRun{s: s, wakes: minheap.New(func(a, b time.Duration) bool { return a < b })}
	s.Start(0, &r.fx)
	r.collect()
	r.tickUntil(stallStart)
	// The load: every key once, arrivals spread over a second, the
	// wake-ups due run every 1,000 requests.
	gap := time.Second / time.Duration(len(names))
	for i, k := range names {
		now := stallStart + time.Duration(i)*gap
		r.now = max(r.now, now)
		s.Request(r.now, strategy.Request{ID: uint64(i + 1), Key: string([]byte(k)), Tokens: 1, Arrival: r.now}, &r.fx)
		r.collect()
		if i%1000 == 999 {
			r.tickUntil(r.now)
		}
	}
	loaded := r.now
	peek := timed(func() {
		if mr, ok := s.(strategy.MemoryReporter); ok {
			_ = mr.MemoryBytes()
		} else {
			_ = s.StateBytes()
		}
		if sr, ok := s.(strategy.ShareReporter); ok {
			sr.CapacityShares()
		}
	})
	var snap time.Duration
	if sn, ok := s.(strategy.Snapshotter); ok {
		states := make([]strategy.KeyState, 0, len(names))
		snap = timed(func() { sn.Snapshot(r.now, func(st strategy.KeyState) { states = append(states, st) }) })
		runtime.KeepAlive(states)
	}
	if cs, ok := s.(strategy.ChangeSnapshotter); ok {
		stallChanges(b, r, cs, names)
	}
	runtime.GC()
	if os.Getenv("TOKENMESH_STALLGC") == "off" {
		// The loop's own work, without the collector's pauses and
		// assists (a collection of a 1M-key heap runs beside it).
		defer debug.SetGCPercent(debug.SetGCPercent(-1))
	}
	r.maxTick, r.took, r.cpu = 0, nil, nil
	r.tickUntil(loaded + 3*time.Minute)
	slices.Sort(r.took)
	slices.Sort(r.cpu)
	left := -1
	if mr, ok := s.(strategy.MemoryReporter); ok {
		left = mr.MemoryBytes()
	}
	b.ReportMetric(float64(r.maxTick)/1e6, "max-tick-ms")
	if len(r.took) > 0 {
		b.ReportMetric(float64(r.took[len(r.took)*99/100])/1e6, "p99-tick-ms")
		b.ReportMetric(float64(r.took[max(len(r.took)-2, 0)])/1e6, "2nd-tick-ms")
		b.ReportMetric(float64(r.cpu[len(r.cpu)-1])/1e6, "max-tick-cpu-ms")
	}
	b.ReportMetric((r.maxTickAt - loaded).Seconds(), "max-tick-at-s")
	b.ReportMetric(float64(peek)/1e6, "peek-ms")
	b.ReportMetric(float64(snap)/1e6, "snapshot-ms")
	if r.full > 0 {
		b.ReportMetric(float64(r.full)/1e6, "snapshot-full-ms")
		b.ReportMetric(float64(r.fullCPU)/1e6, "snapshot-full-cpu-ms")
		b.ReportMetric(float64(r.changes)/1e6, "snapshot-changes-ms")
		b.ReportMetric(float64(r.changesCPU)/1e6, "snapshot-changes-cpu-ms")
		b.ReportMetric(float64(r.changed), "snapshot-changes-keys")
	}
	b.ReportMetric(float64(r.ticks), "ticks")
	b.ReportMetric(float64(left), "bytes-left")
	runtime.KeepAlive(s)
}
