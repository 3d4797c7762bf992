package membership

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/cluster/grpcpeer"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// recorder keeps a member's OnChange calls.
type recorder struct {
	mu    sync.Mutex
	calls []map[strategy.NodeID]string
}

func (r *recorder) onChange(m map[strategy.NodeID]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, m)
}

func (r *recorder) last() map[strategy.NodeID]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.calls) == 0 {
		return nil
	}
	return r.calls[len(r.calls)-1]
}

func testConfig(name string, key []byte, join []string, onChange func(map[strategy.NodeID]string)) Config {
	return Config{
		NodeName: name, BindAddr: "127.0.0.1", BindPort: 0, AdvertiseAddr: "127.0.0.1",
		Join: join, SecretKey: key, PeerAddr: "peer-" + name,
		ProbeInterval: 100 * time.Millisecond, ProbeTimeout: 50 * time.Millisecond,
		GossipInterval: 20 * time.Millisecond, SuspicionMult: 3, TCPTimeout: time.Second,
		DeadNodeReclaimTime: 50 * time.Millisecond, OnChange: onChange,
	}
}

func start(t *testing.T, name string, key []byte, join []string, onChange func(map[strategy.NodeID]string)) *Membership {
	t.Helper()
	m, err := New(testConfig(name, key, join, onChange))
	if err != nil {
		t.Fatalf("New %s: %v", name, err)
	}
	t.Cleanup(func() { m.Shutdown() })
	return m
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	begin := time.Now()
	for !cond() {
		if time.Since(begin) > d {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(begin)
}

func want(names ...string) map[strategy.NodeID]string {
	m := map[strategy.NodeID]string{}
	for _, n := range names {
		m[strategy.NodeID(n)] = "peer-" + n
	}
	return m
}

var key1 = bytes.Repeat([]byte{1}, 32)

// three starts n0, n1, n2 (n1 and n2 joining through n0).
func three(t *testing.T, key []byte) ([]*Membership, []*recorder) {
	t.Helper()
	recs := []*recorder{{}, {}, {}}
	ms := []*Membership{start(t, "n0", key, nil, recs[0].onChange)}
	for i := 1; i < 3; i++ {
		ms = append(ms, start(t, fmt.Sprintf("n%d", i), key, []string{ms[0].LocalAddr()}, recs[i].onChange))
	}
	all := want("n0", "n1", "n2")
	waitFor(t, 5*time.Second, "members do not all see each other", func() bool {
		for i := range ms {
			if !maps.Equal(ms[i].Members(), all) || !maps.Equal(recs[i].last(), all) {
				return false
			}
		}
		return true
	})
	return ms, recs
}

func TestJoinAndCrash(t *testing.T) {
	ms, recs := three(t, key1)
	for i, r := range recs {
		r.mu.Lock()
		for _, c := range r.calls {
			if _, ok := c[strategy.NodeID(fmt.Sprintf("n%d", i))]; !ok {
				t.Errorf("n%d: OnChange without Self: %v", i, c)
			}
		}
		r.mu.Unlock()
	}

	if err := ms[2].Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := ms[2].Shutdown(); err != nil { // idempotent
		t.Fatal(err)
	}
	n := len(recs[2].calls)
	took := waitFor(t, 8*time.Second, "crashed n2 not detected", func() bool {
		want := want("n0", "n1")
		return maps.Equal(ms[0].Members(), want) && maps.Equal(ms[1].Members(), want) &&
			maps.Equal(recs[0].last(), want) && maps.Equal(recs[1].last(), want)
	})
	t.Logf("crash detected in %v", took)
	time.Sleep(50 * time.Millisecond)
	recs[2].mu.Lock()
	defer recs[2].mu.Unlock()
	if len(recs[2].calls) != n {
		t.Fatal("OnChange called after Shutdown")
	}
}

func TestLeave(t *testing.T) {
	ms, recs := three(t, key1)
	begin := time.Now()
	if err := ms[1].Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	// Failure detection takes ~500ms at the test timers; a leave is gossiped
	// at once.
	waitFor(t, 2*time.Second, "departed n1 still listed", func() bool {
		want := want("n0", "n2")
		return maps.Equal(recs[0].last(), want) && maps.Equal(recs[2].last(), want)
	})
	t.Logf("leave seen in %v", time.Since(begin))
}

// TestRestart: a crashed member restarts under its name at a new port and
// is taken back.
func TestRestart(t *testing.T) {
	ms, recs := three(t, key1)
	ms[2].Shutdown()
	waitFor(t, 8*time.Second, "crashed n2 not detected", func() bool {
		return maps.Equal(recs[0].last(), want("n0", "n1"))
	})
	time.Sleep(100 * time.Millisecond)
	cfg := testConfig("n2", key1, []string{ms[0].LocalAddr()}, nil)
	cfg.PeerAddr = "peer-n2-new"
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown() })
	all := want("n0", "n1", "n2")
	all["n2"] = "peer-n2-new"
	waitFor(t, 5*time.Second, "restarted n2 not taken back", func() bool {
		return maps.Equal(recs[0].last(), all) && maps.Equal(recs[1].last(), all) && maps.Equal(m.Members(), all)
	})
}

