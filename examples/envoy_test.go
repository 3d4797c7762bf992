package examples

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	// The typed_config types envoy.yaml names, for protojson's Any.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"gopkg.in/yaml.v3"

	"github.com/tokenmesh/tokenmesh/envoyrls"
)

// exampleEnvoyYAML is the RLS example's Envoy config.
var exampleEnvoyYAML = filepath.Join("envoy", "envoy.yaml")

// envoyYAML is the Envoy config at name (a path under examples/), parsed
// as YAML.
func envoyYAML(t *testing.T, name string) any {
	t.Helper()
	raw, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s is not YAML: %v", name, err)
	}
	return doc
}

// checkBootstrap: doc (the file name) is what Envoy loads: a v3 Bootstrap
// in Envoy's own protos (go-control-plane's, read strictly by protojson:
// an unknown or misspelt field fails, as in Envoy) that passes their
// validation rules (required fields, enums, durations, the typed_config
// types, which the test binary must link).
func checkBootstrap(t *testing.T, name string, doc any) {
	t.Helper()
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var boot bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &boot); err != nil {
		t.Fatalf("%s is not an Envoy v3 bootstrap: %v", name, err)
	}
	if err := boot.ValidateAll(); err != nil {
		t.Fatalf("%s breaks Envoy's proto constraints: %v", name, err)
	}
}

// envoy.yaml is what Envoy loads (checkBootstrap).
func TestEnvoyYAMLIsAnEnvoyBootstrap(t *testing.T) {
	checkBootstrap(t, exampleEnvoyYAML, envoyYAML(t, exampleEnvoyYAML))
}

// The shipped ratelimit directory loads as `tokenmesh serve --envoy-config`
// loads it, and derives one tokenmesh rule per limited descriptor.
func TestEnvoyRatelimitConfigLoads(t *testing.T) {
	cfg, err := envoyrls.LoadDir(filepath.Join("envoy", "ratelimit"))
	if err != nil {
		t.Fatal(err)
	}
	var rules []string
	for _, r := range cfg.Rules(time.Unix(0, 0)) {
		rules = append(rules, r.Name+" "+r.Strategy)
	}
	want := []string{"rls.edge.remote_address owner", "rls.edge.api_key owner", "rls.edge.generic_key_uploads.remote_address owner"}
	if strings.Join(rules, "; ") != strings.Join(want, "; ") {
		t.Errorf("rules %q, want %q", rules, want)
	}
}

// node is a YAML document navigated by keys and indexes; a missing step
// fails the test naming the path.
type node struct {
	t    *testing.T
	path string
	v    any
}

func (n node) at(steps ...any) node {
	n.t.Helper()
	for _, s := range steps {
		switch k := s.(type) {
		case string:
			m, ok := n.v.(map[string]any)
			if !ok || m[k] == nil {
				n.t.Fatalf("envoy.yaml: %s has no %q", n.path, k)
			}
			n = node{n.t, n.path + "." + k, m[k]}
		case int:
			l, ok := n.v.([]any)
			if !ok || k >= len(l) {
				n.t.Fatalf("envoy.yaml: %s has no item %d", n.path, k)
			}
			n = node{n.t, fmt.Sprintf("%s[%d]", n.path, k), l[k]}
		}
	}
	return n
}

func (n node) list() []node {
	n.t.Helper()
	l, ok := n.v.([]any)
	if !ok {
		n.t.Fatalf("envoy.yaml: %s is not a list", n.path)
	}
	out := make([]node, len(l))
	for i, v := range l {
		out[i] = node{n.t, fmt.Sprintf("%s[%d]", n.path, i), v}
	}
	return out
}

func (n node) str() string { return fmt.Sprint(n.v) }

