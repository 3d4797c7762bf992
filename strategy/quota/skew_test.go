package quota

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// poissonStart: newWorld's clients make their first requests at
// exponential times (their rates), as the live test's Envoys do, instead
// of 10 ms apart (TestSkewedFleetLoss sets it for one of its runs).
var poissonStart bool

// newWorld is a world of n nodes enforcing (r, b) with clients offering
// the given rates, spread round-robin over the nodes.
func newWorld(t *testing.T, n int, r, b int64, rates []float64, seed uint64, params ...string) *world {
	w := &world{t: t, nodes: map[strategy.NodeID]*Quota{}, rng: rand.New(rand.NewPCG(seed, 1)),
		hop: time.Millisecond, push: time.Millisecond, waiting: map[uint64]time.Duration{}, down: map[strategy.NodeID]bool{}}
	for i := range n {
		w.ids = append(w.ids, strategy.NodeID(fmt.Sprintf("n%d", i)))
	}
	ps, err := strategy.ParseParams(params)
	if err != nil {
		t.Fatal(err)
	}
	w.cfg = strategy.Config{Rate: bucket.Rate{Tokens: r, Per: time.Second}, Burst: b, Rand: rand.New(rand.NewPCG(1, 2)), Params: ps}
	for _, id := range w.ids {
		cfg := w.cfg
		cfg.Self, cfg.Members = id, w.ids
		q, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		w.nodes[id] = q
		var fx strategy.Effects
		q.Start(0, &fx)
		w.effects(0, id, &fx)
	}
	for i, rate := range rates {
		w.clients = append(w.clients, &client{node: w.ids[i%n], id: strategy.QuotaClient(i + 1), rate: rate})
		first := time.Duration(i) * 10 * time.Millisecond
		if poissonStart {
			first = time.Duration(w.rng.ExpFloat64() / rate * float64(time.Second))
		}
		w.at(event{at: first, kind: 3, c: i})
	}
	w.nextClient = strategy.QuotaClient(len(rates)) // a client that moves to another node gets a new number
	return w
}

// The skewed fleet, in the model: one bucket 100/s burst 100, two
// clients offering 150/s and four 10/s, over 3 nodes, for 60 s, reports
// every 5 s (today's Envoy) and every 1 s. The fleet stays within
// b + r*T exactly; the light clients get about their demand (max-min),
// the heavy ones the rest. Admitted, of min(offered, r*T + b), with this
// seed: 96.2% at 1 s reports, 96.0% at 5 s (seeds 1-10: 95.9-96.8% and
// 94.5-96.2%; before bursts by need, sticky units and the
// demand estimate's time constant: 93.2% and 95.2% with this seed,
// 93.3-94.6% and 93.4-95.4% with the others). Where the rest goes:
// TestSkewedFleetLoss. The floors below are those measurements less a
// margin, so a change that loses efficiency fails here (the world is
// deterministic for a seed).
func TestSkewedFleet(t *testing.T) {
	for _, report := range []time.Duration{time.Second, 5 * time.Second} {
		t.Run(report.String(), func(t *testing.T) {
			rates := []float64{150, 150, 10, 10, 10, 10}
			w := newWorld(t, 3, 100, 100, rates, 7)
			const horizon = 60 * time.Second
			w.run("tenant", horizon, report, 0, t.Fatalf)
			offered := 0.0
			for _, r := range rates {
				offered += r * horizon.Seconds()
			}
			ceiling := math.Min(offered, 100*horizon.Seconds()+100)
			got := float64(len(w.admitted))
			v := envelope(w.admitted, 100, 100)
			first := 0
			for _, a := range w.admitted {
				if a < report {
					first++
				}
			}
			t.Logf("admitted in the first report interval: %d of %.0f", first, 100*report.Seconds()+100)
			t.Logf("report every %v: admitted %.0f of min(offered %.0f, r*T + b %.0f) = %.1f%%; envelope excess %.6f tokens",
				report, got, offered, ceiling, 100*got/ceiling, v)
			for i, c := range w.clients {
				t.Logf("client %d at %s offering %.0f/s: admitted %.1f/s; assignment %d tokens per %v, max %d", i+1, c.node, c.rate, float64(c.total)/horizon.Seconds(), c.b.a.TokensPerFill, c.b.a.FillInterval, c.b.a.MaxTokens)
			}
			if v > 1e-6 {
				t.Errorf("the fleet exceeded b + r*T by %.6f tokens", v)
			}
			floor := map[time.Duration]float64{time.Second: 0.955, 5 * time.Second: 0.95}[report]
			if got < floor*ceiling {
				t.Errorf("admitted %.0f, below %.0f%% of %.0f", got, 100*floor, ceiling)
			}
		})
	}
}

