package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/rule"
)

// checkItem is CheckItem with a test deadline; it fails t on an error.
func checkItem(t *testing.T, n *Node, it BatchItem) CheckResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, err := n.CheckItem(ctx, it)
	if err != nil {
		t.Fatalf("CheckItem(%+v): %v", it, err)
	}
	return d
}

// Under owner, a check carrying an earlier edge time (CreatedAtUnixNs) is decided
// before one that reached the node first with a later edge time, as long
// as both are in the ordering buffer (hold): the key's one token goes to
// the request the edge saw first. Without edge times the node's own order
// wins (the control), and under a strategy that decides at once (local)
// edge times are ignored.
func TestCreatedAtOrdersOwnerRequests(t *testing.T) {
	const hold = 300 * time.Millisecond
	for _, tc := range []struct {
		name        string
		strategy    string
		edgeTimes   bool
		firstSentOK bool // the check sent first (with the later edge time) is admitted
	}{
		{"owner with edge times", "owner", true, false},
		{"owner without edge times", "owner", false, true},
		{"local ignores edge times", "local", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rule.Rule{Name: "r", Rate: slow, Burst: 1, Strategy: tc.strategy}
			if tc.strategy == "owner" {
				r.Params = []string{"hold=" + hold.String()}
			}
			n := newCluster(t, 1, false, r).nodes["n0"]
			now := time.Now()
			late, early := BatchItem{Rule: "r", Key: "k", Tokens: 1}, BatchItem{Rule: "r", Key: "k", Tokens: 1}
			if tc.edgeTimes {
				late.CreatedAtUnixNs = now.UnixNano()
				early.CreatedAtUnixNs = now.Add(-20 * time.Millisecond).UnixNano()
			}
			first := make(chan CheckResult, 1)
			go func() { first <- checkItem(t, n, late) }()
			// The first check is in the node's ordering buffer (hold) long
			// before it is decided; then the second one comes.
			time.Sleep(hold / 6)
			second := checkItem(t, n, early)
			d := <-first
			if d.Allowed != tc.firstSentOK || second.Allowed == tc.firstSentOK {
				t.Errorf("first sent (edge time later): allowed=%v; second sent (edge time earlier): allowed=%v; want the first allowed=%v and the other not",
					d.Allowed, second.Allowed, tc.firstSentOK)
			}
		})
	}
}

// Edge times are clamped to the node's clock: one in the future counts as
// now (the key is not held back for it), one long ago as MaxCreatedAge ago
// (it takes no more than the tokens the bucket held all along since then),
// and a negative one is refused with an error naming it, changing nothing.
func TestCreatedAtClampedAndValidated(t *testing.T) {
	r := rule.Rule{Name: "r", Rate: slow, Burst: 2, Strategy: "owner", Params: []string{"hold=20ms"}}
	n := newCluster(t, 1, false, r).nodes["n0"]
	now := time.Now()
	future := BatchItem{Rule: "r", Key: "k", Tokens: 1, CreatedAtUnixNs: now.Add(time.Hour).UnixNano()}
	start := time.Now()
	if d := checkItem(t, n, future); !d.Allowed {
		t.Fatalf("a check with an edge time an hour ahead: %+v, want allowed", d)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("a check with an edge time an hour ahead took %v: it was held for its time, not clamped to now", el)
	}
	past := BatchItem{Rule: "r", Key: "k", Tokens: 1, CreatedAtUnixNs: now.Add(-time.Hour).UnixNano()}
	if d := checkItem(t, n, past); !d.Allowed {
		t.Errorf("a check with an edge time an hour ago on a key with a token left: %+v, want allowed", d)
	}
	// The burst of 2 is spent: an hour-old edge time must not refill it.
	if d := checkItem(t, n, past); d.Allowed {
		t.Errorf("a third check (burst 2, rate 1/h) with an edge time an hour ago was allowed: the old time refilled the bucket")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := n.CheckItem(ctx, BatchItem{Rule: "r", Key: "k2", Tokens: 1, CreatedAtUnixNs: -1})
	if err == nil || !strings.Contains(err.Error(), "created at -1 ns is negative") {
		t.Errorf("CheckItem with CreatedAtUnixNs -1: %v, want an error naming it", err)
	}
	if _, err := n.CheckBatch(ctx, []BatchItem{{Rule: "r", Key: "k2", Tokens: 1}, {Rule: "r", Key: "k2", Tokens: 1, CreatedAtUnixNs: -5}}); err == nil ||
		!strings.Contains(err.Error(), "item 1:") || !strings.Contains(err.Error(), "created at -5 ns") {
		t.Errorf("CheckBatch with an item's CreatedAtUnixNs -5: %v, want an error naming item 1", err)
	}
	if d := check(t, n, "r", "k2", 2); !d.Allowed {
		t.Errorf("key k2 after the refused calls: %+v, want its full burst (the refused input changed state)", d)
	}
}

func TestArrivalAtClamps(t *testing.T) {
	n := newCluster(t, 1, false, rule.Rule{Name: "r", Rate: slow, Burst: 1, Strategy: "owner"}).nodes["n0"]
	base := n.wallBase()
	now := 10 * time.Second
	for _, tc := range []struct {
		created int64
		want    time.Duration
	}{
		{base + int64(now), now},
		{base + int64(now) - 5e6, now - 5*time.Millisecond},
		{base + int64(now) + 1e9, now},
		{base + int64(now) - 1e9, now - MaxCreatedAge},
		{1, now - MaxCreatedAge},
	} {
		if got := n.arrivalAt(tc.created, now); got != tc.want {
			t.Errorf("arrivalAt(base%+d ns, now %v) = %v, want %v", tc.created-base, now, got, tc.want)
		}
	}
	if got := n.arrivalAt(base-1e6, 50*time.Millisecond); got != 0 {
		t.Errorf("arrivalAt at now 50ms of a time 51 ms ago = %v, want 0 (no time before the time base)", got)
	}
}
