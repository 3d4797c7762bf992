package cluster

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/rule"
)

// TestAcquireRelease: on three nodes, a concurrency rule of limit 3: no
// permit within permit_ttl of the start; then 12 concurrent acquires of
// one key spread over the nodes get exactly 3 permits, distinct, expiring
// about permit_ttl from now; releasing one (at another node than the one
// that acquired it) lets exactly one more in; a permit never released
// lapses. Acquire under a strategy without permits is ErrNoPermits.
func TestAcquireRelease(t *testing.T) {
	const ttl = 400 * time.Millisecond
	c := newCluster(t, 3, false, rule.Rule{Name: "c", Rate: slow, Burst: 1, Strategy: "concurrency", Params: []string{"limit=3", "permit_ttl=400ms", "timeout=1s"}},
		ownerRule())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r, err := c.nodes["n0"].Acquire(ctx, "c", "k", 1); err != nil || r.Granted || r.Limit != 3 {
		t.Fatalf("acquire right after the start: %+v, %v; want refused, limit 3", r, err)
	}
	time.Sleep(2*ttl + 50*time.Millisecond) // permit_ttl, then join_wait (default: permit_ttl)
	var mu sync.Mutex
	var got []Permit
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := c.nodes[c.ids[i%3]].Acquire(ctx, "c", "k", 1)
			if err != nil {
				t.Error(err)
			}
			if r.Granted {
				mu.Lock()
				got = append(got, r.Permit)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(got) != 3 {
		t.Fatalf("%d permits granted of 12 acquires, want the limit 3", len(got))
	}
	seen := map[uint64]bool{}
	for _, p := range got {
		if p.ID == 0 || seen[p.ID] || time.Until(p.Expires) > ttl || time.Until(p.Expires) < ttl/2 {
			t.Fatalf("permits %+v: want distinct non-zero ids expiring within %v", got, ttl)
		}
		seen[p.ID] = true
	}
	if err := c.nodes["n2"].Release(ctx, "c", "k", got[0].ID); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		r, err := c.nodes["n1"].Acquire(ctx, "c", "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		if r.Granted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the release never reached the owner")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if r, _ := c.nodes["n0"].Acquire(ctx, "c", "k", 1); r.Granted {
		t.Fatal("a fourth permit granted after one release")
	}
	time.Sleep(ttl)
	if r, _ := c.nodes["n0"].Acquire(ctx, "c", "k", 1); !r.Granted {
		t.Fatal("refused after every permit lapsed")
	}
	if _, err := c.nodes["n0"].Acquire(ctx, "api", "k", 1); !errors.Is(err, ErrNoPermits) {
		t.Fatalf("Acquire under owner: %v, want ErrNoPermits", err)
	}
	if err := c.nodes["n0"].Release(ctx, "c", "k", 0); err == nil {
		t.Fatal("Release of permit 0 accepted")
	}
}

// TestAcquireWait: limit 1 on two nodes: an acquire that waits (at the
// node that does not own the key) gets the permit once the holder
// releases it, well before its max wait; without a wait it is refused.
func TestAcquireWait(t *testing.T) {
	c := newCluster(t, 2, false, rule.Rule{Name: "c", Rate: slow, Burst: 1, Strategy: "concurrency", Params: []string{"limit=1", "permit_ttl=300ms", "timeout=1s"}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	time.Sleep(650 * time.Millisecond) // permit_ttl + join_wait
	key := keyOwnedBy(t, "n0", c.ids)
	held, err := c.nodes["n0"].Acquire(ctx, "c", key, 1)
	if err != nil || !held.Granted {
		t.Fatalf("first acquire: %+v %v", held, err)
	}
	if r, err := c.nodes["n1"].Acquire(ctx, "c", key, 1); err != nil || r.Granted {
		t.Fatalf("acquire without a wait on a full key: %+v %v, want refused", r, err)
	}
	done := make(chan AcquireResult, 1)
	start := time.Now()
	go func() {
		r, err := c.nodes["n1"].AcquireWait(ctx, "c", key, 1, 5*time.Second)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	time.Sleep(50 * time.Millisecond)
	if err := c.nodes["n0"].Release(ctx, "c", key, held.Permit.ID); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if !r.Granted || time.Since(start) > 2*time.Second {
		t.Fatalf("waiting acquire: %+v after %v, want granted soon after the release", r, time.Since(start))
	}
	if _, err := c.nodes["n1"].AcquireWait(ctx, "c", key, 1, -time.Second); err == nil {
		t.Fatal("a negative max wait accepted")
	}
}
