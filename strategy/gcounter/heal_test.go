package gcounter_test

import (
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/eval"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/workload"
)

// healScenario cuts n0 off from n1 and n2 for 30 s of trace (60 s to 90 s),
// with the detector of examples/scenarios/partition-3nodes.yaml.
const healScenario = `detection: 4s
detection_jitter: 1500ms
reconnect_interval: 5s
join_delay: 500ms
events:
  - at: 60s
    partition: [[n0], [n1, n2]]
  - at: 90s
    heal: true
`

// healStats is what a run does to its keys after the heal at healAt: the
// longest time, over keys, from a key's first refused request after the
// heal to its next admitted one (a key refused to the end counts to the
// end of the trace), and the refused share of the requests in the 30 s
// after the heal.
type healStats struct {
	outage     time.Duration
	refusedPct float64
}

func measureHeal(reqs []workload.Request, ok []bool, healAt, end time.Duration) healStats {
	var s healStats
	firstRefused := map[string]time.Duration{}
	var n, refused int
	for i, r := range reqs {
		if r.Arrival < healAt {
			continue
		}
		if r.Arrival < healAt+30*time.Second {
			n++
			if !ok[i] {
				refused++
			}
		}
		t0, streak := firstRefused[r.Key]
		switch {
		case !ok[i] && !streak:
			firstRefused[r.Key] = r.Arrival
		case ok[i] && streak:
			s.outage = max(s.outage, r.Arrival-t0)
			delete(firstRefused, r.Key)
		}
	}
	for _, t0 := range firstRefused {
		s.outage = max(s.outage, end-t0)
	}
	if n > 0 {
		s.refusedPct = 100 * float64(refused) / float64(n)
	}
	return s
}

// TestPostHealOutage measures a 30 s split of 3 nodes (1 | 2) under
// `partition: available`, 100 keys each asked 3 times its rate (rate 1/s,
// burst 5) from every node in turn: the longest refusal of a key after
// the heal, the refused share in the 30 s after it, the excess over
// central and the envelope (b + r*T) violation. Each side admits the
// whole rate during the split, so the merged counter is in debt at the
// heal; with the debt capped at one burst (see "Partitions" in the
// package documentation) no key is refused outright for longer than its
// burst takes to refill (b/r = 5 s) plus the time between two of its
// requests and the spread of the merge over the nodes.
func TestPostHealOutage(t *testing.T) {
	tr := gen(t, "poisson:users=100,rate=3,duration=150s", 3)
	sc, err := sim.ParseScenario([]byte(healScenario))
	if err != nil {
		t.Fatal(err)
	}
	central := allowed(run(t, tr, "central", runOpts{}))
	for _, mode := range []string{"available", "conserve"} {
		o := runOpts{Nodes: 3, Scenario: sc, Assign: "roundrobin", Params: []string{"partition=" + mode}}
		ok := allowed(run(t, tr, "gcounter", o))
		c := eval.Compare(tr.Requests, ok, central)
		s := measureHeal(tr.Requests, ok, 90*time.Second, 150*time.Second)
		env := eval.EnvelopeViolation(tr.Requests, ok, 1, burst)
		t.Logf("%s: longest refusal after the heal %v, refused %.1f%% of requests in the 30 s after it; excess over central %d tokens (%.2f%%), envelope violation %.0f tokens",
			mode, s.outage.Round(10*time.Millisecond), s.refusedPct, c.ExcessAdmitted, c.ExcessPct, env)
		if limit := 10 * time.Second; s.outage > limit {
			t.Errorf("%s: a key was refused for %v after the heal, above %v (burst/rate 5 s + slack)", mode, s.outage, limit)
		}
	}
}

// Folding changes no decision: over 6 minutes of 50 keys on 4 nodes, with
// n1 crashed at 100 s and restarted at 130 s and n0 cut off from 200 s to
// 230 s (catch_up on), fold=1m (which folds from the third minute on, a
// minute after every view change) admits exactly the requests fold=0
// admits: a fold that lost a token or counted one twice would move some
// key's decisions.
func TestFoldChangesNoDecision(t *testing.T) {
	tr := gen(t, "poisson:users=50,rate=2,duration=360s", 4)
	sc, err := sim.ParseScenario([]byte("detection: 1s\nevents:\n  - at: 100s\n    crash: [n1]\n  - at: 130s\n    restart: [n1]\n  - at: 200s\n    partition: [[n0], [n1, n2, n3]]\n  - at: 230s\n    heal: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	var runs [2]*sim.Result
	for i, fold := range []string{"0", "1m"} {
		runs[i] = run(t, tr, "gcounter", runOpts{Nodes: 4, Scenario: sc, Assign: "random", Params: []string{"catch_up=true", "fold=" + fold}})
	}
	a, b := allowed(runs[0]), allowed(runs[1])
	diff := 0
	for i := range a {
		if a[i] != b[i] {
			diff++
		}
	}
	t.Logf("admitted %d of %d with either; %d decisions differ; peer bytes %d without fold, %d with", count(a), len(a), diff, runs[0].Bytes, runs[1].Bytes)
	if diff != 0 {
		t.Fatalf("fold=1m changed %d decisions", diff)
	}
	if runs[0].Bytes == runs[1].Bytes {
		t.Fatal("fold=1m sent the same bytes: no slot was cut in periods")
	}
}

func count(ok []bool) int {
	n := 0
	for _, v := range ok {
		if v {
			n++
		}
	}
	return n
}
