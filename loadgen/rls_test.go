package loadgen

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tokenmesh/tokenmesh/envoyrls"
	"github.com/tokenmesh/tokenmesh/server"
)

// serveRLS serves Envoy's RLS for domain "d" (descriptor key "ip": burst
// per hour) on 127.0.0.1:0.
func serveRLS(t *testing.T, burst int) string {
	t.Helper()
	return serveRLSUnit(t, "hour", burst)
}

// serveRLSUnit is serveRLS with a limit of burst per unit.
func serveRLSUnit(t testing.TB, unit string, burst int) string {
	t.Helper()
	cfg, err := envoyrls.Parse("d.yaml", []byte("domain: d\ndescriptors:\n  - key: ip\n    rate_limit: {unit: "+unit+", requests_per_unit: "+strconv.Itoa(burst)+"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	return serveRules(t, cfg.Rules(time.Time{}), func(s *server.Server, gs *grpc.Server) { s.RegisterRLS(gs, cfg) })
}

// API rls: every descriptor is one check; a hot key of burst 20 per hour
// admits exactly 20 of the MaxRPCs calls of 5 descriptors.
func TestRunRLS(t *testing.T) {
	addr := serveRLS(t, 20)
	r, err := Run(context.Background(), Options{Targets: []string{addr}, API: APIRLS, Domain: "d", DescriptorKey: "ip",
		Concurrency: 2, Batch: 5, HotKey: true, Duration: 5 * time.Second, MaxRPCs: 10})
	if err != nil {
		t.Fatal(err)
	}
	if r.RPCs != 10 || r.Checks != 50 || r.Allowed != 20 || r.Refused != 30 || r.Rule != "rls:d" {
		t.Errorf("%+v: want 10 calls, 50 checks, 20 allowed, 30 refused", r)
	}
	// a target without the RLS service is named
	_, err = Run(context.Background(), Options{Targets: []string{serve(t, 10, 10)}, API: APIRLS, Domain: "d",
		Concurrency: 1, Batch: 1, Keys: 1, Duration: time.Second, DialTimeout: 2 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "no Envoy rate limit service answers there") {
		t.Errorf("target without RLS: %v", err)
	}
	for _, o := range []Options{
		{Targets: []string{addr}, API: "soap", Rule: "x", Concurrency: 1, Batch: 1, Keys: 1, Duration: time.Second},
		{Targets: []string{addr}, API: APIRLS, Concurrency: 1, Batch: 1, Keys: 1, Duration: time.Second},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}