// TestRestartNewAddress: a member restarted at a new port at once (before
// the survivor declared its old incarnation dead: kill -9 and a fast
// restart) is refused as a name conflict at first; the survivor remembers
// the claim and its reconnect loop takes the member back once the old
// incarnation is dead for DeadNodeReclaimTime (the default, 1 s). With
// memberlist's own rule (negative: not until the dead member is
// forgotten, 30 probe intervals after its death) it stays out for the
// length of the test.
func TestRestartNewAddress(t *testing.T) {
	for _, tc := range []struct {
		reclaim time.Duration
		back    bool
	}{{0, true}, {-1, false}} {
		t.Run(fmt.Sprint(tc.reclaim), func(t *testing.T) {
			recs := []*recorder{{}, {}}
			ms := make([]*Membership, 2)
			for i := range ms {
				var join []string
				if i > 0 {
					join = []string{ms[0].LocalAddr()}
				}
				cfg := testConfig(fmt.Sprintf("n%d", i), key1, join, recs[i].onChange)
				cfg.DeadNodeReclaimTime = tc.reclaim
				cfg.ReconnectInterval = 200 * time.Millisecond
				// memberlist forgets the dead after 30 probe intervals
				// (4.5 s): the case without reclaim stays out until then.
				cfg.ProbeInterval, cfg.ProbeTimeout = 150*time.Millisecond, 75*time.Millisecond
				m, err := New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { m.Shutdown() })
				ms[i] = m
			}
			waitFor(t, 5*time.Second, "n0 and n1 do not see each other", func() bool {
				return maps.Equal(recs[0].last(), want("n0", "n1"))
			})
			ms[1].Shutdown()
			cfg := testConfig("n1", key1, []string{ms[0].LocalAddr()}, nil)
			cfg.PeerAddr = "peer-n1-new"
			cfg.ReconnectInterval = 200 * time.Millisecond
			m, err := New(cfg) // the join answers; n0 refuses the name
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { m.Shutdown() })
			all := want("n0", "n1")
			all["n1"] = "peer-n1-new"
			begin := time.Now()
			for time.Since(begin) < 3500*time.Millisecond && !maps.Equal(recs[0].last(), all) {
				time.Sleep(20 * time.Millisecond)
			}
			back := maps.Equal(recs[0].last(), all)
			t.Logf("reclaim %v: restarted member back=%v after %v", tc.reclaim, back, time.Since(begin))
			if back != tc.back {
				t.Fatalf("reclaim %v: restarted member taken back within 3.5s = %v, want %v (n0 sees %v)", tc.reclaim, back, tc.back, recs[0].last())
			}
		})
	}
}

