package lease_test

import (
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/eval"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/sim/simtest"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/lease"
	"github.com/tokenmesh/tokenmesh/workload"
)

// TestOwnerCrashWithReplicas: the owner of a busy key (offered 90% of its
// rate, so that every node holds leases; 4 nodes, 1 ms latency) crashes at 10 s and comes back at 20 s;
// detection takes 500 ms. With replicas=2 the node that takes the key over
// continues from the replicated bucket; with replicas=1 it starts empty
// for takeover + b/r. Replicas must refuse fewer of the requests central
// admits, and neither may exceed the key's envelope b + r*T (no loss: the
// replicated state is at most one sync interval stale, and a key offered
// its rate has not spent it).
func TestOwnerCrashWithReplicas(t *testing.T) {
	const nodes = 4
	rate := bucket.Rate{Tokens: 100, Per: time.Second}
	burst := int64(100)
	// One key, 90 requests a second (below r: central admits all), spread
	// round-robin: 22.5/s a node, above min_lease per period.
	var reqs []workload.Request
	for i := range 30 * 90 {
		reqs = append(reqs, workload.Request{Arrival: time.Duration(i) * time.Second / 90, Key: "hot", Tokens: 1})
	}
	tr := &workload.Trace{Name: "hot", Requests: reqs}
	central, err := eval.Central(tr, rate, burst)
	if err != nil {
		t.Fatal(err)
	}
	// The key's owner among n0..n3, as the simulator names them.
	var ids []strategy.NodeID
	for i := range nodes {
		ids = append(ids, strategy.NodeID("n"+string(rune('0'+i))))
	}
	victim := string(rendezvous.Owner("hot", ids))
	sc := &sim.Scenario{Detection: 500 * time.Millisecond, Events: []sim.ScenarioEvent{
		{At: 10 * time.Second, Crash: []string{victim}},
		{At: 20 * time.Second, Restart: []string{victim}},
	}}
	falseRej := map[int]int{}
	for _, k := range []int{1, 2} {
		res := simtest.Run(t, tr, "lease", func(cfg strategy.Config) (strategy.Strategy, error) { return lease.New(cfg) },
			simtest.Options{Nodes: nodes, Rate: rate, Burst: burst, Scenario: sc, Assign: "roundrobin",
				Params: []string{"on_timeout=reject", "replicas=" + string(rune('0'+k))}})
		allowed := simtest.Allowed(res)
		c := eval.Compare(reqs, allowed, central)
		falseRej[k] = c.FalseRejections
		if testing.Verbose() {
			var at []time.Duration
			for i := range reqs {
				if central[i] && !allowed[i] {
					at = append(at, reqs[i].Arrival.Round(time.Millisecond))
				}
			}
			t.Logf("replicas=%d: false rejections at %v", k, at)
		}
		if v := eval.EnvelopeViolation(reqs, allowed, rate.PerSec(), burst); v > 0 {
			t.Errorf("replicas=%d: envelope exceeded by %.3f tokens", k, v)
		}
		t.Logf("replicas=%d: %d false rejections of %d requests, %d peer messages", k, c.FalseRejections, len(reqs), res.Messages)
	}
	if falseRej[2] >= falseRej[1] {
		t.Fatalf("replicas=2 refused %d requests central admits, replicas=1 %d: want fewer with replicas", falseRej[2], falseRej[1])
	}
}
