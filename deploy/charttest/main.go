// Command charttest renders the tokenmesh Helm chart offline, with helm's
// own Go library (the same engine as `helm template`, pinned in go.mod),
// and validates every rendered object by decoding it strictly into the
// Kubernetes API types (k8s.io/api; an unknown or misspelt field fails),
// plus the chart's own invariants (the node config parses with tokenmesh's
// config package, the join list names every pod, probes, non-root).
//
//	go run . -chart ../helm/tokenmesh                 # validate (make chart-test)
//	go run . -chart ../helm/tokenmesh -check ../manifests/tokenmesh.yaml
//	go run . -chart ../helm/tokenmesh -write ../manifests/tokenmesh.yaml
//
// It is a module of its own (deploy/charttest/go.mod) so that the main
// module does not depend on helm and client-go. Not part of `make test`.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/tokenmesh/tokenmesh/config"
)

// scenarios are the value sets rendered and validated; "manifests" is the
// one deploy/manifests/ is rendered from (no generated secret in it).
var scenarios = []struct {
	name string
	vals map[string]any
}{
	{"defaults", nil},
	{"manifests", map[string]any{"secretKey": map[string]any{"existingSecret": "tokenmesh-secret"}}},
	{"everything", map[string]any{
		"replicas":       5,
		"tls":            map[string]any{"enabled": true, "secretName": "tokenmesh-tls"},
		"persistence":    map[string]any{"enabled": true, "storageClassName": "fast"},
		"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "prom"}},
		"secretKey":      map[string]any{"value": "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="},
		"node":           map[string]any{"reconnect_interval": "10s", "memory_limit": "256MiB"},
		"envoyConfig":    map[string]any{"rls.yaml": "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10}\n"},
		"rules": []any{
			map[string]any{"name": "api", "rate": "10/s", "burst": 20, "strategy": "owner"},
			map[string]any{"name": "tenant", "rate": "1000/min", "strategy": "gdrl", "key": "{header:x-tenant}"},
		},
	}},
	{"no-pdb", map[string]any{"podDisruptionBudget": map[string]any{"enabled": false}, "replicas": 1}},
}

func main() {
	chartDir := flag.String("chart", "../helm/tokenmesh", "the chart directory")
	write := flag.String("write", "", "write the \"manifests\" scenario's render to this file")
	check := flag.String("check", "", "fail when this file differs from the \"manifests\" scenario's render")
	dashboard := flag.String("dashboard", "", "also check this Grafana dashboard: every tokenmesh_* metric it queries is one server/ exports")
	flag.Parse()
	if *dashboard != "" {
		if err := checkDashboard(*dashboard, "../../server"); err != nil {
			fmt.Fprintln(os.Stderr, "charttest:", err)
			os.Exit(1)
		}
	}
	if err := run(*chartDir, *write, *check); err != nil {
		fmt.Fprintln(os.Stderr, "charttest:", err)
		os.Exit(1)
	}
}

func run(chartDir, write, check string) error {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return err
	}
	for _, sc := range scenarios {
		vals, err := chartutil.ToRenderValues(ch, sc.vals, chartutil.ReleaseOptions{Name: "tokenmesh", Namespace: "default", IsInstall: true}, nil)
		if err != nil {
			return fmt.Errorf("%s: values: %w", sc.name, err)
		}
		files, err := engine.Render(ch, vals)
		if err != nil {
			return fmt.Errorf("%s: render: %w", sc.name, err)
		}
		doc, n, err := validate(files, sc.vals)
		if err != nil {
			return fmt.Errorf("scenario %s: %w", sc.name, err)
		}
		fmt.Printf("ok  %-10s %d objects\n", sc.name, n)
		if sc.name != "manifests" {
			continue
		}
		out := "# Rendered from deploy/helm/tokenmesh by `make manifests` (helm template\n# with secretKey.existingSecret=tokenmesh-secret; create that Secret first,\n# docs/OPERATIONS.md). Do not edit: change the chart and render again.\n" + doc
		if write != "" {
			if err := os.WriteFile(write, []byte(out), 0o644); err != nil {
				return err
			}
		}
		if check != "" {
			have, err := os.ReadFile(check)
			if err != nil {
				return err
			}
			if string(have) != out {
				return fmt.Errorf("%s is not the chart's render; run make manifests", check)
			}
		}
	}
	return nil
}

