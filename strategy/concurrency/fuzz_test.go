package concurrency

import (
	"strings"
	"testing"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// FuzzReceive feeds arbitrary payloads to an owner holding permits: it
// must never panic, a payload it refuses must change nothing, and what
// it accepts never takes a key above its limit.
func FuzzReceive(f *testing.F) {
	for _, m := range []*peerv1.ConcurrencyMessage{
		{Body: &peerv1.ConcurrencyMessage_Acquire{Acquire: &peerv1.ConcurrencyAcquire{RequestId: 1, Key: "k", Weight: 1}}},
		{Body: &peerv1.ConcurrencyMessage_Acquire{Acquire: &peerv1.ConcurrencyAcquire{RequestId: 1, Key: "k", Weight: 9}}},
		{Body: &peerv1.ConcurrencyMessage_Verdict{Verdict: &peerv1.ConcurrencyVerdict{RequestId: 2, Key: "k", Granted: true, Permit: 5}}},
		{Body: &peerv1.ConcurrencyMessage_Release{Release: &peerv1.ConcurrencyRelease{Key: "k", Permit: 5}}},
		{Body: &peerv1.ConcurrencyMessage_LeaseAsk{LeaseAsk: &peerv1.ConcurrencyLeaseAsk{RequestId: 3, Key: "k", Slots: 1}}},
		{Body: &peerv1.ConcurrencyMessage_LeaseGrant{LeaseGrant: &peerv1.ConcurrencyLeaseGrant{RequestId: 1, Key: "k", Lease: 9, Slots: 1}}},
		{Body: &peerv1.ConcurrencyMessage_LeaseReturn{LeaseReturn: &peerv1.ConcurrencyLeaseReturn{Key: "k", Lease: 9, Slots: 1}}},
		{},
	} {
		f.Add(encode(m))
	}
	f.Add([]byte{0xff, 0x01})
	f.Fuzz(func(t *testing.T, payload []byte) {
		s := newNode(t, "n0", []strategy.NodeID{"n0"}, "limit=2", "permit_ttl=1s", "lease=1", "lease_ttl=500ms")
		var fx strategy.Effects
		s.Start(0, &fx)
		now := 3 * time.Second
		if d, _ := s.Request(now, strategy.Request{ID: 1, Key: "k", Tokens: 1, Arrival: now}, &fx); !d.Allowed {
			t.Fatal("setup: refused")
		}
		before := s.StateBytes()
		fx.Reset()
		err := s.Receive(now, "n1", payload, &fx)
		if err != nil && (s.StateBytes() != before || len(fx.Messages) != 0 || len(fx.Decisions) != 0) {
			t.Fatalf("refused payload (%v) changed state or had effects", err)
		}
		if got := s.InFlight(now, "k"); got > 2 {
			t.Fatalf("%d in flight above the limit 2", got)
		}
	})
}

// TestReceiveRefusesOutOfBounds names the field of each bad frame.
func TestReceiveRefusesOutOfBounds(t *testing.T) {
	s := newNode(t, "n0", []strategy.NodeID{"n0"}, "limit=2")
	var fx strategy.Effects
	s.Start(0, &fx)
	for _, tc := range []struct {
		m    *peerv1.ConcurrencyMessage
		want string
	}{
		{&peerv1.ConcurrencyMessage{}, "no body"},
		{&peerv1.ConcurrencyMessage{Body: &peerv1.ConcurrencyMessage_Acquire{Acquire: &peerv1.ConcurrencyAcquire{Key: "k", Weight: 3}}}, "weight 3 outside [1, limit 2]"},
		{&peerv1.ConcurrencyMessage{Body: &peerv1.ConcurrencyMessage_Acquire{Acquire: &peerv1.ConcurrencyAcquire{Key: "", Weight: 1}}}, "empty key"},
		{&peerv1.ConcurrencyMessage{Body: &peerv1.ConcurrencyMessage_Verdict{Verdict: &peerv1.ConcurrencyVerdict{Key: "k", Granted: true}}}, "granted true with permit 0"},
		{&peerv1.ConcurrencyMessage{Body: &peerv1.ConcurrencyMessage_Release{Release: &peerv1.ConcurrencyRelease{Key: "k"}}}, "permit 0"},
		{&peerv1.ConcurrencyMessage{Body: &peerv1.ConcurrencyMessage_LeaseAsk{LeaseAsk: &peerv1.ConcurrencyLeaseAsk{Key: "k", Slots: 3}}}, "slots 3 outside [1, limit 2]"},
		{&peerv1.ConcurrencyMessage{Body: &peerv1.ConcurrencyMessage_LeaseGrant{LeaseGrant: &peerv1.ConcurrencyLeaseGrant{Key: "k", Lease: 4}}}, "lease 4 with slots 0"},
		{&peerv1.ConcurrencyMessage{Body: &peerv1.ConcurrencyMessage_LeaseReturn{LeaseReturn: &peerv1.ConcurrencyLeaseReturn{Key: "k", Slots: 1}}}, "lease 0, slots 1"},
	} {
		err := s.Receive(0, "n1", encode(tc.m), &fx)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one naming %q", err, tc.want)
		}
	}
	if err := s.Receive(0, "n1", []byte{0xff}, &fx); err == nil || !strings.Contains(err.Error(), "does not decode") {
		t.Errorf("garbage: error %v", err)
	}
}
