package conformance_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/eval"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/registry"
	"github.com/tokenmesh/tokenmesh/workload"
)

// fixedAssign sends request i to node nodes[i].
type fixedAssign []int

func (a fixedAssign) Assign(_ *workload.Request, i int, n int) int { return a[i] % n }

// overdraftCase is one random run under overdraft: charges
// (strategy.Request.Charge) of random sizes (up to three bursts) at random
// times on one or two keys, then, once every lease of the charges has
// ended, one-token checks (probes) every 50 ms on every key until the
// debts are long repaid; each request at a random node.
type overdraftCase struct {
	rate     bucket.Rate
	burst    int64
	maxDebt  int64
	nodes    int
	tr       *workload.Trace
	node     fixedAssign
	charge   []bool        // which requests are charges (strategy.Request.Charge)
	charges  int           // the first charges requests of tr are the charges
	probesAt time.Duration // when the probes start
	largest  int64         // the largest single request
}

func drawOverdraftCase(t *rapid.T, centralized bool) overdraftCase {
	c := overdraftCase{
		rate:  bucket.Rate{Tokens: rapid.Int64Range(2, 20).Draw(t, "rate_per_s"), Per: time.Second},
		burst: rapid.Int64Range(3, 30).Draw(t, "burst"),
		nodes: 1,
	}
	if !centralized {
		c.nodes = rapid.IntRange(1, 5).Draw(t, "nodes")
	}
	keys := []string{"a", "b"}[:rapid.IntRange(1, 2).Draw(t, "keys")]
	span := time.Duration(rapid.IntRange(1, 40).Draw(t, "span_100ms")) * 100 * time.Millisecond
	c.charges = rapid.IntRange(1, 40).Draw(t, "charges")
	var reqs []workload.Request
	var total int64
	for i := range c.charges {
		n := rapid.Int64Range(1, 3*c.burst).Draw(t, fmt.Sprintf("size_%d", i))
		at := time.Duration(rapid.Int64Range(0, int64(span)).Draw(t, fmt.Sprintf("at_%d", i)))
		at = at.Truncate(time.Millisecond)
		reqs = append(reqs, workload.Request{Arrival: at, Key: rapid.SampledFrom(keys).Draw(t, fmt.Sprintf("key_%d", i)), Tokens: n})
		total += n
		c.largest = max(c.largest, n)
	}
	slices.SortStableFunc(reqs, func(a, b workload.Request) int { return int(a.Arrival - b.Arrival) })
	// The probes start once the charges' leases (lease: ttl 500 ms) and
	// forwards (timeout 3*latency + 100 ms) are over, and go on until
	// the deepest possible debt has been repaid and a burst refilled.
	c.probesAt = span + 3*time.Second
	end := c.probesAt + time.Duration(float64(total+c.burst)/c.rate.PerSec()*float64(time.Second)) + 2*time.Second
	for at := c.probesAt; at < end; at += 50 * time.Millisecond {
		for _, k := range keys {
			reqs = append(reqs, workload.Request{Arrival: at, Key: k, Tokens: 1})
		}
	}
	c.tr = &workload.Trace{Name: "overdraft", Requests: reqs}
	// A debt bound no charge reaches, also as static splits it over the
	// nodes: every charge must be counted in full.
	c.maxDebt = total * int64(c.nodes)
	c.node = make(fixedAssign, len(reqs))
	c.charge = make([]bool, len(reqs))
	rnd := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "assign_seed"), 1))
	for i := range reqs {
		c.node[i] = rnd.IntN(c.nodes)
		c.charge[i] = i < c.charges
	}
	return c
}

func (c overdraftCase) run(t interface{ Fatalf(string, ...any) }, info registry.Info) *sim.Result {
	p, err := strategy.ParseParams([]string{"overdraft=true", fmt.Sprintf("max_debt=%d", c.maxDebt)})
	if err != nil {
		t.Fatalf("%v", err)
	}
	nodes := c.nodes
	if info.Centralized {
		nodes = 1
	}
	res, err := sim.Run(c.tr, sim.Config{Name: info.Name, New: info.New, Nodes: nodes, Rate: c.rate, Burst: c.burst, Params: p,
		Network: fixed(time.Millisecond), Assign: c.node, Seed: 3, Charges: c.charge})
	if err != nil {
		t.Fatalf("%s: %v", info.Name, err)
	}
	if res.ReceiveErrors != 0 || res.Undecided != 0 {
		t.Fatalf("%s: %d peer messages refused, %d requests undecided", info.Name, res.ReceiveErrors, res.Undecided)
	}
	return res
}

// group is where a strategy keeps a key's bucket: one per key for the
// cluster (node -1), or one per key and node (local: every node the whole
// (r, b); static: node i its share (r/N, b_i)).
type group struct {
	key  string
	node int
}

func (c overdraftCase) groupOf(name string, i int) group {
	if name == "static" || name == "local" {
		return group{c.tr.Requests[i].Key, c.node[i] % c.nodes}
	}
	return group{key: c.tr.Requests[i].Key, node: -1}
}