// strict decodes JSON into v, refusing unknown fields.
func strict(j []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// serviceMonitor is the part of prometheus-operator's ServiceMonitor the
// chart writes (its CRD is not in k8s.io/api): unknown fields fail.
type serviceMonitor struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// validate decodes every object of the render strictly and checks the
// chart's invariants; it returns the render as one YAML stream (files in
// name order) and the number of objects.
func validate(files map[string]string, vals map[string]any) (string, int, error) {
	names := make([]string, 0, len(files))
	for name := range files {
		if strings.HasSuffix(name, ".yaml") {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var stream strings.Builder
	r := &render{kinds: map[string]int{}, services: map[string]corev1.Service{},
		configs: map[string]corev1.ConfigMap{}, secrets: map[string]corev1.Secret{}}
	count := 0
	for _, name := range names {
		for _, part := range strings.Split(files[name], "\n---") {
			if strings.TrimSpace(stripComments(part)) == "" {
				continue
			}
			if err := r.decode(name, part); err != nil {
				return "", 0, err
			}
			count++
			stream.WriteString("---\n# Source: " + name + "\n" + strings.TrimLeft(part, "\n") + "\n")
		}
	}
	if r.sts == nil {
		return "", 0, fmt.Errorf("no StatefulSet")
	}
	if err := checkStatefulSet(r.sts, r.services, r.configs, r.secrets); err != nil {
		return "", 0, fmt.Errorf("StatefulSet %s: %w", r.sts.Name, err)
	}
	if want := 1; r.kinds["PodDisruptionBudget"] != want && (vals == nil || vals["podDisruptionBudget"] == nil) {
		return "", 0, fmt.Errorf("%d PodDisruptionBudgets, want %d", r.kinds["PodDisruptionBudget"], want)
	}
	return stream.String(), count, nil
}

// render is the objects of a render, as validate decodes them.
type render struct {
	kinds    map[string]int // objects by kind
	sts      *appsv1.StatefulSet
	services map[string]corev1.Service
	configs  map[string]corev1.ConfigMap
	secrets  map[string]corev1.Secret
}

// decode decodes one object (part of file name) strictly into its type
// and keeps it.
func (r *render) decode(name, part string) error {
	j, err := yaml.YAMLToJSON([]byte(part))
	if err != nil {
		return fmt.Errorf("%s: not YAML: %w", name, err)
	}
	var head struct{ APIVersion, Kind string }
	if err := json.Unmarshal(j, &head); err != nil || head.Kind == "" {
		return fmt.Errorf("%s: no kind (%v)", name, err)
	}
	if err := r.decodeKind(head.APIVersion, head.Kind, j); err != nil {
		return fmt.Errorf("%s (%s): %w", name, head.Kind, err)
	}
	r.kinds[head.Kind]++
	return nil
}

// decodeKind decodes j, an object of apiVersion and kind, strictly.
func (r *render) decodeKind(apiVersion, kind string, j []byte) error {
	var derr error
	switch apiVersion + "/" + kind {
	case "apps/v1/StatefulSet":
		r.sts = &appsv1.StatefulSet{}
		derr = strict(j, r.sts)
	case "v1/Service":
		var s corev1.Service
		derr = strict(j, &s)
		r.services[s.Name] = s
	case "v1/ConfigMap":
		var c corev1.ConfigMap
		derr = strict(j, &c)
		r.configs[c.Name] = c
	case "v1/Secret":
		var s corev1.Secret
		derr = strict(j, &s)
		r.secrets[s.Name] = s
	case "policy/v1/PodDisruptionBudget":
		var p policyv1.PodDisruptionBudget
		derr = strict(j, &p)
		if derr == nil && p.Spec.MaxUnavailable == nil && p.Spec.MinAvailable == nil {
			derr = fmt.Errorf("PodDisruptionBudget without maxUnavailable or minAvailable")
		}
	case "monitoring.coreos.com/v1/ServiceMonitor":
		var m serviceMonitor
		derr = strict(j, &m)
	default:
		derr = fmt.Errorf("unexpected object %s %s", apiVersion, kind)
	}
	return derr
}

func stripComments(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// checkStatefulSet checks what the chart promises of the StatefulSet.
func checkStatefulSet(sts *appsv1.StatefulSet, services map[string]corev1.Service, configs map[string]corev1.ConfigMap, secrets map[string]corev1.Secret) error {
	hs, ok := services[sts.Spec.ServiceName]
	if !ok || hs.Spec.ClusterIP != "None" || !hs.Spec.PublishNotReadyAddresses {
		return fmt.Errorf("serviceName %q: want a headless Service publishing not-ready addresses", sts.Spec.ServiceName)
	}
	pod := sts.Spec.Template.Spec
	if err := checkPodSecurity(pod); err != nil {
		return err
	}
	c := pod.Containers[0]
	if err := checkProbes(c); err != nil {
		return err
	}
	if err := checkArgsEnv(sts, hs, c); err != nil {
		return err
	}
	return checkVolumes(pod, configs, secrets)
}

// checkPodSecurity checks the pod's and its one container's security
// contexts: non-root, read-only root, no privilege escalation.
func checkPodSecurity(pod corev1.PodSpec) error {
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		return fmt.Errorf("pod securityContext: want runAsNonRoot and a non-zero runAsUser")
	}
	if len(pod.Containers) != 1 {
		return fmt.Errorf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem ||
		c.SecurityContext.AllowPrivilegeEscalation == nil || *c.SecurityContext.AllowPrivilegeEscalation {
		return fmt.Errorf("container securityContext: want readOnlyRootFilesystem and no privilege escalation")
	}
	return nil
}

// checkProbes checks the container's liveness (/healthz) and readiness
// (/readyz) probes.
func checkProbes(c corev1.Container) error {
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		return fmt.Errorf("liveness probe: want GET /healthz")
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		return fmt.Errorf("readiness probe: want GET /readyz")
	}
	return nil
}

// checkArgsEnv checks the container's --name, its POD_NAME and POD_IP
// from the downward API, and that --join names every pod through the
// headless Service hs.
func checkArgsEnv(sts *appsv1.StatefulSet, hs corev1.Service, c corev1.Container) error {
	args := map[string]string{}
	for _, a := range c.Args {
		k, v, _ := strings.Cut(a, "=")
		args[k] = v
	}
	if args["--name"] != "$(POD_NAME)" {
		return fmt.Errorf("args %v: want --name=$(POD_NAME)", c.Args)
	}
	envs := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			envs[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if envs["POD_NAME"] != "metadata.name" || envs["POD_IP"] != "status.podIP" {
		return fmt.Errorf("env: want POD_NAME from metadata.name and POD_IP from status.podIP, got %v", envs)
	}
	replicas := 1
	if sts.Spec.Replicas != nil {
		replicas = int(*sts.Spec.Replicas)
	}
	join := strings.Split(args["--join"], ",")
	if len(join) != replicas {
		return fmt.Errorf("--join %v: want the %d pods", join, replicas)
	}
	for i, j := range join {
		want := fmt.Sprintf("%s-%d.%s.", sts.Name, i, hs.Name)
		if !strings.HasPrefix(j, want) {
			return fmt.Errorf("--join[%d] %q: want %s<namespace>.svc.cluster.local:<gossip port>", i, j, want)
		}
	}
	return nil
}

// checkVolumes checks that the config ConfigMap parses as a tokenmesh
// config, the secret volume names a Secret of this render (or an existing
// one).
func checkVolumes(pod corev1.PodSpec, configs map[string]corev1.ConfigMap, secrets map[string]corev1.Secret) error {
	var cfgName, secretName string
	for _, v := range pod.Volumes {
		switch {
		case v.Name == "config" && v.ConfigMap != nil:
			cfgName = v.ConfigMap.Name
		case v.Name == "secret" && v.Secret != nil:
			secretName = v.Secret.SecretName
		}
	}
	cm, ok := configs[cfgName]
	if !ok {
		return fmt.Errorf("config volume: ConfigMap %q not in the render", cfgName)
	}
	f, err := config.Parse([]byte(cm.Data["tokenmesh.yaml"]), "ConfigMap "+cfgName+" tokenmesh.yaml")
	if err != nil {
		return err
	}
	if f.Node.SecretKeyFile == "" {
		return fmt.Errorf("node config without secret_key_file: the cluster would refuse to start")
	}
	s, ok := secrets[secretName]
	if !ok {
		return nil
	}
	k := s.Data["secret-key"]
	if len(k) == 0 {
		return fmt.Errorf("Secret %s has no secret-key", secretName)
	}
	probe := "node:\n  secret_key: " + strings.TrimSpace(string(k)) + "\nrules:\n  - {name: r, rate: 1/s}\n"
	if _, err := config.Parse([]byte(probe), "Secret "+secretName); err != nil {
		return fmt.Errorf("the Secret's key is not a tokenmesh secret key: %w", err)
	}
	return nil
}

// exportedMetrics are the tokenmesh_* metrics registered in the Go files
// (tests left out) of serverDir.
func exportedMetrics(serverDir string) (map[string]bool, error) {
	srcs, err := filepath.Glob(filepath.Join(serverDir, "*.go"))
	if err != nil {
		return nil, err
	}
	var code strings.Builder
	for _, f := range srcs {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		code.Write(b)
	}
	exported := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?:Name:\s*|NewDesc\()"(tokenmesh_[a-z_]+)"`).FindAllStringSubmatch(code.String(), -1) {
		exported[m[1]] = true
	}
	return exported, nil
}

// checkDashboard decodes the dashboard and checks that every panel has
// queries and every tokenmesh_* metric they name (a histogram's _bucket
// series by its name) is registered in the Go files of serverDir.
func checkDashboard(path, serverDir string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var d struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	exported, err := exportedMetrics(serverDir)
	if err != nil {
		return err
	}
	if len(d.Panels) == 0 || len(exported) == 0 {
		return fmt.Errorf("%s: %d panels, %d metrics found in %s", path, len(d.Panels), len(exported), serverDir)
	}
	metric := regexp.MustCompile(`tokenmesh_[a-z_]+`)
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			return fmt.Errorf("%s: panel %q has no query", path, p.Title)
		}
		for _, t := range p.Targets {
			for _, name := range metric.FindAllString(t.Expr, -1) {
				if !exported[name] && !exported[strings.TrimSuffix(name, "_bucket")] {
					return fmt.Errorf("%s: panel %q queries %s, which server/ does not export", path, p.Title, name)
				}
			}
		}
	}
	fmt.Printf("ok  dashboard  %d panels\n", len(d.Panels))
	return nil
}
