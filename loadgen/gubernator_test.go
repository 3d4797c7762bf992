package loadgen

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
)

// rawCodec passes *[]byte through (the fake Gubernator's server codec).
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }
func (rawCodec) Marshal(v any) ([]byte, error) {
	return *v.(*[]byte), nil
}
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}

// fakeGubernator serves pb.gubernator.V1/GetRateLimits on 127.0.0.1:0
// from the wire format of gubernator.proto: every unique_key admits its
// first `limit` hits (the request's limit field), then answers
// OVER_LIMIT; a key starting "bad" gets an item with error set. It records the
// names, limits and durations it saw.
type fakeGubernator struct {
	mu     sync.Mutex
	used   map[string]int64
	seen   map[string]bool // "name limit durationMS behavior"
	server *grpc.Server
}

func serveGubernator(t *testing.T) (*fakeGubernator, string) {
	t.Helper()
	f := &fakeGubernator{used: map[string]int64{}, seen: map[string]bool{}}
	f.server = grpc.NewServer(grpc.ForceServerCodec(rawCodec{}))
	f.server.RegisterService(&grpc.ServiceDesc{ServiceName: "pb.gubernator.V1", HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "GetRateLimits", Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var in []byte
			if err := dec(&in); err != nil {
				return nil, err
			}
			out, err := f.answer(in)
			return &out, err
		}}}}, struct{}{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = f.server.Serve(ln) }()
	t.Cleanup(f.server.Stop)
	return f, ln.Addr().String()
}

func (f *fakeGubernator) answer(in []byte) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []byte
	for len(in) > 0 {
		num, _, n := protowire.ConsumeTag(in)
		if n < 0 || num != 1 {
			return nil, fmt.Errorf("request: field %d", num)
		}
		in = in[n:]
		item, n := protowire.ConsumeBytes(in)
		if n < 0 {
			return nil, fmt.Errorf("request item")
		}
		in = in[n:]
		var name, key string
		var hits, limit, dur, behavior int64
		for len(item) > 0 {
			num, typ, n := protowire.ConsumeTag(item)
			item = item[n:]
			switch typ {
			case protowire.BytesType:
				v, m := protowire.ConsumeBytes(item)
				if num == 1 {
					name = string(v)
				} else if num == 2 {
					key = string(v)
				}
				n = m
			case protowire.VarintType:
				v, m := protowire.ConsumeVarint(item)
				switch num {
				case 3:
					hits = int64(v)
				case 4:
					limit = int64(v)
				case 5:
					dur = int64(v)
				case 7:
					behavior = int64(v)
				}
				n = m
			default:
				return nil, fmt.Errorf("item field %d type %d", num, typ)
			}
			if n < 0 {
				return nil, fmt.Errorf("item field %d", num)
			}
			item = item[n:]
		}
		f.seen[fmt.Sprintf("%s %d %d %d", name, limit, dur, behavior)] = true
		var resp []byte
		switch {
		case strings.HasPrefix(key, "bad"):
			resp = protowire.AppendTag(resp, 5, protowire.BytesType)
			resp = protowire.AppendString(resp, "no such thing")
		case f.used[key]+hits <= limit:
			f.used[key] += hits
			resp = protowire.AppendTag(resp, 3, protowire.VarintType) // remaining, skipped by the driver
			resp = protowire.AppendVarint(resp, uint64(limit-f.used[key]))
		default:
			resp = protowire.AppendTag(resp, 1, protowire.VarintType)
			resp = protowire.AppendVarint(resp, 1)
		}
		out = protowire.AppendTag(out, 1, protowire.BytesType)
		out = protowire.AppendBytes(out, resp)
	}
	return out, nil
}

