package loadgen

// The Gubernator driver (API "gubernator"): pb.gubernator.V1/GetRateLimits
// of Gubernator v2 (github.com/gubernator-io/gubernator/v2, gubernator.proto:
// GetRateLimitsReq, RateLimitReq, GetRateLimitsResp, RateLimitResp; theirs).
// Ours: the messages are encoded and decoded here with protowire, on a
// codec of our own, so that the main module does not depend on
// Gubernator's module (and its OpenTelemetry, etcd and Kubernetes
// dependencies) for three small messages. Only the fields a load test
// needs are written (name, unique_key, hits, limit, duration, algorithm,
// behavior, burst) and read (status, error); unknown fields are skipped.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// Gubernator's full method names (gubernator.proto, service pb.gubernator.V1).
const (
	gubernatorGetRateLimits = "/pb.gubernator.V1/GetRateLimits"
)

// Gubernator behaviours (gubernator.proto, enum Behavior).
const (
	GubernatorBatching   int32 = 0 // the owner decides; peers batch forwards (exact)
	GubernatorNoBatching int32 = 1 // the owner decides; each forward is sent at once, unbatched (exact)
	GubernatorGlobal     int32 = 2 // every node decides locally, owner syncs (approximate)
)

// GubernatorRule is the limit every GetRateLimits item carries (Gubernator
// has no server-side rules: the client sends the limit with each hit).
type GubernatorRule struct {
	// Limit is the bucket's capacity in hits per Duration (> 0).
	Limit int64
	// Duration is the refill period of Limit hits (>= 1 ms).
	Duration time.Duration
	// Burst, when > 0, is the capacity of the token bucket (Gubernator's
	// burst field); 0: Limit.
	Burst int64
	// Behavior is one of the Gubernator* behaviours.
	Behavior int32
}

func (g *GubernatorRule) validate() error {
	switch {
	case g == nil:
		return errors.New("Gubernator: is required with API gubernator")
	case g.Limit <= 0:
		return fmt.Errorf("Gubernator.Limit %d: must be positive hits per Duration", g.Limit)
	case g.Duration < time.Millisecond:
		return fmt.Errorf("Gubernator.Duration %v: must be at least 1ms", g.Duration)
	case g.Burst < 0:
		return fmt.Errorf("Gubernator.Burst %d: must be >= 0", g.Burst)
	case g.Behavior < 0:
		return fmt.Errorf("Gubernator.Behavior %d: must be >= 0", g.Behavior)
	}
	return nil
}

// gubRequest is one worker's GetRateLimitsReq: the bytes of every item but
// its unique_key are fixed, so a call appends them around the drawn keys
// into one reused buffer.
type gubRequest struct {
	keys      []string // this call's keys, len Batch
	buf       []byte   // the encoded request, rebuilt per call
	itemTail  []byte   // hits .. burst of an item, fixed
	nameField []byte   // field 1 of an item, fixed
}

func newGubRequest(name string, rule GubernatorRule, batch int, hits int64) *gubRequest {
	r := &gubRequest{keys: make([]string, batch)}
	r.nameField = protowire.AppendTag(nil, 1, protowire.BytesType)
	r.nameField = protowire.AppendString(r.nameField, name)
	t := r.itemTail
	t = protowire.AppendTag(t, 3, protowire.VarintType)
	t = protowire.AppendVarint(t, uint64(hits))
	t = protowire.AppendTag(t, 4, protowire.VarintType)
	t = protowire.AppendVarint(t, uint64(rule.Limit))
	t = protowire.AppendTag(t, 5, protowire.VarintType)
	t = protowire.AppendVarint(t, uint64(rule.Duration.Milliseconds()))
	// algorithm 6: TOKEN_BUCKET (0), the default, not written.
	if rule.Behavior != 0 {
		t = protowire.AppendTag(t, 7, protowire.VarintType)
		t = protowire.AppendVarint(t, uint64(rule.Behavior))
	}
	if rule.Burst > 0 {
		t = protowire.AppendTag(t, 8, protowire.VarintType)
		t = protowire.AppendVarint(t, uint64(rule.Burst))
	}
	r.itemTail = t
	return r
}

