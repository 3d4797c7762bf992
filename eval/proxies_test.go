package eval

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/sim"
)

// Behind proxies: central runs without them (no proxy costs), quota and
// proxystatic decide every request at the proxies, owner forwards every
// one (a check and an answer each), B/req counts the proxies' bytes, and
// the setup, the table and its legend say so. Without proxies nothing of
// it is in the JSON.
func TestRunBehindProxies(t *testing.T) {
	opts := smallRun(t, "poisson:users=4,rate=5,duration=20s", "quota,owner", "roundrobin")
	plain := jsonText(t, mustRun(t, opts))
	for _, field := range []string{`"proxies"`, `"proxy"`} {
		if strings.Contains(plain, field) {
			t.Fatalf("a run without proxies has %s in its JSON:\n%s", field, plain)
		}
	}
	strats, err := ParseStrategies("quota,owner," + ProxyStatic)
	if err != nil {
		t.Fatal(err)
	}
	opts.Strategies = strats
	opts.Proxies = sim.ProxyTier{Proxies: 4, Hop: time.Millisecond}
	rep := mustRun(t, opts)
	want := ProxySetup{Proxies: 4, ReportIntervalS: 5, HopMs: 1, NoAssignment: "ALLOW_ALL", Expired: "DENY_ALL"}
	if rep.Setup.Proxies == nil || *rep.Setup.Proxies != want {
		t.Fatalf("setup proxies %+v, want %+v", rep.Setup.Proxies, want)
	}
	n := float64(len(opts.Trace.Requests))
	for _, r := range rep.Results {
		switch r.Strategy {
		case "central":
			if r.Proxy != nil {
				t.Errorf("central has proxy costs %+v: it runs without proxies", *r.Proxy)
			}
		case "quota", ProxyStatic:
			if r.LocalDecisionPct != 100 {
				t.Errorf("%s: %v%% decided at the proxies, want 100", r.Strategy, r.LocalDecisionPct)
			}
		case "owner":
			if r.LocalDecisionPct != 0 || r.Proxy == nil || float64(r.Proxy.Messages) != 2*n {
				t.Errorf("owner behind RLS proxies: local %v%%, proxy costs %+v; want 0%% and %v messages", r.LocalDecisionPct, r.Proxy, 2*n)
			}
		}
		if r.Proxy != nil && r.BytesPerRequest != round(float64(r.Bytes+r.Proxy.Bytes)/n, 1) {
			t.Errorf("%s: %v B/req, want peer and proxy bytes over %v requests", r.Strategy, r.BytesPerRequest, n)
		}
	}
	var b bytes.Buffer
	if err := WriteTableWidth(&b, rep, 0); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"proxies 4 (RLQS reports every 5 s, hop 1 ms, no_assignment ALLOW_ALL, expired DENY_ALL)", "msgs/req", "proxy msgs",
		"requests decided at their proxy", "note: proxies: requests reach 4 Envoy proxies"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("the table does not say %q:\n%s", s, b.String())
		}
	}
}

// proxystatic needs proxies, is listed once, and is not a registered
// strategy.
func TestProxyStaticErrors(t *testing.T) {
	if _, err := ParseStrategies("owner,proxystatic,proxystatic"); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("proxystatic twice: %v", err)
	}
	opts := smallRun(t, "poisson:users=2,rate=1,duration=5s", "", "roundrobin")
	opts.Strategies = append(opts.Strategies, ProxyStaticInfo())
	if _, err := Run(opts); err == nil || !strings.Contains(err.Error(), "needs proxies") {
		t.Errorf("proxystatic without proxies: %v", err)
	}
	opts.Proxies = sim.ProxyTier{Proxies: 2}
	opts.ClientLatency = &sim.Latency{Kind: "fixed", Mean: time.Millisecond, Min: time.Millisecond, Max: time.Millisecond}
	if _, err := Run(opts); err == nil || !strings.Contains(err.Error(), "client latency and proxies") {
		t.Errorf("client latency with proxies: %v", err)
	}
}

func mustRun(t *testing.T, opts Options) *Report {
	t.Helper()
	rep, err := Run(opts)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}
