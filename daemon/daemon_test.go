package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokenmesh/tokenmesh/config"
	"github.com/tokenmesh/tokenmesh/internal/lockedbuf"
	"github.com/tokenmesh/tokenmesh/rule"
)

// loopbackNode is a node section on 127.0.0.1 port 0 everywhere.
const loopbackNode = "node:\n  name: %s\n  api_addr: 127.0.0.1:0\n  grpc_addr: 127.0.0.1:0\n  peer_addr: 127.0.0.1:0\n  gossip_addr: 127.0.0.1:0\n  drain_delay: 0s\n"

// writeConfig writes text to path, as an editor that renames a new file
// over the old one.
func writeConfig(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// startFrom loads path and starts a daemon of it (Networked), shut down
// when the test ends; cfg's File, ConfigPath and Networked are set here.
func startFrom(t *testing.T, path string, cfg Config) *Daemon {
	t.Helper()
	f, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg.File, cfg.ConfigPath, cfg.Networked = f, path, true
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Shutdown(context.Background()) })
	return d
}

// waitReady waits (5 s at most) for d to report ready.
func waitReady(t *testing.T, d *Daemon) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !d.Ready() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not ready after 5s", d.Addrs().Name)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkResult is one result of POST /v1/check.
type checkResult struct {
	Allowed bool   `json:"allowed"`
	Burst   string `json:"burst"`
	Error   string `json:"error"`
}

// check asks d's HTTP API for one token of key under rule.
func check(t *testing.T, d *Daemon, rule, key string) checkResult {
	t.Helper()
	body := `{"checks":[{"rule":"` + rule + `","key":"` + key + `","hits":1}]}`
	resp, err := http.Post(d.APIURL()+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct{ Results []checkResult }
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != http.StatusOK || len(got.Results) != 1 {
		t.Fatalf("%s: check %s/%s: status %d, %+v, %v", d.Addrs().Name, rule, key, resp.StatusCode, got, err)
	}
	return got.Results[0]
}

// echoService serves test.Echo/Say (a StringValue back) and records what
// the daemon tells it.
type echoService struct {
	mu         sync.Mutex
	reloads    []RuleSet
	shutdownOK bool // at Shutdown, the node still decided a check
}

func (e *echoService) service() Service {
	return ServiceFuncs{
		ServiceName: "echo",
		RegisterFunc: func(g *grpc.Server, d *Daemon) error {
			g.RegisterService(&grpc.ServiceDesc{ServiceName: "test.Echo", HandlerType: (*any)(nil),
				Methods: []grpc.MethodDesc{{MethodName: "Say", Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
					in := new(wrapperspb.StringValue)
					if err := dec(in); err != nil {
						return nil, err
					}
					return in, nil
				}}}}, struct{}{})
			d.API().AddHealthService("test.Echo")
			if d.Node() == nil || d.Registry() == nil || len(d.Rules().Rules) == 0 {
				return errors.New("the daemon's node, registry or rules are missing at Register")
			}
			return nil
		},
		ReloadedFunc: func(_ context.Context, rs RuleSet) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.reloads = append(e.reloads, rs)
			return nil
		},
	}
}