// envoy.yaml parses as YAML and is the whole path: a listener whose
// routes carry rate_limits actions, the global rate limit filter
// (envoy.filters.http.ratelimit, before the router) asking the cluster
// tokenmesh over gRPC with transport_api_version V3, and that cluster with
// HTTP/2 on node.grpc_addr's default; every action list builds a
// descriptor the shipped ratelimit config limits (envoyrls.Config.Match,
// as `serve --envoy-config` answers).
func TestEnvoyYAMLNamesTheFilterAndActions(t *testing.T) {
	doc := envoyYAML(t, exampleEnvoyYAML)
	root := node{t, "", doc}
	rls, err := envoyrls.LoadDir(filepath.Join("envoy", "ratelimit"))
	if err != nil {
		t.Fatal(err)
	}

	hcm := root.at("static_resources", "listeners", 0, "filter_chains", 0, "filters", 0)
	if hcm.at("name").str() != "envoy.filters.network.http_connection_manager" {
		t.Fatalf("%s is %s, want the HTTP connection manager", hcm.path, hcm.at("name").str())
	}
	cfg := hcm.at("typed_config")

	filters := cfg.at("http_filters").list()
	var rl *node
	for i, f := range filters {
		if f.at("name").str() == "envoy.filters.http.ratelimit" {
			rl = &filters[i]
		}
	}
	if rl == nil || filters[len(filters)-1].at("name").str() != "envoy.filters.http.router" {
		t.Fatalf("http_filters: want envoy.filters.http.ratelimit, and the router last")
	}
	tc := rl.at("typed_config")
	if tc.at("@type").str() != "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit" {
		t.Errorf("the rate limit filter's @type is %s", tc.at("@type").str())
	}
	svc := tc.at("rate_limit_service")
	if svc.at("transport_api_version").str() != "V3" || svc.at("grpc_service", "envoy_grpc", "cluster_name").str() != "tokenmesh" {
		t.Errorf("rate_limit_service: want transport_api_version V3 and envoy_grpc cluster tokenmesh")
	}
	domain := tc.at("domain").str()
	if rls.Domains[domain] == nil {
		t.Errorf("the filter's domain %q is not a domain of envoy/ratelimit", domain)
	}

	clusters := map[string]node{}
	for _, c := range root.at("static_resources", "clusters").list() {
		clusters[c.at("name").str()] = c
	}
	tm, ok := clusters["tokenmesh"]
	if !ok {
		t.Fatal("envoy.yaml: no cluster tokenmesh")
	}
	tm.at("typed_extension_protocol_options", "envoy.extensions.upstreams.http.v3.HttpProtocolOptions", "explicit_http_config", "http2_protocol_options")
	addr := tm.at("load_assignment", "endpoints", 0, "lb_endpoints", 0, "endpoint", "address", "socket_address")
	if got := addr.at("address").str() + ":" + addr.at("port_value").str(); got != "127.0.0.1:8081" {
		t.Errorf("cluster tokenmesh at %s, want node.grpc_addr's default 127.0.0.1:8081", got)
	}

	routes := 0
	for _, vh := range cfg.at("route_config", "virtual_hosts").list() {
		for _, r := range vh.at("routes").list() {
			routes++
			if _, ok := clusters[r.at("route", "cluster").str()]; !ok {
				t.Errorf("%s: no cluster %s", r.path, r.at("route", "cluster").str())
			}
			for _, limit := range r.at("route", "rate_limits").list() {
				entries := descriptor(t, limit.at("actions").list())
				if l, _ := rls.Match(domain, entries); l == nil || l.Rule == "" {
					t.Errorf("%s: descriptor %v has no limit in envoy/ratelimit", limit.path, entries)
				}
			}
		}
	}
	if routes == 0 {
		t.Error("envoy.yaml has no routes")
	}
}

// descriptor is the descriptor Envoy builds from a rate_limits entry's
// actions for a request (a sample value where the request gives one).
func descriptor(t *testing.T, actions []node) []envoyrls.Entry {
	t.Helper()
	var out []envoyrls.Entry
	for _, a := range actions {
		m, _ := a.v.(map[string]any)
		switch {
		case m["remote_address"] != nil:
			out = append(out, envoyrls.Entry{Key: "remote_address", Value: "203.0.113.7"})
		case m["request_headers"] != nil:
			out = append(out, envoyrls.Entry{Key: a.at("request_headers", "descriptor_key").str(), Value: "key-1"})
		case m["generic_key"] != nil:
			k := "generic_key" // Envoy's default descriptor_key
			if g, _ := m["generic_key"].(map[string]any); g["descriptor_key"] != nil {
				k = fmt.Sprint(g["descriptor_key"])
			}
			out = append(out, envoyrls.Entry{Key: k, Value: a.at("generic_key", "descriptor_value").str()})
		default:
			t.Fatalf("%s: the test knows remote_address, request_headers and generic_key actions", a.path)
		}
	}
	return out
}
