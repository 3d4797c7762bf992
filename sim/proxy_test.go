package sim_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/eval"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy/registry"
	"github.com/tokenmesh/tokenmesh/workload"
)

// runProxies simulates the registered strategy name on nodes nodes at
// rate r tokens/s, burst b, behind the proxy tier tier, requests spread
// round-robin, peers 1 ms apart.
func runProxies(t *testing.T, tr *workload.Trace, name string, nodes int, r, b int64, tier sim.ProxyTier, sc *sim.Scenario) *sim.Result {
	t.Helper()
	info, err := registry.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	assign, err := workload.NewAssigner("roundrobin", 1)
	if err != nil {
		t.Fatal(err)
	}
	res, err := sim.Run(tr, sim.Config{Name: name, New: info.New, Nodes: nodes, Rate: bucket.Rate{Tokens: r, Per: time.Second},
		Burst: b, Network: fixed(time.Millisecond), Scenario: sc, Assign: assign, Seed: 7, Proxies: tier})
	if err != nil {
		t.Fatal(err)
	}
	if res.ReceiveErrors != 0 {
		t.Fatalf("%s: %d messages refused", name, res.ReceiveErrors)
	}
	return res
}

// A run behind proxies is a function of its seed, whatever the proxies
// do: RLQS (quota), per-request RLS (owner, lease), or the strategy at the
// proxies (static).
func TestProxiesDeterministic(t *testing.T) {
	tr := mustGen(t, "poisson:users=8,rate=15,duration=20s", 3)
	for _, tc := range []struct {
		name string
		at   bool
	}{{"quota", false}, {"owner", false}, {"lease", false}, {"static", true}} {
		tier := sim.ProxyTier{Proxies: 5, Hop: time.Millisecond, ReportInterval: time.Second, AtProxies: tc.at}
		a := runProxies(t, tr, tc.name, 3, 10, 20, tier, nil)
		b := runProxies(t, tr, tc.name, 3, 10, 20, tier, nil)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: two runs behind proxies with the same seed differ", tc.name)
		}
		if a.Undecided != 0 {
			t.Fatalf("%s: %d requests undecided", tc.name, a.Undecided)
		}
		if a.ProxyMessages == 0 && !tc.at {
			t.Fatalf("%s: no message between the proxies and the nodes", tc.name)
		}
	}
}

// quota behind 5 proxies, assignments applied a hop (1 ms) after they are
// sent, far within apply_lag (500 ms), the proxies denying without an
// assignment (before the first, after expiry: RLQS.md's setting for the
// bound): every key's admissions stay within b + r*T exactly, every
// request is decided at its proxy, and the proxies' traffic is counted.
// The same with a crash, at 8 s, of a node holding proxies' streams (they
// move to the next live node at their next report).
func TestQuotaBehindProxiesWithinEnvelope(t *testing.T) {
	tr := mustGen(t, "poisson:users=6,rate=12,duration=30s", 5)
	const r, b = 10, 20
	tier := sim.ProxyTier{Proxies: 5, Hop: time.Millisecond, NoAssignment: sim.DenyAll, Expired: sim.DenyAll}
	central := 0
	for _, ok := range allowed(runProxies(t, tr, "central", 1, r, b, sim.ProxyTier{}, nil)) {
		if ok {
			central++
		}
	}
	crash := &sim.Scenario{Detection: time.Second, Events: []sim.ScenarioEvent{{At: 8 * time.Second, Crash: []string{"n1"}}}}
	for _, sc := range []*sim.Scenario{nil, crash} {
		for _, report := range []time.Duration{time.Second, 5 * time.Second} {
			tier.ReportInterval = report
			res := runProxies(t, tr, "quota", 3, r, b, tier, sc)
			ok := allowed(res)
			if v := eval.EnvelopeViolation(tr.Requests, ok, r, b); v > 1e-6 {
				t.Errorf("crash %v, reports every %v: the proxies exceeded b + r*T by %v tokens", sc != nil, report, v)
			}
			admitted, local := 0, 0
			for _, o := range res.Outcomes {
				if o.Allowed {
					admitted++
				}
				if o.Local {
					local++
				}
			}
			if local != len(tr.Requests) {
				t.Errorf("crash %v, reports every %v: %d of %d requests decided at their proxy", sc != nil, report, local, len(tr.Requests))
			}
			// Each key offered 12/s against 10/s over 5 proxies: the
			// proxies admit a good part of what central does (65% to 83%
			// here: DENY_ALL until a first assignment, paid from the
			// reserve; shares that follow noisy 2.4/s demands). The floor
			// catches a tier that decides nothing from its assignments.
			if float64(admitted) < 0.5*float64(central) {
				t.Errorf("crash %v, reports every %v: admitted %d, below half of central's %d", sc != nil, report, admitted, central)
			}
			if res.ProxyMessages == 0 || res.ProxyBytes == 0 {
				t.Errorf("crash %v, reports every %v: proxy traffic %d messages, %d bytes", sc != nil, report, res.ProxyMessages, res.ProxyBytes)
			}
			t.Logf("crash %v, reports every %v: admitted %d of %d (central %d); %d proxy messages, %d bytes; %d peer messages",
				sc != nil, report, admitted, len(tr.Requests), central, res.ProxyMessages, res.ProxyBytes, res.Messages)
		}
	}
}

