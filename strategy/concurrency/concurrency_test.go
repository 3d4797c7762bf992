package concurrency

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
)

var three = []strategy.NodeID{"n0", "n1", "n2"}

// newNode builds a node; join_wait is 0 unless params set it (the tests
// count the start's wait as permit_ttl).
func newNode(t *testing.T, self strategy.NodeID, members []strategy.NodeID, params ...string) *Concurrency {
	t.Helper()
	if !slices.ContainsFunc(params, func(p string) bool { return strings.HasPrefix(p, "join_wait=") }) {
		params = append([]string{"join_wait=0s"}, params...)
	}
	s, err := New(strategy.Config{Self: self, Members: members, Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 2,
		Rand: rand.New(rand.NewPCG(1, uint64(len(self)))), Params: mustParams(t, params...)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// keyOwnedBy is a key whose owner among members is want.
func keyOwnedBy(t *testing.T, want strategy.NodeID, members []strategy.NodeID) string {
	for i := range 1000 {
		k := "k" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if rendezvous.Owner(k, members) == want {
			return k
		}
	}
	t.Fatalf("no key owned by %s", want)
	return ""
}

func TestOwnerGrantsUpToLimitAndReleases(t *testing.T) {
	s := newNode(t, "n0", []strategy.NodeID{"n0"}, "limit=2", "permit_ttl=1s")
	var fx strategy.Effects
	s.Start(0, &fx)
	req := func(now time.Duration, id uint64) strategy.Decision {
		d, ok := s.Request(now, strategy.Request{ID: id, Key: "k", Tokens: 1, Arrival: now}, &fx)
		if !ok {
			t.Fatalf("request %d not decided at once on a single node", id)
		}
		return d
	}
	if d := req(500*time.Millisecond, 1); d.Allowed {
		t.Fatalf("granted %+v within permit_ttl of the start", d)
	}
	if r, ok := s.Remaining(500*time.Millisecond, "k"); !ok || r != 0 {
		t.Fatalf("remaining %d (%v) within permit_ttl of the start, want 0", r, ok)
	}
	now := time.Second
	a, b := req(now, 2), req(now, 3)
	if !a.Allowed || !b.Allowed || a.Permit == 0 || a.Permit == b.Permit || a.Expires != now+time.Second {
		t.Fatalf("want two distinct permits expiring at %v, got %+v %+v", now+time.Second, a, b)
	}
	if d := req(now, 4); d.Allowed {
		t.Fatalf("third permit granted above limit 2: %+v", d)
	}
	s.Release(now, "k", a.Permit, &fx)
	s.Release(now, "k", a.Permit, &fx) // idempotent
	if r, _ := s.Remaining(now, "k"); r != 1 {
		t.Fatalf("remaining %d after one release, want 1", r)
	}
	if d := req(now, 5); !d.Allowed {
		t.Fatalf("refused after a release: %+v", d)
	}
	// Never released: b and the last one lapse at now + 1s.
	if d := req(now+time.Second-1, 6); d.Allowed {
		t.Fatalf("granted before the permits lapsed: %+v", d)
	}
	if d := req(now+time.Second, 7); !d.Allowed {
		t.Fatalf("refused after the permits lapsed: %+v", d)
	}
}

// TestTakeoverWaitsForTTL: when the owner crashes, the node that takes
// its keys over refuses them for permit_ttl after its view changed, so
// that the dead owner's permits (still held by clients) have lapsed.
func TestTakeoverWaitsForTTL(t *testing.T) {
	key := keyOwnedBy(t, "n0", three)
	next := rendezvous.Owner(key, three[1:])
	s := newNode(t, next, three, "limit=2", "permit_ttl=1s")
	var fx strategy.Effects
	s.Start(0, &fx)
	crash := 3 * time.Second
	s.SetMembers(crash, three[1:], &fx)
	d, ok := s.Request(crash+time.Second-1, strategy.Request{ID: 1, Key: key, Tokens: 1, Arrival: crash + time.Second - 1}, &fx)
	if !ok || d.Allowed {
		t.Fatalf("new owner granted %+v (decided %v) within permit_ttl of taking the key over", d, ok)
	}
	d, ok = s.Request(crash+time.Second, strategy.Request{ID: 2, Key: key, Tokens: 1, Arrival: crash + time.Second}, &fx)
	if !ok || !d.Allowed {
		t.Fatalf("new owner refused %+v (decided %v) permit_ttl after taking the key over", d, ok)
	}
}

// TestJoinWait: by default a node that starts waits permit_ttl twice: once
// for its own former permits, once for those its peers grant as its keys'
// owner until they see it back.
func TestJoinWait(t *testing.T) {
	s := newNode(t, "n0", []strategy.NodeID{"n0"}, "permit_ttl=1s", "join_wait=1s")
	var fx strategy.Effects
	s.Start(0, &fx)
	for _, tc := range []struct {
		at   time.Duration
		want bool
	}{{time.Second, false}, {2*time.Second - 1, false}, {2 * time.Second, true}} {
		if d, _ := s.Request(tc.at, strategy.Request{ID: 1, Key: "k", Tokens: 1, Arrival: tc.at}, &fx); d.Allowed != tc.want {
			t.Errorf("at %v: allowed %v, want %v", tc.at, d.Allowed, tc.want)
		}
	}
	d, err := New(strategy.Config{Self: "n0", Members: []strategy.NodeID{"n0"}, Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 1,
		Rand: rand.New(rand.NewPCG(1, 1)), Params: mustParams(t, "permit_ttl=1s", "lease=1", "lease_ttl=500ms")})
	if err != nil {
		t.Fatal(err)
	}
	if d.startWait != 1500*time.Millisecond {
		t.Errorf("default join_wait with leases %v, want permit_ttl + lease_ttl = 1.5s", d.startWait)
	}
}

func TestBadParams(t *testing.T) {
	for _, tc := range []struct{ param, want string }{
		{"limit=0", "limit 0"},
		{"permit_ttl=0s", "permit_ttl 0s"},
		{"permit_ttl=2h", "permit_ttl 2h0m0s"},
		{"timeout=0s", "timeout 0s"},
		{"ttl=1s", "unknown parameter ttl"},
	} {
		_, err := New(strategy.Config{Self: "n0", Members: []strategy.NodeID{"n0"}, Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 1,
			Rand: rand.New(rand.NewPCG(1, 1)), Params: mustParams(t, tc.param)})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", tc.param, err, tc.want)
		}
	}
}
