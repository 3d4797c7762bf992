package server

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
)

// The hand-written CheckResponse JSON is protojson's (as the gateway
// marshals it) byte for byte once protojson's random spaces are removed,
// for any results: special and extreme doubles, any int64, errors
// (protojson's path), none; and it decodes back to the same message.
func TestCheckJSONIsProtojson(t *testing.T) {
	pb := &runtime.JSONPb{MarshalOptions: protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}}
	m := jsonMarshaler{pb}
	floats := []float64{0, 1, 10, 0.1, 1e-7, 1e-6, 9.99e-7, 1e20, 1e21, 1.5e300, 5e-324, -2.5, 1e9, 123456789.125,
		math.NaN(), math.Inf(1), math.Inf(-1), math.MaxFloat64}
	rapid.Check(t, func(rt *rapid.T) {
		r := &tokenmeshv1.CheckResponse{}
		withError := false
		for range rapid.IntRange(0, 4).Draw(rt, "n") {
			res := &tokenmeshv1.CheckResult{
				Allowed:      rapid.Bool().Draw(rt, "allowed"),
				LimitPerS:    rapid.OneOf(rapid.SampledFrom(floats), rapid.Float64()).Draw(rt, "limit"),
				Burst:        rapid.Int64().Draw(rt, "burst"),
				Remaining:    rapid.Int64Range(-1, math.MaxInt64).Draw(rt, "remaining"),
				ResetAfterMs: rapid.Int64().Draw(rt, "reset"),
				RetryAfterMs: rapid.Int64().Draw(rt, "retry"),
				WaitMs:       rapid.Int64Min(0).Draw(rt, "wait"),
			}
			if rapid.IntRange(0, 9).Draw(rt, "err") == 0 {
				res.Error = rapid.String().Draw(rt, "error")
				withError = withError || res.Error != ""
			}
			r.Results = append(r.Results, res)
		}
		got, err := m.Marshal(r)
		if err != nil {
			rt.Fatal(err)
		}
		want, err := pb.Marshal(r)
		if err != nil {
			rt.Fatal(err)
		}
		var compact, gotCompact bytes.Buffer
		if err := json.Compact(&compact, want); err != nil {
			rt.Fatal(err)
		}
		if err := json.Compact(&gotCompact, got); err != nil {
			rt.Fatal(err)
		}
		// The hand-written bytes are compact already; protojson's (results
		// with an error) are compared compacted.
		if !bytes.Equal(gotCompact.Bytes(), compact.Bytes()) || (!withError && !bytes.Equal(got, compact.Bytes())) {
			rt.Fatalf("hand-written %s\nprotojson    %s", got, compact.Bytes())
		}
		if _, fast := appendCheckResponse(nil, r); fast == withError {
			rt.Fatalf("fast path %v with an error result %v", fast, withError)
		}
		var back tokenmeshv1.CheckResponse
		if err := protojson.Unmarshal(got, &back); err != nil || !proto.Equal(&back, r) {
			rt.Fatalf("decoded back: %v %v, want %v", &back, err, r)
		}
	})
}
