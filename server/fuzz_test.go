package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
)

// FuzzCheckHTTP: no body posted to /v1/check makes the handler panic or
// answer 5xx, and a 200 answer has one result per check asked for.
func FuzzCheckHTTP(f *testing.F) {
	for _, seed := range []string{
		`{"checks":[{"rule":"api","key":"a","hits":1}]}`,
		`{"checks":[{"rule":"api","key":"a","hits":2},{"rule":"api","key":"a","hits":2},{"rule":"loc","key":"b","hits":"5"}]}`,
		`{"checks":[{"rule":"api","key":"","hits":-9223372036854775808}]}`,
		`{"checks":[{"rule":"api","key":"a","hits":1000000001}]}`,
		`{"checks":[{"rule":"api","key":"a","hits":4}]}`,
		`{"checks":[{"rule":"nope","key":"a","hits":1}]}`,
		`{"checks":null}`,
		`{"checks":[{}]}`,
		`{"checks":[{"rule":"api","key":"a","hits":1}]} trailing`,
		`{"checks":[{"rule":"api","key":"\u0000\ud800","hits":1e3}]}`,
		`{"brust":1}`,
		`[1]`,
		`null`,
		``,
		`{"checks":[{"rule":`,
	} {
		f.Add(seed)
	}
	h := newTestServer(f).Handler()
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/v1/check", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(rec, r)
		if rec.Code >= 500 {
			t.Fatalf("%q: %d %s", body, rec.Code, rec.Body)
		}
		if rec.Code != http.StatusOK {
			return
		}
		// The gateway decodes the first JSON value of the body.
		var raw json.RawMessage
		if err := json.NewDecoder(strings.NewReader(body)).Decode(&raw); err != nil {
			t.Fatalf("%q answered 200 but is not JSON: %v", body, err)
		}
		var in tokenmeshv1.CheckRequest
		if err := protojson.Unmarshal(raw, &in); err != nil {
			t.Fatalf("%q answered 200 but is not a CheckRequest: %v", body, err)
		}
		var out tokenmeshv1.CheckResponse
		if err := protojson.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%q: answer %s: %v", body, rec.Body, err)
		}
		if len(out.GetResults()) != len(in.GetChecks()) {
			t.Fatalf("%q: %d results for %d checks", body, len(out.GetResults()), len(in.GetChecks()))
		}
	})
}

// FuzzCheckProto: a CheckRequest decoded from any bytes is answered OK
// (one result per check) or INVALID_ARGUMENT, never another code or a
// panic.
func FuzzCheckProto(f *testing.F) {
	for _, r := range []*tokenmeshv1.CheckRequest{
		req(item("api", "a", 1)),
		req(item("api", "a", 2), item("api", "a", 2), item("loc", "b", 5)),
		req(item("api", "a", 4)),
		req(item("api", "", 1)),
		req(item("", "a", 1)),
		req(item("nope", "a", 1)),
		req(item("api", "a", 0)),
		req(item("api", "a", -1)),
		req(item("api", "a", MaxHits+1)),
		req(),
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	// No seed of an over-long key or of MaxChecks+1 items (the unit tests
	// cover both): the fuzzer would spend its time minimizing kilobyte
	// inputs derived from them.
	f.Add([]byte{0x0a, 0x00})       // one empty item
	f.Add([]byte{0xff, 0xff, 0xff}) // not a CheckRequest
	s := newTestServer(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var in tokenmeshv1.CheckRequest
		if err := proto.Unmarshal(data, &in); err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := s.Check(ctx, &in)
		switch status.Code(err) {
		case codes.OK:
			if len(resp.GetResults()) != len(in.GetChecks()) {
				t.Fatalf("%d results for %d checks", len(resp.GetResults()), len(in.GetChecks()))
			}
		case codes.InvalidArgument:
			if msg := status.Convert(err).Message(); !strings.HasPrefix(msg, "checks") {
				t.Fatalf("InvalidArgument %q does not name the field", msg)
			}
		default:
			t.Fatalf("Check(%v): %v, want OK or InvalidArgument", &in, err)
		}
	})
}