// The brief's embedding test: a daemon from a config file, no binary.
// It becomes ready and answers checks, serves a registered service, takes
// a changed rate on Reload, refuses a bad file keeping the old rules, and
// shuts down gracefully, its ports closed.
func TestDaemonStartReloadShutdown(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokenmesh.yaml")
	node := strings.Replace(loopbackNode, "%s", "d1", 1)
	writeConfig(t, path, node+"rules:\n  - {name: api, rate: 1/h, burst: 2, strategy: owner}\n")
	logs := &lockedbuf.Buffer{}
	echo := &echoService{}
	var d *Daemon
	svc := echo.service().(ServiceFuncs)
	svc.ShutdownFunc = func(ctx context.Context) error {
		_, err := d.Node().Cluster().Check(ctx, "api", "at-shutdown", 1)
		echo.shutdownOK = err == nil
		return nil
	}
	d = startFrom(t, path, Config{Logger: slog.New(slog.NewTextHandler(logs, nil)), Services: []Service{svc}})
	a := d.Addrs()
	for name, addr := range map[string]string{"api": a.API, "grpc": a.GRPC, "peer": a.Peer, "gossip": a.Gossip} {
		if _, port, err := net.SplitHostPort(addr); err != nil || port == "0" {
			t.Errorf("Addrs().%s = %q: want a bound host:port", name, addr)
		}
	}
	if a.Name != "d1" || d.APIURL() != "http://"+a.API {
		t.Errorf("Addrs %+v, APIURL %q", a, d.APIURL())
	}
	waitReady(t, d)
	if r := check(t, d, "api", "k"); !r.Allowed || r.Burst != "2" {
		t.Fatalf("first check: %+v; want allowed, burst 2", r)
	}

	conn, err := grpc.NewClient(a.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out := new(wrapperspb.StringValue)
	if err := conn.Invoke(ctx, "/test.Echo/Say", wrapperspb.String("hi"), out); err != nil || out.GetValue() != "hi" {
		t.Errorf("the registered service: %q, %v; want hi", out.GetValue(), err)
	}
	if hr, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "test.Echo"}); err != nil ||
		hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health of the registered service: %v, %v; want SERVING", hr, err)
	}

	// A changed rule starts afresh with its new settings.
	writeConfig(t, path, node+"rules:\n  - {name: api, rate: 1/h, burst: 5, strategy: owner}\n")
	if err := d.Reload(ctx, "test"); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if r := check(t, d, "api", "k"); !r.Allowed || r.Burst != "5" {
		t.Errorf("after the reload: %+v; want allowed, burst 5", r)
	}
	if rs := d.Rules(); len(rs.Rules) != 1 || rs.Rules[0].Burst != 5 {
		t.Errorf("Rules() after the reload: %+v; want api at burst 5", rs.Rules)
	}
	echo.mu.Lock()
	if len(echo.reloads) != 1 || echo.reloads[0].Rules[0].Burst != 5 {
		t.Errorf("the service was told %+v; want one reload, api at burst 5", echo.reloads)
	}
	echo.mu.Unlock()
	if strings.Contains(logs.String(), "node settings in the file changed") {
		t.Errorf("a reload of the same node section warned that it changed:\n%s", logs)
	}

	// A bad file is refused as a whole; the old rules keep answering.
	writeConfig(t, path, node+"rules:\n  - {name: api, rate: fast, burst: 1}\n")
	if err := d.Reload(ctx, "test"); err == nil {
		t.Fatal("Reload of a bad file: no error")
	}
	if !strings.Contains(logs.String(), "reload refused: the old rules stay") {
		t.Errorf("a refused reload was not logged:\n%s", logs)
	}
	if r := check(t, d, "api", "k"); r.Burst != "5" {
		t.Errorf("after the refused reload: %+v; want the old rule, burst 5", r)
	}

	if err := d.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	select {
	case <-d.Done():
	default:
		t.Error("Done not closed after Shutdown")
	}
	if d.Err() != nil || d.Ready() {
		t.Errorf("after Shutdown: Err %v, Ready %v; want nil, false", d.Err(), d.Ready())
	}
	if !echo.shutdownOK {
		t.Error("the service's Shutdown ran after the node stopped deciding; want before")
	}
	for name, addr := range map[string]string{"api": a.API, "grpc": a.GRPC, "peer": a.Peer} {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Errorf("%s %s still accepts connections after Shutdown", name, addr)
		}
	}
	if err := d.Shutdown(ctx); err != nil {
		t.Errorf("a second Shutdown: %v", err)
	}
}

// Two daemons on loopback form one cluster: an owner rule's burst is
// spent once across both.
func TestDaemonTwoNodes(t *testing.T) {
	dir := t.TempDir()
	rules := "rules:\n  - {name: api, rate: 1/h, burst: 3, strategy: owner}\n"
	p1 := filepath.Join(dir, "n1.yaml")
	writeConfig(t, p1, strings.Replace(loopbackNode, "%s", "n1", 1)+"  insecure: true\n"+rules)
	d1 := startFrom(t, p1, Config{})
	p2 := filepath.Join(dir, "n2.yaml")
	writeConfig(t, p2, strings.Replace(loopbackNode, "%s", "n2", 1)+"  insecure: true\n  join: ["+d1.Addrs().Gossip+"]\n"+rules)
	d2 := startFrom(t, p2, Config{})
	deadline := time.Now().Add(10 * time.Second)
	for len(d1.Node().Members()) != 2 || len(d2.Node().Members()) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("members after 10s: n1 %v, n2 %v", d1.Node().Members(), d2.Node().Members())
		}
		time.Sleep(10 * time.Millisecond)
	}
	waitReady(t, d1)
	waitReady(t, d2)
	allowed := 0
	for i := range 6 {
		d := []*Daemon{d1, d2}[i%2]
		if r := check(t, d, "api", "shared"); r.Allowed {
			allowed++
		} else if r.Error != "" {
			t.Fatalf("check %d on %s: %s", i, d.Addrs().Name, r.Error)
		}
	}
	if allowed != 3 {
		t.Errorf("%d of 6 checks allowed across two nodes; want the burst, 3", allowed)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, d := range []*Daemon{d2, d1} {
		if err := d.Shutdown(ctx); err != nil {
			t.Errorf("%s: Shutdown: %v", d.Addrs().Name, err)
		}
	}
}

