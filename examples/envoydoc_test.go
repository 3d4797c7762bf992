package examples

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	rlqfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3" // the Any types of the doc's YAML
	_ "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"gopkg.in/yaml.v3"

	"github.com/tokenmesh/tokenmesh/envoyrls"
)

// docYAMLBlocks returns the ```yaml blocks of the markdown text, and the
// one that follows each marker line (a line starting with a marker, the
// block on the next line) by marker.
func docYAMLBlocks(t *testing.T, name, text string, markers ...string) (all []string, marked map[string]string) {
	t.Helper()
	marked = map[string]string{}
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		if lines[i] != "```yaml" {
			continue
		}
		j := i + 1
		for j < len(lines) && lines[j] != "```" {
			j++
		}
		if j == len(lines) {
			t.Fatalf("%s:%d: a ```yaml block is not closed", name, i+1)
		}
		block := strings.Join(lines[i+1:j], "\n") + "\n"
		all = append(all, block)
		for _, m := range markers {
			if i > 0 && strings.HasPrefix(lines[i-1], m) {
				marked[m] = block
			}
		}
		i = j
	}
	for _, m := range markers {
		if marked[m] == "" {
			t.Fatalf("%s: no ```yaml block after a %q line", name, m)
		}
	}
	return all, marked
}

// The markers before docs/ENVOY.md's RLQS blocks: the Envoy filter
// config, the tokenmesh limits.
const filterMarker, limitsMarker = "<!-- envoy-rlqs-filter:", "<!-- envoy-rlqs-limits:"

// envoyDoc is every ```yaml block of docs/ENVOY.md, and the RLQS blocks by
// marker.
func envoyDoc(t *testing.T) (all []string, marked map[string]string) {
	t.Helper()
	name := filepath.Join(repoRoot(t), "docs", "ENVOY.md")
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return docYAMLBlocks(t, name, string(b), filterMarker, limitsMarker, overdraftLimitsMarker, overdraftRouteMarker)
}

// The markers before docs/ENVOY.md's overdraft blocks: the tokenmesh
// limits, the route's typed_per_filter_config.
const overdraftLimitsMarker, overdraftRouteMarker = "<!-- envoy-overdraft-limits:", "<!-- envoy-overdraft-route:"

// TestEnvoyDocOverdraft: docs/ENVOY.md's overdraft limits load as a
// tenant limit whose rule has overdraft and the max_debt shown; its
// route config is a RateLimitPerRoute that Envoy's validation accepts,
// with a request-time rate limit of hits_addend 0 (a check) and one
// applied on stream done with a hits_addend format (the charge), on the
// same descriptor.
func TestEnvoyDocOverdraft(t *testing.T) {
	_, marked := envoyDoc(t)
	limits, err := envoyrls.Parse("llm.yaml", []byte(marked[overdraftLimitsMarker]))
	if err != nil {
		t.Fatalf("the overdraft limits do not load: %v", err)
	}
	rules := limits.Rules(time.Time{})
	if len(rules) != 1 || !slices.Contains(rules[0].Params, "overdraft=true") || !slices.Contains(rules[0].Params, "max_debt=5000") || rules[0].Burst != 1000 {
		t.Errorf("rules %+v: want one of burst 1000 with overdraft=true and max_debt=5000", rules)
	}
	var doc struct {
		TPFC map[string]map[string]any `yaml:"typed_per_filter_config"`
	}
	if err := yaml.Unmarshal([]byte(marked[overdraftRouteMarker]), &doc); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(doc.TPFC["envoy.filters.http.ratelimit"])
	if err != nil {
		t.Fatal(err)
	}
	var a anypb.Any
	if err := protojson.Unmarshal(js, &a); err != nil {
		t.Fatalf("the ratelimit filter's per-route config is not a valid Any: %v", err)
	}
	var per ratelimitfilterv3.RateLimitPerRoute
	if err := a.UnmarshalTo(&per); err != nil {
		t.Fatalf("not a RateLimitPerRoute: %v", err)
	}
	if err := per.ValidateAll(); err != nil {
		t.Fatalf("Envoy's validation refuses the per-route config: %v", err)
	}
	rl := per.GetRateLimits()
	if len(rl) != 2 || rl[0].GetApplyOnStreamDone() || rl[0].GetHitsAddend().GetNumber().GetValue() != 0 || rl[0].GetHitsAddend().GetNumber() == nil ||
		!rl[1].GetApplyOnStreamDone() || rl[1].GetHitsAddend().GetFormat() == "" ||
		!proto.Equal(rl[0].GetActions()[0], rl[1].GetActions()[0]) {
		t.Errorf("rate_limits %v: want a check of hits_addend 0 and a charge on stream done, one descriptor", rl)
	}
}

