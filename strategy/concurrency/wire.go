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
	switch b := m.Body.(type) {
	case *peerv1.ConcurrencyMessage_Acquire:
		if err := checkKey(b.Acquire.Key); err != nil {
			return nil, fmt.Errorf("concurrency: acquire from %s: %w", from, err)
		}
		if w := b.Acquire.Weight; w < 1 || w > c.limit {
			return nil, fmt.Errorf("concurrency: acquire from %s: key %q: weight %d outside [1, limit %d]", from, b.Acquire.Key, w, c.limit)
		}
		if w := b.Acquire.MaxWaitNs; w < 0 || w > int64(MaxWait) {
			return nil, fmt.Errorf("concurrency: acquire from %s: key %q: max_wait_ns %d outside [0, %v]", from, b.Acquire.Key, w, MaxWait)
		}
	case *peerv1.ConcurrencyMessage_Verdict:
		v := b.Verdict
		if err := checkKey(v.Key); err != nil {
			return nil, fmt.Errorf("concurrency: verdict from %s: %w", from, err)
		}
		if v.WaitedNs < 0 || (v.WaitedNs > 0 && !v.Granted) {
			return nil, fmt.Errorf("concurrency: verdict from %s: key %q: waited_ns %d (not negative, 0 on a refusal)", from, v.Key, v.WaitedNs)
		}
		if v.Granted != (v.Permit != 0) {
			return nil, fmt.Errorf("concurrency: verdict from %s: key %q: granted %v with permit %d (a grant has a permit, a refusal none)", from, v.Key, v.Granted, v.Permit)
		}
	case *peerv1.ConcurrencyMessage_Release:
		if err := checkKey(b.Release.Key); err != nil {
			return nil, fmt.Errorf("concurrency: release from %s: %w", from, err)
		}
		if b.Release.Permit == 0 {
			return nil, fmt.Errorf("concurrency: release from %s: key %q: permit 0 (no permit has id 0)", from, b.Release.Key)
		}
	case *peerv1.ConcurrencyMessage_LeaseAsk:
		a := b.LeaseAsk
		if err := checkKey(a.Key); err != nil {
			return nil, fmt.Errorf("concurrency: lease ask from %s: %w", from, err)
		}
		if a.Slots < 1 || a.Slots > c.limit {
			return nil, fmt.Errorf("concurrency: lease ask from %s: key %q: slots %d outside [1, limit %d]", from, a.Key, a.Slots, c.limit)
		}
	case *peerv1.ConcurrencyMessage_LeaseGrant:
		g := b.LeaseGrant
		if err := checkKey(g.Key); err != nil {
			return nil, fmt.Errorf("concurrency: lease grant from %s: %w", from, err)
		}
		if g.Slots < 0 || g.Slots > c.limit || (g.Lease == 0) != (g.Slots == 0) {
			return nil, fmt.Errorf("concurrency: lease grant from %s: key %q: lease %d with slots %d (a grant has a lease and 1 to limit %d slots, a refusal neither)", from, g.Key, g.Lease, g.Slots, c.limit)
		}
	case *peerv1.ConcurrencyMessage_LeaseReturn:
		r := b.LeaseReturn
		if err := checkKey(r.Key); err != nil {
			return nil, fmt.Errorf("concurrency: lease return from %s: %w", from, err)
		}
		if r.Lease == 0 || r.Slots < 1 || r.Slots > c.limit {
			return nil, fmt.Errorf("concurrency: lease return from %s: key %q: lease %d, slots %d (want a lease and 1 to limit %d slots)", from, r.Key, r.Lease, r.Slots, c.limit)
		}
	default:
		return nil, fmt.Errorf("concurrency: message from %s has no body", from)
	}
	return &m, nil
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