// Without a config file a daemon runs a single node (config.Default);
// Reload then fails with ErrNoConfigFile. Start's errors name what failed.
func TestDaemonNoFileAndStartErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f := config.Default()
	f.Node.APIAddr, f.Node.GRPCAddr = "127.0.0.1:0", "127.0.0.1:0"
	d, err := Start(ctx, Config{File: f})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Shutdown(ctx)
	if a := d.Addrs(); a.Peer != "" || a.Gossip != "" {
		t.Errorf("a node that is not networked has peer addresses: %+v", a)
	}
	waitReady(t, d)
	if r := check(t, d, "default", "k"); !r.Allowed {
		t.Errorf("default rule: %+v; want allowed", r)
	}
	if err := d.Reload(ctx, "test"); !errors.Is(err, ErrNoConfigFile) {
		t.Errorf("Reload without a file: %v; want ErrNoConfigFile", err)
	}

	busy := config.Default()
	busy.Node.APIAddr, busy.Node.GRPCAddr = d.Addrs().API, "127.0.0.1:0"
	if _, err := Start(ctx, Config{File: busy}); err == nil || !strings.HasPrefix(err.Error(), "node.api_addr: ") {
		t.Errorf("Start on a busy API address: %v; want an error naming node.api_addr", err)
	}
	other := config.Default()
	other.Node.APIAddr, other.Node.GRPCAddr = "127.0.0.1:0", "127.0.0.1:0"
	bad := ServiceFuncs{ServiceName: "bad", RegisterFunc: func(*grpc.Server, *Daemon) error { return errors.New("boom") }}
	if _, err := Start(ctx, Config{File: other, Services: []Service{bad}}); err == nil || err.Error() != "service bad: boom" {
		t.Errorf("Start with a failing service: %v; want \"service bad: boom\"", err)
	}
	norules := config.Default()
	norules.Rules = nil
	if _, err := Start(ctx, Config{File: norules, ConfigPath: "t.yaml"}); err == nil || err.Error() != "t.yaml: rules: at least one rule is required" {
		t.Errorf("Start with no rules: %v; want the file and field named", err)
	}
	if _, err := Start(ctx, Config{File: other, FaultInjection: true}); err == nil || !strings.Contains(err.Error(), "Networked") {
		t.Errorf("FaultInjection without peers: %v; want an error naming Networked", err)
	}
	// Bound sees the addresses before anything is served; its error stops
	// Start (and frees the ports).
	var bound Addrs
	servedBefore := true
	d2, err := Start(ctx, Config{File: other, Bound: func(a Addrs) error {
		bound = a
		// bound, not served: the connection waits in the backlog
		_, err := (&http.Client{Timeout: 200 * time.Millisecond}).Get("http://" + a.API + "/healthz")
		servedBefore = err == nil
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if bound != d2.Addrs() || servedBefore {
		t.Errorf("Bound got %+v (Addrs %+v); the API answered before it returned: %v", bound, d2.Addrs(), servedBefore)
	}
	_ = d2.Shutdown(ctx)
	if _, err := Start(ctx, Config{File: other, Bound: func(Addrs) error { return errors.New("no disk") }}); err == nil || err.Error() != "no disk" {
		t.Errorf("Start with a failing Bound: %v; want \"no disk\"", err)
	}
}

// The envoy config's rules follow the file's, in order; a name both have
// is reported (Start and a reload refuse it).
func TestAppendEnvoyRules(t *testing.T) {
	all, dup := appendEnvoyRules([]rule.Rule{{Name: "api"}}, []rule.Rule{{Name: "rls.edge.ip"}, {Name: "rls.edge.path"}})
	if dup != "" || len(all) != 3 || all[0].Name != "api" || all[1].Name != "rls.edge.ip" || all[2].Name != "rls.edge.path" {
		t.Errorf("no collision: %v %q", all, dup)
	}
	if _, dup := appendEnvoyRules([]rule.Rule{{Name: "api"}, {Name: "rls.edge.ip"}}, []rule.Rule{{Name: "rls.edge.path"}, {Name: "rls.edge.ip"}}); dup != "rls.edge.ip" {
		t.Errorf("collision reported as %q, want rls.edge.ip", dup)
	}
}

// With node.drain_delay, Shutdown first turns readiness off (/readyz 503
// "draining", gRPC health NOT_SERVING) while the node still answers
// checks, for the delay; then the listeners close.
func TestDaemonDrainDelay(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokenmesh.yaml")
	node := strings.Replace(strings.Replace(loopbackNode, "%s", "d1", 1), "drain_delay: 0s", "drain_delay: 800ms", 1)
	writeConfig(t, path, node+"rules:\n  - {name: api, rate: 1/s, burst: 100}\n")
	d := startFrom(t, path, Config{})
	waitReady(t, d)
	api := d.APIURL()
	shut := make(chan error, 1)
	start := time.Now()
	go func() { shut <- d.Shutdown(context.Background()) }()
	var sawDraining bool
	for time.Since(start) < 5*time.Second && !sawDraining {
		resp, err := http.Get(api + "/readyz")
		if err != nil {
			t.Fatalf("/readyz refused a connection %v after Shutdown began (the drain delay is 800ms): %v", time.Since(start), err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable && strings.TrimSpace(string(body)) == "draining" {
			sawDraining = true
			if r := check(t, d, "api", "k"); !r.Allowed {
				t.Errorf("a check while draining: %+v; want it answered (allowed)", r)
			}
		}
	}
	if !sawDraining {
		t.Fatal("/readyz never answered 503 draining")
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if took := time.Since(start); took < 800*time.Millisecond {
		t.Errorf("Shutdown returned after %v, before the drain delay of 800ms", took)
	}
	if c, err := net.DialTimeout("tcp", d.Addrs().API, time.Second); err == nil {
		c.Close()
		t.Error("the API still accepts connections after Shutdown")
	}
}
