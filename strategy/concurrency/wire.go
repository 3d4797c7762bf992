package concurrency

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// MaxKeyBytes bounds a key in a peer message (the cluster's own limit on
// request keys, strategy.MaxKeyStateBytes).
const MaxKeyBytes = strategy.MaxKeyStateBytes

// decode decodes and checks a peer's payload before any handler may
// change state (api/peer/v1/concurrency.proto). Errors name the sender,
// the message kind, the field and its value: a payload that does not
// decode, no body, an empty, over-long or non-UTF-8 key, an acquire's
// weight outside [1, limit] or max_wait_ns outside [0, MaxWait], a granted verdict without a permit or a
// refused one with a permit, a release of permit 0, a lease ask's slots
// outside [1, limit], a lease grant with a lease but no slots (or the
// reverse) or above limit, a lease return without a lease or with slots
// outside [1, limit].
func (c *Concurrency) decode(from strategy.NodeID, payload []byte) (*peerv1.ConcurrencyMessage, error) {
	var m peerv1.ConcurrencyMessage
	if err := proto.Unmarshal(payload, &m); err != nil {
		return nil, fmt.Errorf("concurrency: message from %s does not decode: %w", from, err)
	}
	var kind string
	var err error
	switch b := m.Body.(type) {
	case *peerv1.ConcurrencyMessage_Acquire:
		kind, err = "acquire", c.checkAcquire(b.Acquire)
	case *peerv1.ConcurrencyMessage_Verdict:
		kind, err = "verdict", checkVerdict(b.Verdict)
	case *peerv1.ConcurrencyMessage_Release:
		kind, err = "release", checkRelease(b.Release)
	case *peerv1.ConcurrencyMessage_LeaseAsk:
		kind, err = "lease ask", c.checkLeaseAsk(b.LeaseAsk)
	case *peerv1.ConcurrencyMessage_LeaseGrant:
		kind, err = "lease grant", c.checkLeaseGrant(b.LeaseGrant)
	case *peerv1.ConcurrencyMessage_LeaseReturn:
		kind, err = "lease return", c.checkLeaseReturn(b.LeaseReturn)
	default:
		return nil, fmt.Errorf("concurrency: message from %s has no body", from)
	}
	if err != nil {
		return nil, fmt.Errorf("concurrency: %s from %s: %w", kind, from, err)
	}
	return &m, nil
}

// checkAcquire: a key (checkKey), a weight in [1, limit], max_wait_ns in
// [0, MaxWait].
func (c *Concurrency) checkAcquire(a *peerv1.ConcurrencyAcquire) error {
	if err := checkKey(a.Key); err != nil {
		return err
	}
	if w := a.Weight; w < 1 || w > c.limit {
		return fmt.Errorf("key %q: weight %d outside [1, limit %d]", a.Key, w, c.limit)
	}
	if w := a.MaxWaitNs; w < 0 || w > int64(MaxWait) {
		return fmt.Errorf("key %q: max_wait_ns %d outside [0, %v]", a.Key, w, MaxWait)
	}
	return nil
}

// checkVerdict: a key, waited_ns not negative and 0 on a refusal, a
// permit exactly when granted.
func checkVerdict(v *peerv1.ConcurrencyVerdict) error {
	if err := checkKey(v.Key); err != nil {
		return err
	}
	if v.WaitedNs < 0 || (v.WaitedNs > 0 && !v.Granted) {
		return fmt.Errorf("key %q: waited_ns %d (not negative, 0 on a refusal)", v.Key, v.WaitedNs)
	}
	if v.Granted != (v.Permit != 0) {
		return fmt.Errorf("key %q: granted %v with permit %d (a grant has a permit, a refusal none)", v.Key, v.Granted, v.Permit)
	}
	return nil
}

// checkRelease: a key and a permit other than 0.
func checkRelease(r *peerv1.ConcurrencyRelease) error {
	if err := checkKey(r.Key); err != nil {
		return err
	}
	if r.Permit == 0 {
		return fmt.Errorf("key %q: permit 0 (no permit has id 0)", r.Key)
	}
	return nil
}

// checkLeaseAsk: a key and slots in [1, limit].
func (c *Concurrency) checkLeaseAsk(a *peerv1.ConcurrencyLeaseAsk) error {
	if err := checkKey(a.Key); err != nil {
		return err
	}
	if a.Slots < 1 || a.Slots > c.limit {
		return fmt.Errorf("key %q: slots %d outside [1, limit %d]", a.Key, a.Slots, c.limit)
	}
	return nil
}

// checkLeaseGrant: a key, and a lease with 1 to limit slots or neither.
func (c *Concurrency) checkLeaseGrant(g *peerv1.ConcurrencyLeaseGrant) error {
	if err := checkKey(g.Key); err != nil {
		return err
	}
	if g.Slots < 0 || g.Slots > c.limit || (g.Lease == 0) != (g.Slots == 0) {
		return fmt.Errorf("key %q: lease %d with slots %d (a grant has a lease and 1 to limit %d slots, a refusal neither)", g.Key, g.Lease, g.Slots, c.limit)
	}
	return nil
}

// checkLeaseReturn: a key, a lease and slots in [1, limit].
func (c *Concurrency) checkLeaseReturn(r *peerv1.ConcurrencyLeaseReturn) error {
	if err := checkKey(r.Key); err != nil {
		return err
	}
	if r.Lease == 0 || r.Slots < 1 || r.Slots > c.limit {
		return fmt.Errorf("key %q: lease %d, slots %d (want a lease and 1 to limit %d slots)", r.Key, r.Lease, r.Slots, c.limit)
	}
	return nil
}

// checkKey refuses an empty, over-long (above MaxKeyBytes) or non-UTF-8
// key.
func checkKey(k string) error {
	switch {
	case k == "":
		return fmt.Errorf("empty key")
	case len(k) > MaxKeyBytes:
		return fmt.Errorf("key of %d bytes is above the limit of %d", len(k), MaxKeyBytes)
	case !utf8.ValidString(k):
		return fmt.Errorf("key %q is not valid UTF-8", k)
	}
	return nil
}

func encode(m *peerv1.ConcurrencyMessage) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic("concurrency: encoding a peer message: " + err.Error()) // only for invalid UTF-8, which checkKey refuses first
	}
	return b
}