// A change of demand is followed within 3 report intervals (the issue's
// target): in the skewed fleet, at 30 s a heavy client (150/s) and a light
// one (10/s) swap their demands; the time until the new heavy one holds at
// least 90% of its new max-min share and the new light one at most its
// share plus the cut's hysteresis, in report intervals, is logged and
// checked. The demand estimate's weight (demandWeight 0.5) follows 87.5%
// of a change after 3 reports; max-min moves the rest of the units to it.
func TestDemandChangeFollowed(t *testing.T) {
	for _, report := range []time.Duration{time.Second, 5 * time.Second} {
		t.Run(report.String(), func(t *testing.T) {
			rates := []float64{150, 150, 10, 10, 10, 10}
			w := newWorld(t, 3, 100, 100, rates, 7)
			const swapAt = 30 * time.Second
			w.run("tenant", swapAt, report, 0, t.Fatalf)
			up, down := w.clients[2], w.clients[0] // 10 -> 150 and 150 -> 10
			t.Logf("before the swap: up holds %d, down %d", up.b.a.TokensPerFill, down.b.a.TokensPerFill)
			up.rate, down.rate = 150, 10
			// max-min after the swap: four light clients at ~10 units
			// each (plus the rounding of their estimates), two heavy ones
			// at (100 - 40) / 2 = 30
			const heavyShare, lightShare = 30, 10
			var upAt, downAt time.Duration
			for now := swapAt; now < swapAt+6*report+5*time.Second && (upAt == 0 || downAt == 0); now += 50 * time.Millisecond {
				w.run("tenant", now, report, 0, t.Fatalf)
				if upAt == 0 && up.b.has && up.b.a.TokensPerFill >= heavyShare*9/10 {
					upAt = now - swapAt
				}
				if downAt == 0 && down.b.has && !above(down.b.a.TokensPerFill, lightShare+lightShare/4) {
					downAt = now - swapAt
				}
			}
			t.Logf("report every %v: the new heavy client holds >= %d units after %v (%.1f reports), the new light one <= %d after %v (%.1f reports)",
				report, heavyShare*9/10, upAt, upAt.Seconds()/report.Seconds(), lightShare+lightShare/4+(lightShare+lightShare/4)/10+1, downAt, downAt.Seconds()/report.Seconds())
			for _, d := range []time.Duration{upAt, downAt} {
				if d == 0 || d > 3*report+time.Second {
					t.Errorf("a change of demand not followed within 3 report intervals (+1 s for the cuts' apply_lag): up %v, down %v", upAt, downAt)
					break
				}
			}
		})
	}
}

// A client whose reports show no request for abandon_idle (10 s) is told
// to forget the key and its share goes to the busy one; when it has
// requests again, Envoy reports the bucket at once and it is assigned
// again.
func TestIdleClientAbandoned(t *testing.T) {
	w := newWorld(t, 3, 100, 100, []float64{150, 150}, 7)
	idle, busy := w.clients[0], w.clients[1]
	w.run("tenant", 10*time.Second, time.Second, 0, t.Fatalf)
	if !idle.b.has || idle.b.a.TokensPerFill < 40 {
		t.Fatalf("before going idle: %+v, want about half of the units", idle.b.a)
	}
	idle.rate = 0
	// (the model reports at a client's arrivals: one without requests
	// reports about every 2 s, so the 10 s show after 10-15 s)
	w.run("tenant", 30*time.Second, time.Second, 0, t.Fatalf)
	if !idle.abandoned || idle.b.has {
		t.Fatalf("after 20 s without requests: abandoned %v, holds %+v; want the key forgotten", idle.abandoned, idle.b.a)
	}
	if busy.b.a.TokensPerFill < 90 {
		t.Errorf("the busy client holds %d units, want about all 100 of the idle one's back", busy.b.a.TokensPerFill)
	}
	idle.rate = 150
	back := time.Duration(0)
	for now := 30 * time.Second; now < 40*time.Second && back == 0; now += 50 * time.Millisecond {
		w.run("tenant", now, time.Second, 0, t.Fatalf)
		if idle.b.has && idle.b.a.TokensPerFill > 0 {
			back = now - 30*time.Second
		}
	}
	t.Logf("assigned again %v after its requests resumed: %+v", back, idle.b.a)
	if back == 0 || back > 3*time.Second {
		t.Errorf("not assigned again within 3 s of its requests resuming (%v)", back)
	}
	if v := envelope(w.admitted, 100, 100); v > 1e-6 {
		t.Errorf("the fleet exceeded b + r*T by %.6f tokens", v)
	}
}
