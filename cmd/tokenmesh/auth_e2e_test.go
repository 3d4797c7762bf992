package main

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/cluster/grpcpeer"
	"github.com/tokenmesh/tokenmesh/daemon"
	"github.com/tokenmesh/tokenmesh/localcluster"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// The measured bug: without peer authentication, one forged gcounter frame
// claiming to come from a member ("victim" consumed 2^50 tokens) locked the
// key on every node for ages. With a secret key, forged frames from a
// process without it, claiming to be members, change no node's state, and
// every node counts them in tokenmesh_peer_refused_frames_total{reason="bad_mac"}.
func TestClusterE2EForgedFramesRefused(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	rules := []rule.Rule{{Name: "api", Rate: rule.MustRate("1/s"), Burst: 5, Strategy: "gcounter"}}
	c := startCluster(t, localcluster.Config{Nodes: 3, SecretKey: key, Rules: rules})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const badMAC = `tokenmesh_peer_refused_frames_total{reason="bad_mac"}`
	const stateBytes = `tokenmesh_state_bytes{rule="api"}`
	metric := func(i int, name string) float64 {
		t.Helper()
		m, err := c.Metrics(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		v, ok := metricValue(m, name)
		if !ok {
			t.Fatalf("n%d: no %s in /metrics", i, name)
		}
		return v
	}
	var before [3]float64
	for i := range 3 {
		if v := metric(i, badMAC); v != 0 {
			t.Fatalf("n%d counted %v bad MACs before any forgery", i, v)
		}
		before[i] = metric(i, stateBytes)
	}

	// The attack measured on the nodes before frame authentication: 2^50
	// tokens consumed, a limit of 0 refilled just now, in the current
	// generation (gcounter's default idle, 10m): at 1/s the limit would
	// take 2^50 s (35 million years) to pass the count. (With this binary
	// before the fix, every node then refused the key.)
	now := time.Since(daemon.ClusterEpoch)
	forged, err := proto.Marshal(&peerv1.GCounterMessage{Buckets: []*peerv1.GCounterBucket{{Key: "victim",
		Counter: []*peerv1.GCounterEntry{{Node: "n1", Consumed: 1 << 50}}, Limit: 0, RefillNs: int64(now),
		Generation: int64(now / (10 * time.Minute))}}})
	if err != nil {
		t.Fatal(err)
	}
	// Forgers without the key: one claims to be n1 (to n0 and n2), one n0
	// (to n1). They know the members' peer addresses, as anyone on the
	// network could.
	forgers := map[strategy.NodeID][]int{"n1": {0, 2}, "n0": {1}}
	var trs []*grpcpeer.Transport
	for claim, targets := range forgers {
		book := map[strategy.NodeID]string{}
		for _, i := range targets {
			book[strategy.NodeID(c.Nodes[i].Name)] = c.Nodes[i].Peer
		}
		tr, err := grpcpeer.New(grpcpeer.Config{Self: claim, ListenAddr: "127.0.0.1:0", Peers: book,
			MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		trs = append(trs, tr)
		for range 10 {
			for id := range book {
				if err := tr.Send(id, cluster.Frame{Rule: "api", Payload: forged}); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for i := range 3 {
		for metric(i, badMAC) < 1 {
			if ctx.Err() != nil {
				t.Fatalf("n%d never counted the forged frames", i)
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("n%d: %s %v", i, badMAC, metric(i, badMAC))
	}
	for _, tr := range trs {
		if st := tr.Stats(); st.Dials == 0 || st.Sent == 0 {
			t.Fatalf("a forger never reached its targets (%+v): the test proves nothing", st)
		}
	}
	// No state changed: the key is unknown everywhere, and a check of it is
	// allowed at every node with the whole burst but one left.
	for i := range 3 {
		if v := metric(i, stateBytes); v != before[i] {
			t.Errorf("n%d: state bytes %v after the forgery, %v before", i, v, before[i])
		}
	}
	for i := range 3 {
		r, err := checkAt(c, i, 5*time.Second, "api", "victim", 1)
		if err != nil {
			t.Fatal(err)
		}
		if !r.GetAllowed() || r.GetRemaining() < 2 {
			t.Errorf("n%d: check of the victim key: allowed %v, remaining %d; the forged frame was applied", i, r.GetAllowed(), r.GetRemaining())
		}
	}

	// A holder of the key (a compromised or buggy member) gets its frames
	// past the MAC check, but not a count the rule cannot have produced:
	// gcounter refuses it, n0 counts it as out_of_bounds, and the key stays
	// usable.
	const outOfBounds = `tokenmesh_peer_refused_frames_total{reason="out_of_bounds"}`
	keyed, err := grpcpeer.New(grpcpeer.Config{Self: "n1", ListenAddr: "127.0.0.1:0", SecretKey: key,
		Peers: map[strategy.NodeID]string{"n0": c.Nodes[0].Peer}})
	if err != nil {
		t.Fatal(err)
	}
	defer keyed.Close()
	oob0, mac0 := metric(0, outOfBounds), metric(0, badMAC)
	if err := keyed.Send("n0", cluster.Frame{Rule: "api", Payload: forged}); err != nil {
		t.Fatal(err)
	}
	for metric(0, outOfBounds) < oob0+1 {
		if ctx.Err() != nil {
			t.Fatalf("n0 never counted the out-of-bounds frame (keyed sender: %+v)", keyed.Stats())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if v := metric(0, badMAC); v != mac0 {
		t.Errorf("the keyed frame was counted as a bad MAC (%v -> %v)", mac0, v)
	}
	r, err := checkAt(c, 0, 5*time.Second, "api", "victim", 1)
	if err != nil {
		t.Fatal(err)
	}
	if !r.GetAllowed() {
		t.Errorf("n0 refused the victim key after an out-of-bounds frame: it was applied")
	}
}