// API gubernator: a hot key with a limit of 20 admits exactly 20 of the 50
// checks (the probe uses a key of its own); the rule's name, limit,
// duration and behaviour reach the server.
func TestRunGubernator(t *testing.T) {
	f, addr := serveGubernator(t)
	g := &GubernatorRule{Limit: 20, Duration: time.Minute, Behavior: GubernatorGlobal}
	r, err := Run(context.Background(), Options{Targets: []string{addr}, API: APIGubernator, Rule: "req",
		Gubernator: g, Concurrency: 2, Batch: 5, HotKey: true, Duration: 5 * time.Second, MaxRPCs: 10})
	if err != nil {
		t.Fatal(err)
	}
	if r.RPCs != 10 || r.Checks != 50 || r.Allowed != 20 || r.Refused != 30 || r.Errors != 0 || r.Rule != "gubernator:req" {
		t.Errorf("%+v: want 10 calls, 50 checks, 20 allowed, 30 refused", r)
	}
	if r.RuleBurst != 20 || r.RuleRate != 20.0/60 {
		t.Errorf("rule limit %v/s burst %d: want %v, 20", r.RuleRate, r.RuleBurst, 20.0/60)
	}
	if !f.seen["req 20 60000 2"] || len(f.seen) != 1 {
		t.Errorf("server saw %v: want only name req, limit 20, duration 60000 ms, behaviour 2", f.seen)
	}
	// 10k keys, limit 1e9: all admitted.
	r, err = Run(context.Background(), Options{Targets: []string{addr}, API: APIGubernator, Rule: "req",
		Gubernator: &GubernatorRule{Limit: 1e9, Duration: time.Second}, Concurrency: 4, Batch: 3, Keys: 10000,
		Duration: 5 * time.Second, MaxRPCs: 100})
	if err != nil {
		t.Fatal(err)
	}
	if r.Checks != 300 || r.Allowed != 300 {
		t.Errorf("%+v: want 300 checks, all allowed", r)
	}
	// an item with error set is a check error, its message sampled
	r, err = Run(context.Background(), Options{Targets: []string{addr}, API: APIGubernator, Rule: "req",
		Gubernator: g, Concurrency: 1, Batch: 2, HotKey: true, KeyPrefix: "bad", Duration: 5 * time.Second, MaxRPCs: 3})
	if err != nil {
		t.Fatal(err)
	}
	if r.Errors != 6 || r.Checks != 6 || len(r.ErrorSample) != 1 || r.ErrorSample[0] != "no such thing" {
		t.Errorf("%+v: want 6 check errors, sample \"no such thing\"", r)
	}
	// a target without Gubernator is named
	_, err = Run(context.Background(), Options{Targets: []string{serve(t, 10, 10)}, API: APIGubernator, Rule: "req",
		Gubernator: g, Concurrency: 1, Batch: 1, Keys: 1, Duration: time.Second, DialTimeout: 2 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "no Gubernator V1 service answers there") {
		t.Errorf("target without Gubernator: %v", err)
	}
	for _, o := range []Options{
		{Targets: []string{addr}, API: APIGubernator, Rule: "x", Concurrency: 1, Batch: 1, Keys: 1, Duration: time.Second},
		{Targets: []string{addr}, API: APIGubernator, Rule: "x", Gubernator: &GubernatorRule{Limit: 0, Duration: time.Second}, Concurrency: 1, Batch: 1, Keys: 1, Duration: time.Second},
		{Targets: []string{addr}, API: APIGubernator, Rule: "x", Gubernator: &GubernatorRule{Limit: 1, Duration: time.Microsecond}, Concurrency: 1, Batch: 1, Keys: 1, Duration: time.Second},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// The decoder counts statuses and errors and skips unknown fields.
func TestDecodeGubResponse(t *testing.T) {
	item := func(fields ...[]byte) []byte {
		var b []byte
		for _, f := range fields {
			b = append(b, f...)
		}
		return b
	}
	varint := func(num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
	}
	str := func(num protowire.Number, s string) []byte {
		return protowire.AppendString(protowire.AppendTag(nil, num, protowire.BytesType), s)
	}
	var msg []byte
	for _, it := range [][]byte{
		item(varint(2, 100), varint(3, 99)),       // under limit
		item(varint(1, 1), str(6, "meta")),        // over limit, metadata skipped
		item(str(5, "bad limit"), varint(1, 0)),   // error
		item(varint(1, 0), varint(4, 1700000000)), // under limit
	} {
		msg = protowire.AppendTag(msg, 1, protowire.BytesType)
		msg = protowire.AppendBytes(msg, it)
	}
	msg = append(msg, varint(7, 3)...) // unknown top-level field
	var g gubResponse
	if err := decodeGubResponse(msg, &g); err != nil {
		t.Fatal(err)
	}
	if g.items != 4 || g.over != 1 || g.errs != 1 || g.firstError != "bad limit" {
		t.Errorf("%+v: want 4 items, 1 over, 1 error \"bad limit\"", g)
	}
	for _, bad := range [][]byte{
		{0x0a},                   // length missing
		{0x0a, 0x05, 0x08},       // truncated item
		{0x0a, 0x02, 0x08, 0x07}, // status 7
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, // bad tag
	} {
		if err := decodeGubResponse(bad, &g); err == nil {
			t.Errorf("% x decoded as %+v", bad, g)
		}
	}
}

// The decoder never panics and a decoded response is consistent.
func FuzzDecodeGubResponse(f *testing.F) {
	f.Add([]byte{0x0a, 0x02, 0x08, 0x01})
	f.Add([]byte{0x0a, 0x00, 0x0a, 0x03, 0x2a, 0x01, 'x'})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var g gubResponse
		if err := decodeGubResponse(b, &g); err != nil {
			return
		}
		if g.over+g.errs > g.items || g.over < 0 || g.errs < 0 {
			t.Errorf("% x: inconsistent %+v", b, g)
		}
	})
}