func (r *gubRequest) draw(keys *keyPicker, rng *rand.Rand) {
	for i := range r.keys {
		r.keys[i] = keys.pick(rng)
	}
	r.encode()
}

// encode writes GetRateLimitsReq{requests: one RateLimitReq per key} into buf.
func (r *gubRequest) encode() {
	b := r.buf[:0]
	for _, k := range r.keys {
		keyLen := protowire.SizeTag(2) + protowire.SizeBytes(len(k))
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(len(r.nameField)+keyLen+len(r.itemTail)))
		b = append(b, r.nameField...)
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, k)
		b = append(b, r.itemTail...)
	}
	r.buf = b
}

// gubResponse is a decoded GetRateLimitsResp: the statuses counted.
type gubResponse struct {
	items, over, errs int
	firstError        string
	admitted          []bool // per item: UNDER_LIMIT without error (reused across calls)
	erred             []bool // per item: error set (reused across calls)
}

// decodeGubResponse reads GetRateLimitsResp (field 1: RateLimitResp,
// repeated) into g: per item its status (field 1: 0 UNDER_LIMIT, 1
// OVER_LIMIT) and error (field 5). Malformed input is an error; unknown
// fields are skipped.
func decodeGubResponse(b []byte, g *gubResponse) error {
	*g = gubResponse{admitted: g.admitted[:0], erred: g.erred[:0]}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("GetRateLimitsResp: bad tag: %v", protowire.ParseError(n))
		}
		b = b[n:]
		if num != 1 || typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return fmt.Errorf("GetRateLimitsResp: field %d: %v", num, protowire.ParseError(n))
			}
			b = b[n:]
			continue
		}
		item, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return fmt.Errorf("GetRateLimitsResp: responses: %v", protowire.ParseError(n))
		}
		b = b[n:]
		if err := g.decodeItem(item); err != nil {
			return fmt.Errorf("GetRateLimitsResp: responses[%d]: %w", g.items, err)
		}
		g.items++
	}
	return nil
}

func (g *gubResponse) decodeItem(b []byte) error {
	var status uint64
	var errMsg []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("bad tag: %v", protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			status, n = protowire.ConsumeVarint(b)
		case num == 5 && typ == protowire.BytesType:
			errMsg, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("field %d: %v", num, protowire.ParseError(n))
		}
		b = b[n:]
	}
	g.admitted = append(g.admitted, len(errMsg) == 0 && status == 0)
	g.erred = append(g.erred, len(errMsg) > 0)
	switch {
	case len(errMsg) > 0:
		g.errs++
		if g.firstError == "" {
			g.firstError = string(errMsg[:min(len(errMsg), 200)])
		}
	case status == 1:
		g.over++
	case status != 0:
		return fmt.Errorf("status %d: want UNDER_LIMIT (0) or OVER_LIMIT (1)", status)
	}
	return nil
}

// gubCodec is the gRPC codec of the Gubernator driver: it sends a
// *gubRequest's buffer and decodes into a *gubResponse (named "proto",
// since what travels is protobuf).
type gubCodec struct{}

func (gubCodec) Name() string { return "proto" }

func (gubCodec) Marshal(v any) ([]byte, error) {
	r, ok := v.(*gubRequest)
	if !ok {
		return nil, fmt.Errorf("gubernator codec: cannot marshal %T", v)
	}
	return r.buf, nil
}

func (gubCodec) Unmarshal(data []byte, v any) error {
	g, ok := v.(*gubResponse)
	if !ok {
		return fmt.Errorf("gubernator codec: cannot unmarshal into %T", v)
	}
	return decodeGubResponse(data, g)
}

// tallyGub counts a decoded response: UNDER_LIMIT allowed, OVER_LIMIT
// refused, an item with error set an error.
func tallyGub(g *gubResponse, want int, st *workerStats) (allowed, refused, errs int64, bad string) {
	if g.items != want {
		return 0, 0, 0, fmt.Sprintf("response holds %d rate limits for %d requests", g.items, want)
	}
	if g.firstError != "" {
		st.sample(g.firstError)
	}
	return int64(g.items - g.over - g.errs), int64(g.over), int64(g.errs), ""
}
