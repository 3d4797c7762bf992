package limiter

import (
	"context"
	"errors"
	"fmt"
	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rule"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/cluster"
)

func startSingle(t *testing.T, rules ...rule.Rule) *Node {
	t.Helper()
	n, err := Start(context.Background(), Config{Name: "solo", Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func limiterFor(t *testing.T, n *Node, rule string) *Limiter {
	t.Helper()
	l, err := n.Limiter(rule)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestAllowExhaustsBurst(t *testing.T) {
	for _, strat := range []string{"", "local", "owner", "gdrl"} {
		t.Run("strategy="+strat, func(t *testing.T) {
			n := startSingle(t, rule.Rule{Name: "api", Rate: perSec(0.001), Burst: 5, Strategy: strat})
			l := limiterFor(t, n, "api")
			if l.Burst() != 5 || l.Limit() != 0.001 || l.Rule() != "api" {
				t.Fatalf("limiter %q: limit %v burst %d", l.Rule(), l.Limit(), l.Burst())
			}
			for i := range 5 {
				if !l.Allow("k") {
					t.Fatalf("request %d refused, want admitted within the burst", i)
				}
			}
			if l.Allow("k") {
				t.Fatal("6th request admitted, want refused")
			}
			if !l.Allow("other") {
				t.Fatal("another key refused: keys must be limited separately")
			}
		})
	}
}

// Reserve under a strategy without waiting mode (gcounter; gdrl has one
// now): a refusal with a retry estimate.
func TestAllowNAndReserve(t *testing.T) {
	n := startSingle(t, rule.Rule{Name: "api", Rate: perSec(10), Burst: 4, Strategy: "gcounter"})
	l := limiterFor(t, n, "api")
	ctx := context.Background()
	if ok, err := l.AllowN(ctx, "k", 3); !ok || err != nil {
		t.Fatalf("AllowN(3) = %v, %v; want admitted", ok, err)
	}
	if _, err := l.AllowN(ctx, "k", 0); err == nil {
		t.Fatal("AllowN(0): no error")
	}
	if _, err := l.AllowN(ctx, "", 1); err == nil {
		t.Fatal("AllowN with an empty key: no error")
	}
	r, err := l.Reserve(ctx, "k", 3)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || r.Allowed() || r.Tokens() != 3 {
		t.Fatalf("Reserve(3) on a drained bucket: ok %v allowed %v, want OK and refused", r.OK(), r.Allowed())
	}
	if d := r.Delay(); d <= 0 || d > 300*time.Millisecond {
		t.Fatalf("Reserve(3) delay %v, want in (0, 300ms] (3 tokens at 10/s)", d)
	}
	if d := r.DelayFrom(time.Now().Add(time.Hour)); d != 0 {
		t.Fatalf("DelayFrom an hour later = %v, want 0", d)
	}
	r.Cancel()
	r, err = l.Reserve(ctx, "k", 5)
	if err != nil {
		t.Fatal(err)
	}
	if r.OK() || r.Allowed() || r.Delay() != InfDuration {
		t.Fatalf("Reserve(5) with burst 4: ok %v allowed %v delay %v, want not OK, InfDuration", r.OK(), r.Allowed(), r.Delay())
	}
	r, err = l.Reserve(ctx, "fresh", 1)
	if err != nil || !r.OK() || !r.Allowed() || r.Delay() != 0 {
		t.Fatalf("Reserve on a fresh key: %+v, %v; want admitted with no delay", r, err)
	}
}

// Reserve under owner (waiting mode, 000 §5.2): tokens the bucket will
// hold within b/r are reserved, FIFO, and admitted with the delay until
// then; beyond b/r it is a refusal with a retry estimate.
func TestReserveWaitingMode(t *testing.T) {
	for _, strat := range []string{"", "owner", "lease"} {
		t.Run("strategy="+strat, func(t *testing.T) {
			var params []string
			if strat == "lease" {
				params = []string{"max_wait=1s"} // lease grants no wait by default
			}
			n := startSingle(t, rule.Rule{Name: "api", Rate: perSec(10), Burst: 4, Strategy: strat, Params: params})
			l := limiterFor(t, n, "api")
			ctx := context.Background()
			if ok, err := l.AllowN(ctx, "k", 4); !ok || err != nil {
				t.Fatalf("AllowN(4) = %v, %v; want admitted", ok, err)
			}
			r1, err := l.Reserve(ctx, "k", 2) // 2 tokens at 10/s: about 200ms
			if err != nil {
				t.Fatal(err)
			}
			if !r1.OK() || !r1.Allowed() {
				t.Fatalf("Reserve(2) on an empty bucket: ok %v allowed %v, want reserved", r1.OK(), r1.Allowed())
			}
			d1 := r1.Delay()
			if d1 <= 100*time.Millisecond || d1 > 200*time.Millisecond {
				t.Fatalf("Reserve(2) delay %v, want in (100ms, 200ms]", d1)
			}
			r2, err := l.Reserve(ctx, "k", 1) // behind r1: about 300ms
			if err != nil || !r2.Allowed() {
				t.Fatalf("second Reserve(1): %+v, %v; want reserved behind the first", r2, err)
			}
			if d2 := r2.Delay(); d2 <= d1 || d2 > 300*time.Millisecond {
				t.Fatalf("second Reserve delay %v, want in (%v, 300ms] (FIFO behind the first)", d2, d1)
			}
			r3, err := l.Reserve(ctx, "k", 3) // about 600ms > b/r = 400ms: refused
			if err != nil || !r3.OK() || r3.Allowed() {
				t.Fatalf("Reserve(3) beyond b/r: %+v, %v; want refused", r3, err)
			}
		})
	}
}

func TestWaitAdmitsAfterRefill(t *testing.T) {
	n := startSingle(t, rule.Rule{Name: "api", Rate: perSec(50), Burst: 1})
	l := limiterFor(t, n, "api")
	if !l.Allow("k") || l.Allow("k") {
		t.Fatal("want one admission then a refusal")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	if err := l.Wait(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 10*time.Millisecond || el > time.Second {
		t.Fatalf("Wait took %v, want about 1/r = 20ms", el)
	}
	// Wait admits at the rate: 5 more take about 100ms.
	start = time.Now()
	for range 5 {
		if err := l.Wait(ctx, "k", 1); err != nil {
			t.Fatal(err)
		}
	}
	if el := time.Since(start); el < 80*time.Millisecond || el > 1500*time.Millisecond {
		t.Fatalf("5 Waits took %v, want about 100ms", el)
	}
}

func TestWaitAboveBurstFailsAtOnce(t *testing.T) {
	n := startSingle(t, rule.Rule{Name: "api", Rate: perSec(50), Burst: 3})
	l := limiterFor(t, n, "api")
	start := time.Now()
	err := l.Wait(context.Background(), "k", 4)
	if !errors.Is(err, ErrExceedsBurst) {
		t.Fatalf("Wait(4) with burst 3: %v, want ErrExceedsBurst", err)
	}
	if el := time.Since(start); el > 50*time.Millisecond {
		t.Fatalf("Wait(4) took %v, want an immediate error", el)
	}
	if !l.Allow("k") {
		t.Fatal("the failed Wait spent tokens")
	}
}

func TestWaitContext(t *testing.T) {
	n := startSingle(t, rule.Rule{Name: "api", Rate: perSec(0.01), Burst: 1})
	l := limiterFor(t, n, "api")
	if !l.Allow("k") {
		t.Fatal("first request refused")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := l.Wait(ctx, "k", 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past the deadline: %v, want DeadlineExceeded", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("Wait returned after %v, want at the 50ms deadline", el)
	}
	ctx, cancel2 := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel2() }()
	if err := l.Wait(ctx, "k", 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait cancelled: %v, want Canceled", err)
	}
	if err := l.Wait(ctx, "k", 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on a cancelled ctx: %v, want Canceled", err)
	}
}

func TestUnknownRuleAndBadConfig(t *testing.T) {
	n := startSingle(t, rule.Rule{Name: "api", Rate: perSec(1), Burst: 1})
	if _, err := n.Limiter("nope"); !errors.Is(err, ErrUnknownRule) {
		t.Fatalf("Limiter(nope): %v, want ErrUnknownRule", err)
	}
	ctx := context.Background()
	for name, cfg := range map[string]Config{
		"no rules":      {},
		"bad rate":      {Rules: []rule.Rule{{Name: "a", Rate: bucket.Rate{Tokens: -1, Per: time.Second}, Burst: 1}}},
		"bad strategy":  {Rules: []rule.Rule{{Name: "a", Rate: perSec(1), Burst: 1, Strategy: "nope"}}},
		"repeated rule": {Rules: []rule.Rule{{Name: "a", Rate: perSec(1), Burst: 1}, {Name: "a", Rate: perSec(1), Burst: 1}}},
		"both":          {Rules: []rule.Rule{{Name: "a", Rate: perSec(1), Burst: 1}}, Peer: &PeerConfig{}, InProcess: &InProcess{}},
	} {
		if n, err := Start(ctx, cfg); err == nil {
			n.Close()
			t.Errorf("%s: Start succeeded", name)
		}
	}
}

func TestClosedNode(t *testing.T) {
	n, err := Start(context.Background(), Config{Rules: []rule.Rule{{Name: "api", Rate: perSec(1), Burst: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	l := limiterFor(t, n, "api")
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := l.AllowN(context.Background(), "k", 1); !errors.Is(err, cluster.ErrClosed) {
		t.Fatalf("AllowN on a closed node: %v, want cluster.ErrClosed", err)
	}
	if l.Allow("k") {
		t.Fatal("Allow on a closed node admitted")
	}
	if err := l.Wait(context.Background(), "k", 1); !errors.Is(err, cluster.ErrClosed) {
		t.Fatalf("Wait on a closed node: %v, want cluster.ErrClosed", err)
	}
}

// admitConcurrently sends per requests for key at every limiter at once and
// returns the total admitted.
func admitConcurrently(t *testing.T, ls []*Limiter, key string, per int) int64 {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, l := range ls {
		for range per {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, err := l.AllowN(ctx, key, 1)
				if err != nil {
					t.Error(err)
				}
				if ok {
					admitted.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	return admitted.Load()
}

func TestInProcessClusterSharesOneLimit(t *testing.T) {
	net := cluster.NewMemNetwork()
	members := []string{"n0", "n1", "n2"}
	epoch := time.Now()
	var ls []*Limiter
	for _, m := range members {
		n, err := Start(context.Background(), Config{
			Name:      m,
			Rules:     []rule.Rule{{Name: "api", Rate: perSec(0.001), Burst: 10, Strategy: "owner", Params: []string{"timeout=2s"}}},
			InProcess: &InProcess{Network: net, Members: members},
			Epoch:     epoch,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		ls = append(ls, limiterFor(t, n, "api"))
	}
	for i := range 5 {
		key := fmt.Sprintf("user-%d", i)
		if got := admitConcurrently(t, ls, key, 8); got != 10 {
			t.Fatalf("key %s: %d admitted across 3 nodes, want the global burst 10", key, got)
		}
		for j, l := range ls {
			if l.Allow(key) {
				t.Fatalf("key %s: node %d admitted after the global burst was spent", key, j)
			}
		}
	}
}

func TestGRPCClusterSharesOneLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("real sockets")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	epoch := time.Now()
	rules := []rule.Rule{{Name: "api", Rate: perSec(0.001), Burst: 6, Strategy: "owner", Params: []string{"timeout=2s"}}}
	start := func(name string, join []string) *Node {
		n, err := Start(ctx, Config{Name: name, Rules: rules, Epoch: epoch, Peer: &PeerConfig{
			ListenAddr: "127.0.0.1:0", GossipAddr: "127.0.0.1:0", Join: join, ProbeInterval: 100 * time.Millisecond,
		}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	a := start("a", nil)
	b := start("b", []string{a.GossipAddr()})
	for len(a.Members()) != 2 || len(b.Members()) != 2 {
		if ctx.Err() != nil {
			t.Fatalf("members: a %v, b %v", a.Members(), b.Members())
		}
		time.Sleep(10 * time.Millisecond)
	}
	ls := []*Limiter{limiterFor(t, a, "api"), limiterFor(t, b, "api")}
	for i := range 3 {
		key := fmt.Sprintf("k%d", i)
		if got := admitConcurrently(t, ls, key, 8); got != 6 {
			t.Fatalf("key %s: %d admitted across 2 gRPC nodes, want the global burst 6", key, got)
		}
	}
}

// TestCentralRefusedInCluster: "central" is one bucket per node when live,
// so a cluster refuses it instead of admitting N times the limit.
func TestCentralRefusedInCluster(t *testing.T) {
	net := cluster.NewMemNetwork()
	_, err := Start(context.Background(), Config{Name: "a", Rules: []rule.Rule{{Name: "r", Rate: perSec(1), Burst: 1, Strategy: "central"}},
		InProcess: &InProcess{Network: net, Members: []string{"a", "b"}}})
	if err == nil || !strings.Contains(err.Error(), `strategy "central"`) || !strings.Contains(err.Error(), "owner") {
		t.Fatalf("central in a 2-node cluster: %v, want an error naming the strategy and owner", err)
	}
	n, err := Start(context.Background(), Config{Name: "solo", Rules: []rule.Rule{{Name: "r", Rate: perSec(1), Burst: 1, Strategy: "central"}}})
	if err != nil {
		t.Fatalf("central on a single node: %v", err)
	}
	_ = n.Close()
	// SetRules makes the same check as Start: refused on a 2-member
	// in-process node (it was refused for networked nodes only).
	b, err := Start(context.Background(), Config{Name: "a", Rules: []rule.Rule{{Name: "r", Rate: perSec(1), Burst: 1}},
		InProcess: &InProcess{Network: net, Members: []string{"a", "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := b.SetRules(ctx, []rule.Rule{{Name: "r", Rate: perSec(1), Burst: 1, Strategy: "central"}}); err == nil || !strings.Contains(err.Error(), `strategy "central"`) {
		t.Fatalf("SetRules to central in a 2-node cluster: %v, want refused", err)
	}
	if _, err := b.SetRules(ctx, []rule.Rule{{Name: "r", Rate: perSec(2), Burst: 1}}); err != nil {
		t.Fatalf("SetRules to owner (the default strategy): %v", err)
	}
}

// freeAddr returns a loopback "host:port" that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestFoundIfAlone: a node whose Join addresses do not answer fails to
// start, unless FoundIfAlone: then it founds the cluster (its gdrl
// strategy starts with the founder's share, so it admits a fresh key's
// whole burst at once) and keeps trying to join, so that it merges with
// the node that later starts at that address.
func TestFoundIfAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("real sockets")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	epoch := time.Now()
	rules := []rule.Rule{{Name: "g", Rate: perSec(1), Burst: 4, Strategy: "gdrl"}}
	bAddr := freeAddr(t)
	peer := func(join []string, alone bool) *PeerConfig {
		return &PeerConfig{ListenAddr: "127.0.0.1:0", GossipAddr: "127.0.0.1:0", Join: join, FoundIfAlone: alone,
			ProbeInterval: 100 * time.Millisecond, ReconnectInterval: time.Second}
	}
	if n, err := Start(ctx, Config{Name: "a", Rules: rules, Epoch: epoch, Peer: peer([]string{bAddr}, false)}); err == nil {
		n.Close()
		t.Fatal("Join to an address nobody answers, without FoundIfAlone: started")
	} else if !strings.Contains(err.Error(), "join") {
		t.Errorf("error %v does not say the join failed", err)
	}

	a, err := Start(ctx, Config{Name: "a", Rules: rules, Epoch: epoch, Peer: peer([]string{bAddr}, true)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// Gossip reports the members to the node asynchronously.
	for m := a.Members(); len(m) != 1 || m[0] != "a"; m = a.Members() {
		if ctx.Err() != nil {
			t.Fatalf("a founded alone: members %v, want [a]", m)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ok, err := limiterFor(t, a, "g").AllowN(ctx, "fresh", 4)
	if err != nil || !ok {
		t.Fatalf("a founder alone holds the whole burst: AllowN(4) = %v, %v", ok, err)
	}

	// b founds its own cluster at the address a keeps trying.
	pb := peer(nil, false)
	pb.GossipAddr = bAddr
	b, err := Start(ctx, Config{Name: "b", Rules: rules, Epoch: epoch, Peer: pb})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for len(a.Members()) != 2 || len(b.Members()) != 2 {
		if ctx.Err() != nil {
			t.Fatalf("a never merged with b (retrying every 1s): members a %v, b %v", a.Members(), b.Members())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// perSec is bucket.PerSecond for the tests' literal rates (it panics on
// an error: a test's typo).
func perSec(tokensPerSec float64) bucket.Rate {
	r, err := bucket.PerSecond(tokensPerSec)
	if err != nil {
		panic(err)
	}
	return r
}