// TestEnvoyDocRLQS: every YAML block of docs/ENVOY.md parses as YAML; the
// RLQS filter config names envoy.filters.http.rate_limit_quota and its
// typed_config is a RateLimitQuotaFilterConfig that Envoy's own
// validation rules accept (go-control-plane's ValidateAll, the nested
// typed configs resolved), building the bucket id from the x-tenant
// header with DENY_ALL before an assignment and a token bucket after one
// expired; the tokenmesh side is an envoyproxy/ratelimit file whose
// tenant limit is served over RLQS (strategy quota) for bucket
// {tenant: ...} of the filter's domain.
func TestEnvoyDocRLQS(t *testing.T) {
	all, marked := envoyDoc(t)
	for i, block := range all {
		var v any
		if err := yaml.Unmarshal([]byte(block), &v); err != nil {
			t.Errorf("docs/ENVOY.md: yaml block %d does not parse: %v\n%s", i, err, block)
		}
	}

	var doc struct {
		HTTPFilters []struct {
			Name        string         `yaml:"name"`
			TypedConfig map[string]any `yaml:"typed_config"`
		} `yaml:"http_filters"`
	}
	if err := yaml.Unmarshal([]byte(marked[filterMarker]), &doc); err != nil {
		t.Fatal(err)
	}
	var typed map[string]any
	for _, f := range doc.HTTPFilters {
		if f.Name == "envoy.filters.http.rate_limit_quota" {
			typed = f.TypedConfig
		}
	}
	if typed == nil {
		t.Fatalf("the filter config names no envoy.filters.http.rate_limit_quota filter:\n%s", marked[filterMarker])
	}
	js, err := json.Marshal(typed)
	if err != nil {
		t.Fatal(err)
	}
	var a anypb.Any
	if err := protojson.Unmarshal(js, &a); err != nil {
		t.Fatalf("typed_config is not a valid Any (an unknown field or type?): %v", err)
	}
	var cfg rlqfilterv3.RateLimitQuotaFilterConfig
	if err := a.UnmarshalTo(&cfg); err != nil {
		t.Fatalf("typed_config is not a RateLimitQuotaFilterConfig: %v", err)
	}
	if err := cfg.ValidateAll(); err != nil {
		t.Fatalf("Envoy's validation refuses the filter config: %v", err)
	}
	if cfg.GetRlqsServer().GetEnvoyGrpc().GetClusterName() != "tokenmesh" || cfg.GetDomain() != "edge" {
		t.Errorf("rlqs_server %v, domain %q; want the tokenmesh cluster, domain edge", cfg.GetRlqsServer(), cfg.GetDomain())
	}
	m := cfg.GetBucketMatchers().GetMatcherList().GetMatchers()
	if len(m) != 1 {
		t.Fatalf("%d matchers, want 1", len(m))
	}
	var settings rlqfilterv3.RateLimitQuotaBucketSettings
	if err := m[0].GetOnMatch().GetAction().GetTypedConfig().UnmarshalTo(&settings); err != nil {
		t.Fatalf("the matcher's action is not RateLimitQuotaBucketSettings: %v", err)
	}
	if err := settings.ValidateAll(); err != nil {
		t.Fatalf("Envoy's validation refuses the bucket settings: %v", err)
	}
	if v := settings.GetBucketIdBuilder().GetBucketIdBuilder()["tenant"].GetCustomValue(); v == nil || !strings.Contains(v.GetTypedConfig().GetTypeUrl(), "HttpRequestHeaderMatchInput") {
		t.Errorf("bucket_id tenant is not taken from a request header: %v", v)
	}
	if settings.GetNoAssignmentBehavior().GetFallbackRateLimit().GetBlanketRule().String() != "DENY_ALL" ||
		settings.GetExpiredAssignmentBehavior().GetFallbackRateLimit().GetTokenBucket() == nil ||
		settings.GetExpiredAssignmentBehavior().GetExpiredAssignmentBehaviorTimeout().AsDuration() <= 0 ||
		settings.GetReportingInterval().AsDuration() <= 0 {
		t.Errorf("fallbacks / reporting_interval: %v", &settings)
	}

	limits, err := envoyrls.Parse("edge.yaml", []byte(marked[limitsMarker]))
	if err != nil {
		t.Fatalf("the tokenmesh side does not load: %v", err)
	}
	l, _ := limits.MatchBucket(cfg.GetDomain(), map[string]string{"tenant": "acme"})
	if l == nil || l.Strategy != "quota" || l.RequestsPerUnit != 100 {
		t.Errorf("bucket {tenant: acme} of domain %s matches %+v; want the tenant limit, strategy quota", cfg.GetDomain(), l)
	}
}

// examples/envoy/rlqs is the doc's RLQS example, whole: envoy.yaml is an
// Envoy v3 bootstrap (checkBootstrap) whose HTTP connection manager has
// exactly the doc's http_filters, and ratelimit/ loads as
// `serve --envoy-config` loads it, with the doc's limits.
func TestEnvoyRLQSExample(t *testing.T) {
	_, marked := envoyDoc(t)
	name := filepath.Join("envoy", "rlqs", "envoy.yaml")
	doc := envoyYAML(t, name)
	checkBootstrap(t, name, doc)
	hcm := node{t, "", doc}.at("static_resources", "listeners", 0, "filter_chains", 0, "filters", 0, "typed_config")
	var want map[string]any
	if err := yaml.Unmarshal([]byte(marked[filterMarker]), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(hcm.at("http_filters").v, want["http_filters"]) {
		t.Errorf("%s: http_filters differ from docs/ENVOY.md's RLQS filter config", name)
	}
	dir, err := envoyrls.LoadDir(filepath.Join("envoy", "rlqs", "ratelimit"))
	if err != nil {
		t.Fatal(err)
	}
	doclimits, err := envoyrls.Parse("doc", []byte(marked[limitsMarker]))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := dir.Rules(time.Time{}), doclimits.Rules(time.Time{}); !reflect.DeepEqual(got, want) {
		t.Errorf("envoy/rlqs/ratelimit's rules %v, docs/ENVOY.md's %v", got, want)
	}
}
