package server

import (
	"math"
	"strconv"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
)

// jsonMarshaler is the HTTP/JSON API's marshaler: grpc-gateway's JSONPb
// (protojson, .proto field names, every field emitted), except for a
// CheckResponse whose results carry no error, the answer to almost every
// POST /v1/check, which it writes itself: protojson walks the message by
// reflection and sorted its fields on every call, about a third of the
// HTTP check path's CPU (docs/PERFORMANCE.md, "The service path"). The
// bytes are protojson's, without the random spaces protojson adds after
// commas to keep callers from depending on its output (the same JSON
// value; TestCheckJSONIsProtojson compares the two).
type jsonMarshaler struct {
	*runtime.JSONPb
}

// Marshal encodes v as JSON.
func (m jsonMarshaler) Marshal(v any) ([]byte, error) {
	if r, ok := v.(*tokenmeshv1.CheckResponse); ok {
		if b, ok := appendCheckResponse(make([]byte, 0, 32+176*len(r.GetResults())), r); ok {
			return b, nil
		}
	}
	return m.JSONPb.Marshal(v)
}

// appendCheckResponse appends r's proto3 JSON (proto field names, every
// field emitted, in field-number order) to b; ok false (and b undefined)
// when a result carries an error string, which is left to protojson (its
// escaping rules).
func appendCheckResponse(b []byte, r *tokenmeshv1.CheckResponse) (_ []byte, ok bool) {
	b = append(b, `{"results":[`...)
	for i, res := range r.GetResults() {
		if res.GetError() != "" {
			return nil, false
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"allowed":`...)
		b = strconv.AppendBool(b, res.GetAllowed())
		b = append(b, `,"limit_per_s":`...)
		b = appendJSONFloat(b, res.GetLimitPerS())
		b = appendJSONInt(append(b, `,"burst":`...), res.GetBurst())
		b = appendJSONInt(append(b, `,"remaining":`...), res.GetRemaining())
		b = appendJSONInt(append(b, `,"reset_after_ms":`...), res.GetResetAfterMs())
		b = appendJSONInt(append(b, `,"retry_after_ms":`...), res.GetRetryAfterMs())
		b = append(b, `,"error":""`...)
		b = appendJSONInt(append(b, `,"wait_ms":`...), res.GetWaitMs())
		b = append(b, '}')
	}
	return append(b, "]}"...), true
}

// appendJSONInt appends an int64 as proto3 JSON does: a quoted decimal.
func appendJSONInt(b []byte, v int64) []byte {
	b = append(b, '"')
	b = strconv.AppendInt(b, v, 10)
	return append(b, '"')
}

// appendJSONFloat appends a double as protojson does (its appendFloat,
// after encoding/json): "NaN" and "Infinity" quoted, exponent form below
// 1e-6 and from 1e21, shortest digits.
func appendJSONFloat(b []byte, v float64) []byte {
	switch {
	case math.IsNaN(v):
		return append(b, `"NaN"`...)
	case math.IsInf(v, 1):
		return append(b, `"Infinity"`...)
	case math.IsInf(v, -1):
		return append(b, `"-Infinity"`...)
	}
	format := byte('f')
	if abs := math.Abs(v); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, v, format, -1, 64)
	if format == 'e' {
		// e-09 -> e-9, as encoding/json.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}
