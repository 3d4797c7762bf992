package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// A gdrl node that joins is not ready until a member pays it its default
// share; founders are ready at once; WaitReady ends with ctx or Close.
func TestReadyJoiner(t *testing.T) {
	g := rule.Rule{Name: "g", Rate: bucket.Rate{Tokens: 100, Per: time.Second}, Burst: 20, Strategy: "gdrl"}
	c := newCluster(t, 2, false, g)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for id, n := range c.nodes {
		if ok, err := n.Ready(ctx); !ok || err != nil {
			t.Fatalf("founder %s: Ready = %v, %v; want true", id, ok, err)
		}
	}

	// A joiner whose only other member never answers holds no share.
	ep, err := NewMemNetwork().Endpoint("j")
	if err != nil {
		t.Fatal(err)
	}
	lone, err := New(Config{Self: "j", Members: []strategy.NodeID{"j", "gone"}, Rules: []rule.Rule{g}, Transport: ep, Epoch: c.epoch, Join: true})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := lone.Ready(ctx); ok || err != nil {
		t.Errorf("unpaid joiner: Ready = %v, %v; want false, nil", ok, err)
	}
	short, scancel := context.WithTimeout(ctx, 50*time.Millisecond)
	err = lone.WaitReady(short)
	scancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("unpaid joiner: WaitReady = %v; want context.DeadlineExceeded", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- lone.WaitReady(ctx) }()
	time.Sleep(2 * ReadyPoll)
	lone.Close()
	if err := <-closed; !errors.Is(err, ErrClosed) {
		t.Errorf("WaitReady across Close = %v; want ErrClosed", err)
	}

	// A joiner the founders answer is paid and becomes ready.
	c.ids = append(c.ids, "n2")
	ep, err = c.net.Endpoint("n2")
	if err != nil {
		t.Fatal(err)
	}
	n2, err := New(Config{Self: "n2", Members: c.ids, Rules: c.rules, Transport: ep, Epoch: c.epoch, Join: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n2.Close() })
	for _, n := range c.nodes {
		if err := n.SetMembers(c.ids); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	if err := n2.WaitReady(ctx); err != nil {
		t.Fatalf("paid joiner: WaitReady = %v", err)
	}
	if waited := time.Since(start); waited >= 4*time.Second {
		t.Errorf("paid joiner ready after %v: as late as gdrl.ReadyWait, not paid", waited)
	}
}
