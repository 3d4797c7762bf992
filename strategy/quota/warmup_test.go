package quota

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// liveStartWorld is a world of n nodes (rate 10/s, burst 20) all started at
// start > 0, as the live runtime starts every node (each joins), with
// clients offering the given rates (their first report at start + 10 ms
// each after the other).
func liveStartWorld(t *testing.T, n int, start time.Duration, rates []float64, params ...string) *world {
	w := &world{t: t, nodes: map[strategy.NodeID]*Quota{}, rng: rand.New(rand.NewPCG(1, 1)),
		hop: time.Millisecond, push: time.Millisecond, waiting: map[uint64]time.Duration{}, down: map[strategy.NodeID]bool{}}
	for i := range n {
		w.ids = append(w.ids, strategy.NodeID(fmt.Sprintf("n%d", i)))
	}
	ps, err := strategy.ParseParams(params)
	if err != nil {
		t.Fatal(err)
	}
	w.cfg = strategy.Config{Rate: bucket.Rate{Tokens: 10, Per: time.Second}, Burst: 20, Rand: rand.New(rand.NewPCG(1, 2)), Params: ps}
	for _, id := range w.ids {
		cfg := w.cfg
		cfg.Self, cfg.Members = id, w.ids
		q, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		w.nodes[id] = q
		var fx strategy.Effects
		q.Start(start, &fx)
		w.effects(start, id, &fx)
	}
	for i, rate := range rates {
		w.clients = append(w.clients, &client{node: w.ids[i%n], id: strategy.QuotaClient(i + 1), rate: rate})
		w.at(event{at: start + time.Duration(i+1)*10*time.Millisecond, kind: 3, c: i})
	}
	w.nextClient = strategy.QuotaClient(len(rates))
	return w
}

// TestWarmupLiveStart: in a cluster of quota nodes that all started after
// time 0 (as every node of the live runtime does), a key's first checks
// are admitted as one central bucket would: 25 checks at once, spread
// over the nodes, admit the burst (20), not nothing. The key's owner asks
// the key's other nodes (warm-up), which hold nothing of it, and starts
// the reserve full. Before, every node counted as restarted and froze
// each key it owned for its takeover (ttl + apply_lag + 1 s + max_skew):
// all 25 refused. With replicas=1 (no warm-up) the freeze stays.
func TestWarmupLiveStart(t *testing.T) {
	const key = "tenant"
	for _, tc := range []struct {
		params []string
		want   int
	}{{nil, 20}, {[]string{"replicas=3"}, 20}, {[]string{"replicas=1"}, 0}} {
		t.Run(fmt.Sprint(tc.params), func(t *testing.T) {
			start := 3 * time.Second
			w := liveStartWorld(t, 3, start, nil, tc.params...)
			now := start + 5*time.Millisecond
			for i := range 25 {
				node := w.ids[i%3]
				w.reqID++
				var fx strategy.Effects
				d, ok := w.nodes[node].Request(now, strategy.Request{ID: w.reqID, Key: key, Tokens: 1, Arrival: now}, &fx)
				if ok {
					if d.Allowed {
						w.admitted = append(w.admitted, now)
					}
				} else {
					w.waiting[w.reqID] = now
				}
				w.effects(now, node, &fx)
			}
			w.run(key, now+500*time.Millisecond, time.Second, 0, t.Fatalf)
			if len(w.waiting) != 0 {
				t.Fatalf("%d checks undecided after 500 ms", len(w.waiting))
			}
			if got := len(w.admitted); got != tc.want {
				t.Fatalf("first checks after a live start: %d of 25 admitted, want %d", got, tc.want)
			}
			owner := w.nodes[rendezvous.Owner(key, w.ids)]
			if full := owner.warmedFull; (tc.want > 0) != (full == 1) {
				t.Fatalf("keys started full after a warm-up at the owner: %d", full)
			}
		})
	}
}

// TestWarmupLiveStartClients: Envoys that report a key right after a live
// start get their first token bucket after gather and a round trip, not
// after the owner's takeover (3.6 s with the defaults): at least half the
// burst is admitted in the first second (before: nothing), and the fleet
// stays within b + r*T.
func TestWarmupLiveStartClients(t *testing.T) {
	const key = "tenant"
	start := 3 * time.Second
	w := liveStartWorld(t, 3, start, []float64{20, 5, 5})
	w.run(key, start+10*time.Second, time.Second, 0, t.Fatalf)
	for i, c := range w.clients {
		if c.assignedAt == 0 || c.total == 0 {
			t.Errorf("client %d: no token bucket, or nothing admitted (%d)", i+1, c.total)
		}
	}
	var firstSecond int
	for _, at := range w.admitted {
		if at < start+time.Second {
			firstSecond++
		}
	}
	if firstSecond < 10 {
		t.Errorf("%d admitted in the first second after the start, want at least 10 (the owner froze the key?)", firstSecond)
	}
	if v := envelope(w.admitted, 10, 20); v > 1e-6 {
		t.Fatalf("admissions exceed b + r*T by %.6f", v)
	}
}

// TestWarmupAnswerSome: a node that holds the key's replica answers
// "some"; the owner, restarted faster than failure detection, then starts
// the key frozen as before (its previous incarnation's assignments may
// still be out), and a node that answered "none" decides the key as moved
// to it at the answer should it come to own it.
func TestWarmupAnswerSome(t *testing.T) {
	const key = "tenant"
	w := newWorld(t, 2, 10, 20, []float64{5}, 1)
	w.run(key, 3*time.Second, time.Second, 0, t.Fatalf)
	owner := rendezvous.Owner(key, w.ids)
	succ := w.ids[0]
	if succ == owner {
		succ = w.ids[1]
	}
	if w.nodes[succ].records[key] == nil {
		t.Fatalf("%s holds no replica of %s", succ, key)
	}
	// the owner restarts at once (no view change anywhere)
	now := 3*time.Second + time.Millisecond
	w.down[owner] = true
	w.restart(now, owner, t.Fatalf)
	q := w.nodes[owner]
	var fx strategy.Effects
	w.reqID++
	if _, ok := q.Request(now, strategy.Request{ID: w.reqID, Key: key, Tokens: 1, Arrival: now}, &fx); ok {
		t.Fatalf("a check at the restarted owner was decided before its warm-up")
	}
	w.waiting[w.reqID] = now
	w.effects(now, owner, &fx)
	w.run(key, now+100*time.Millisecond, time.Second, 0, t.Fatalf)
	if len(w.admitted) == 0 {
		t.Fatalf("nothing admitted before the restart")
	}
	if _, ok := w.waiting[w.reqID]; ok {
		t.Fatalf("the check is still waiting after 100 ms")
	}
	a := q.allocs[key]
	if a == nil || a.frozenUntil <= now || q.warmedFull != 0 {
		t.Fatalf("after an answer \"some\" the key must start frozen: alloc %v, started full %d", a, q.warmedFull)
	}
	// the answerer side: a "none" is remembered and moves the key
	var fx2 strategy.Effects
	other := w.nodes[succ]
	if err := other.onStateQuery(now, owner, msgQuery("other-key", 7), &fx2); err != nil {
		t.Fatal(err)
	}
	if !other.answeredLately("other-key", now) || other.takeoverEnd("other-key", now) != now+other.takeover {
		t.Fatalf("an answer \"none\" must move the key to its answerer at the answer")
	}
}

func msgQuery(key string, id uint64) *peerv1.QuotaStateQuery {
	return &peerv1.QuotaStateQuery{Key: key, Id: id}
}