// Behind proxies that add no hop, owner decides every request as without
// them: a proxy forwards each request to its node (proxy i to node i mod
// nodes; with as many proxies as nodes and round-robin, the node that
// would have received it), which decides as before. Nothing is decided at
// the proxies, and each request costs one check and one answer.
func TestOwnerBehindProxiesDecidesAsOwner(t *testing.T) {
	tr := mustGen(t, "mix:duration=20s", 4)
	const nodes = 4
	plain := runProxies(t, tr, "owner", nodes, 1, 5, sim.ProxyTier{}, nil)
	for _, n := range []int{nodes, 2 * nodes} {
		proxied := runProxies(t, tr, "owner", nodes, 1, 5, sim.ProxyTier{Proxies: n}, nil)
		for i, o := range proxied.Outcomes {
			if o.Allowed != plain.Outcomes[i].Allowed || o.Decided != plain.Outcomes[i].Decided {
				t.Fatalf("%d proxies: request %d (%s at %v): %+v behind proxies, %+v without", n, i, tr.Requests[i].Key,
					tr.Requests[i].Arrival, o, plain.Outcomes[i])
			}
			if o.Local {
				t.Fatalf("%d proxies: request %d decided at its proxy under per-request RLS", n, i)
			}
		}
		if proxied.ProxyMessages != 2*int64(len(tr.Requests)) {
			t.Fatalf("%d proxies: %d proxy messages for %d requests, want a check and an answer each", n, proxied.ProxyMessages, len(tr.Requests))
		}
		if proxied.Messages != plain.Messages {
			t.Fatalf("%d proxies: %d peer messages, %d without", n, proxied.Messages, plain.Messages)
		}
	}
}

// static at 4 proxies is each proxy enforcing (r/4, b/4) alone: the same
// decisions as static on 4 nodes without proxies, all local, no traffic.
func TestStaticAtProxiesIsStaticOverProxies(t *testing.T) {
	tr := mustGen(t, "heavy:users=10,rate=100,duration=20s", 2)
	plain := runProxies(t, tr, "static", 4, 4, 8, sim.ProxyTier{}, nil)
	at := runProxies(t, tr, "static", 3, 4, 8, sim.ProxyTier{Proxies: 4, Hop: time.Millisecond, AtProxies: true}, nil)
	for i, o := range at.Outcomes {
		if o.Allowed != plain.Outcomes[i].Allowed || !o.Local {
			t.Fatalf("request %d: %+v at the proxies, %+v on 4 nodes", i, o, plain.Outcomes[i])
		}
	}
	if at.ProxyMessages != 0 || at.Messages != 0 {
		t.Fatalf("static at the proxies sent %d proxy and %d peer messages", at.ProxyMessages, at.Messages)
	}
}

// Bad proxy tiers are refused, naming what is wrong.
func TestProxyTierValidate(t *testing.T) {
	for _, tc := range []struct {
		tier sim.ProxyTier
		want string
	}{
		{sim.ProxyTier{Proxies: -1}, "-1 proxies"},
		{sim.ProxyTier{Proxies: 2, Hop: -time.Millisecond}, "hop -1ms"},
		{sim.ProxyTier{Proxies: 2, ReportInterval: -time.Second}, "interval -1s"},
		{sim.ProxyTier{Proxies: 2, Expired: "DENY"}, `expired behaviour "DENY"`},
		{sim.ProxyTier{AtProxies: true}, "needs proxies"},
	} {
		err := tc.tier.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one naming %q", tc.tier, err, tc.want)
		}
	}
}