// shape is a group's (r, b) in tokens/s and tokens.
func (c overdraftCase) shape(name string, g group) (float64, int64) {
	if name != "static" {
		return c.rate.PerSec(), c.burst
	}
	// Static splits the burst over the members sorted by name: n0, n1, ...
	b, _ := bucket.SplitBurst(c.burst, c.nodes, g.node)
	return c.rate.PerSec() / float64(c.nodes), b
}

// envelope is the largest excess over b + r*T of the admitted tokens of
// one group in any window (eval.EnvelopeViolation, group by group).
func (c overdraftCase) envelope(name string, ok []bool) float64 {
	byGroup := map[group][]int{}
	for i := range c.tr.Requests {
		g := c.groupOf(name, i)
		byGroup[g] = append(byGroup[g], i)
	}
	worst := 0.0
	for g, idx := range byGroup {
		reqs := make([]workload.Request, len(idx))
		adm := make([]bool, len(idx))
		for k, i := range idx {
			reqs[k], adm[k] = c.tr.Requests[i], ok[i]
		}
		r, b := c.shape(name, g)
		worst = max(worst, eval.EnvelopeViolation(reqs, adm, r, b))
	}
	return worst
}

// TestOverdraftProperty , on every strategy that
// implements overdraft, over random clusters of 1 to 5 nodes (fixed 1 ms
// latency, no loss) and random charges of up to three bursts:
//
//   - the admitted tokens of a key in any window T stay within b + r*T
//     plus the largest single charge (the bound; a request is
//     admitted only when its tokens are there, so b + r*T holds too and
//     is what the runs show; local's nodes each hold a whole (r, b) and
//     static's node i its share (r/N, b_i): each is checked on its own);
//   - every charge is counted (none lost): the first probe a key admits
//     after the charges comes no earlier than the refill allows had every
//     charge before it been taken in full (the probes before it were
//     refused: they took nothing): for every earlier window [s, t), the
//     charges in it and the probe fit in b + r*(t - s); a charge not
//     counted would reopen the key early. And every key reopens: the
//     probes, refused while the key is in debt, cost it nothing. For static each node's share is its own bucket
//     (r/N, b_i) with its own debt; for lease the charges' leases have all
//     ended when the probes start;
//   - owner, which decides as central with hold = the latency, takes
//     exactly central's decisions.
func TestOverdraftProperty(t *testing.T) {
	central, err := registry.Lookup("central")
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range registry.List() {
		if _, ok := strategy.FindParam(info.Params, strategy.OverdraftParam); !ok {
			continue
		}
		t.Run(info.Name, func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				c := drawOverdraftCase(rt, info.Centralized)
				res := c.run(rt, info)
				ok := allowed(res)
				v := c.envelope(info.Name, ok)
				if v > float64(c.largest)+1e-9 {
					rt.Fatalf("admitted %.3f tokens beyond b + r*T, above the largest charge %d", v, c.largest)
				}
				if v > 1e-6 {
					rt.Logf("%s: %.3f tokens beyond b + r*T (within the largest charge %d)", info.Name, v, c.largest)
				}
				c.checkReopen(rt, info.Name, ok)
				if info.Name == "owner" {
					want := allowed(c.run(rt, central))
					for i := range want {
						if ok[i] != want[i] {
							r := c.tr.Requests[i]
							rt.Fatalf("request %d (%d of %s at %v): owner allowed %v, central %v", i, r.Tokens, r.Key, r.Arrival, ok[i], want[i])
						}
					}
				}
			})
		})
	}
}

// checkReopen checks that the first probe each group admits after the
// charges fits, with every request of the group before it, in the group's
// (r, b) over every window ending at it.
func (c overdraftCase) checkReopen(t *rapid.T, name string, ok []bool) {
	first := map[group]int{}
	for i := c.charges; i < len(c.tr.Requests); i++ {
		g := c.groupOf(name, i)
		if _, seen := first[g]; !seen && ok[i] {
			first[g] = i
		}
	}
	for g, j := range first {
		r, b := c.shape(name, g)
		tj := c.tr.Requests[j].Arrival
		// Every window [s, tj) with s a request's arrival: the requests of
		// g in it plus the probe's token.
		sum := int64(1)
		for i := j - 1; i >= 0; i-- {
			if c.groupOf(name, i) != g || !c.charge[i] {
				continue // the probes before j were refused: nothing taken
			}
			sum += c.tr.Requests[i].Tokens
			s := c.tr.Requests[i].Arrival
			if excess := float64(sum) - float64(b) - r*(tj-s).Seconds(); excess > 1e-6 {
				t.Fatalf("%s: key %s (node %d) admits a probe at %v, but the %d tokens asked for since %v (the probe included) exceed b + r*T by %.3f: a charge was not counted",
					name, g.key, g.node, tj, sum, s, excess)
			}
		}
	}
	for _, k := range []string{"a", "b"} {
		for g := range first {
			if g.key == k {
				goto next
			}
		}
		for i := c.charges; i < len(c.tr.Requests); i++ {
			if c.tr.Requests[i].Key == k {
				t.Fatalf("%s: key %s admitted no probe in %v after the charges: the debt was never repaid", name, k, c.tr.Requests[len(c.tr.Requests)-1].Arrival-c.probesAt)
			}
		}
	next:
	}
}