func TestWrongKeyCannotJoin(t *testing.T) {
	ms, _ := three(t, key1)
	for _, key := range [][]byte{bytes.Repeat([]byte{2}, 32), bytes.Repeat([]byte{1}, 16), nil} {
		m, err := New(testConfig("intruder", key, []string{ms[0].LocalAddr()}, nil))
		if err == nil {
			m.Shutdown()
			t.Fatalf("key %x: join succeeded", key)
		}
	}
	time.Sleep(300 * time.Millisecond)
	for i, m := range ms {
		if _, ok := m.Members()["intruder"]; ok {
			t.Fatalf("n%d lists the intruder", i)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{NodeName: "a", SecretKey: []byte("short")},
		{NodeName: "a", PeerAddr: string(make([]byte, 1000))},
	} {
		if m, err := New(cfg); err == nil {
			m.Shutdown()
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}

// TestOwnerFailover runs the owner strategy over grpcpeer with membership
// wired in: after the owner of a key crashes, the survivors answer for it.
func TestOwnerFailover(t *testing.T) {
	ids := []strategy.NodeID{"n0", "n1", "n2"}
	epoch := time.Now()
	r := rule.Rule{Name: "api", Rate: bucket.Rate{Tokens: 1, Per: time.Hour}, Burst: 5, Strategy: "owner",
		Params: []string{"hold=0s", "timeout=2s"}}
	nodes := map[strategy.NodeID]*cluster.Node{}
	mems := map[strategy.NodeID]*Membership{}
	recs := map[strategy.NodeID]*recorder{}
	var join []string
	for _, id := range ids {
		tr, err := grpcpeer.New(grpcpeer.Config{Self: id, ListenAddr: "127.0.0.1:0"})
		if err != nil {
			t.Fatal(err)
		}
		n, err := cluster.New(cluster.Config{Self: id, Rules: []rule.Rule{r}, Transport: tr, Seed: 7, Epoch: epoch})
		if err != nil {
			tr.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		nodes[id] = n
		rec := &recorder{}
		recs[id] = rec
		wire := Wire(n, tr)
		cfg := testConfig(string(id), key1, join, func(m map[strategy.NodeID]string) {
			wire(m)
			rec.onChange(m)
		})
		cfg.PeerAddr = tr.Addr()
		m, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Shutdown() })
		mems[id] = m
		join = []string{mems["n0"].LocalAddr()}
	}
	sees := func(id strategy.NodeID, members ...strategy.NodeID) bool {
		got := recs[id].last()
		return slices.Equal(slices.Sorted(maps.Keys(got)), members)
	}
	waitFor(t, 5*time.Second, "nodes do not see each other", func() bool {
		return sees("n0", ids...) && sees("n1", ids...) && sees("n2", ids...)
	})

	var key string
	for i := range 1000 {
		if k := fmt.Sprintf("key-%d", i); rendezvous.Owner(k, ids) == "n1" {
			key = k
			break
		}
	}
	check := func(id strategy.NodeID) cluster.CheckResult {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d, err := nodes[id].Check(ctx, "api", key, 1)
		if err != nil {
			t.Fatalf("check via %s: %v", id, err)
		}
		return d
	}
	for i := range 5 {
		if d := check("n0"); !d.Allowed || !d.Async {
			t.Fatalf("request %d via n0: %+v, want allowed by the owner n1", i, d)
		}
	}
	if d := check("n2"); d.Allowed || !d.Async {
		t.Fatalf("request via n2: %+v, want the owner's refusal", d)
	}

	// n1 crashes, after its sync interval (10ms) has shipped the drained
	// level to the key's replica.
	time.Sleep(50 * time.Millisecond)
	mems["n1"].Shutdown()
	nodes["n1"].Close()
	took := waitFor(t, 8*time.Second, "survivors do not drop n1", func() bool {
		return sees("n0", "n0", "n2") && sees("n2", "n0", "n2")
	})
	t.Logf("crash detected in %v", took)

	// The key has a new owner among the survivors: its replica (owner's
	// replicas=2), which continues from the drained level n1 shipped to it,
	// not from a fresh bucket; both survivors answer for it, agreeing.
	newOwner := rendezvous.Owner(key, []strategy.NodeID{"n0", "n2"})
	other := strategy.NodeID("n0")
	if newOwner == "n0" {
		other = "n2"
	}
	if d := check(other); d.Allowed || !d.Async || d.Wait > time.Second {
		t.Fatalf("request via %s after failover: %+v, want refused by %s at once (the replicated level is drained)", other, d, newOwner)
	}
	if d := check(newOwner); d.Allowed || d.Async {
		t.Fatalf("request at the new owner %s: %+v, want a synchronous refusal", newOwner, d)
	}
}
