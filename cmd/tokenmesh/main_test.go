package main

// End-to-end tests: they build the real binary and run it as a user would.

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tokenmesh/tokenmesh/internal/e2e"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/registry"
)

var binary string

func TestMain(m *testing.M) { os.Exit(e2e.Main(m, &binary)) }

// tokenmesh runs the binary and returns stdout, stderr and the exit code.
func tokenmesh(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

// sharedTrace returns the path of a trace in ../shared/data/traces, the
// project's real test data (never copied into the repo).
func sharedTrace(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "..", "shared", "data", "traces", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("real trace not available (%v); CI has ../shared beside the repo", err)
	}
	return p
}

type jsonReport struct {
	Results []struct {
		Strategy          string   `json:"strategy"`
		Requests          int      `json:"requests"`
		Admitted          int      `json:"admitted"`
		Rejected          int      `json:"rejected"`
		Precision         *float64 `json:"precision"`
		ExcessAdmittedPct *float64 `json:"excess_admitted_pct"`
		FalseRejections   *int     `json:"false_rejections"`
		Envelope          *float64 `json:"envelope_violation_tokens"`
		Messages          *int64   `json:"messages"`
		Bytes             *int64   `json:"bytes"`
		StateBytesPeak    *int     `json:"state_bytes_peak"`
		P50               *float64 `json:"decision_latency_p50_ms"`
		P99               *float64 `json:"decision_latency_p99_ms"`
	} `json:"results"`
}

// The acceptance run of the foundation issue, on the real HTTP trace.
func TestSimOnRealTrace(t *testing.T) {
	trace := sharedTrace(t, "zanbil-2019-http.csv.gz")
	args := []string{"sim", "--trace", trace, "--nodes", "10", "--rate", "1", "--burst", "10",
		"--strategies", "central,local,static,owner", "--json"}
	out1, errOut, code := tokenmesh(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	out2, _, _ := tokenmesh(t, args...)
	if out1 != out2 {
		t.Fatal("the same command twice gave different JSON")
	}
	var rep jsonReport
	if err := json.Unmarshal([]byte(out1), &rep); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, out1)
	}
	byName := map[string]int{}
	for i, r := range rep.Results {
		byName[r.Strategy] = i
		if r.Requests != 100000 || r.Admitted+r.Rejected != r.Requests {
			t.Errorf("%s: requests %d admitted %d rejected %d", r.Strategy, r.Requests, r.Admitted, r.Rejected)
		}
		if r.ExcessAdmittedPct == nil || r.FalseRejections == nil || r.Envelope == nil || r.Messages == nil ||
			r.Bytes == nil || r.StateBytesPeak == nil || r.P50 == nil || r.P99 == nil {
			t.Errorf("%s: a metric is missing from the JSON", r.Strategy)
		}
	}
	if len(rep.Results) != 4 {
		t.Fatalf("got %d results, want 4", len(rep.Results))
	}
	c := rep.Results[byName["central"]]
	if c.Precision == nil || *c.Precision != 1 || *c.ExcessAdmittedPct != 0 || *c.Envelope != 0 {
		t.Errorf("central: precision %v excess %v envelope %v", c.Precision, *c.ExcessAdmittedPct, *c.Envelope)
	}
	if c.Rejected == 0 {
		t.Error("central rejected nothing at 1/s burst 10: the comparison says nothing")
	}
	o := rep.Results[byName["owner"]]
	if *o.ExcessAdmittedPct != 0 || *o.FalseRejections != 0 || o.Rejected != c.Rejected || *o.Messages == 0 {
		t.Errorf("owner: excess %v%%, false rejections %d, rejected %d (central %d), messages %d: want an exact match",
			*o.ExcessAdmittedPct, *o.FalseRejections, o.Rejected, c.Rejected, *o.Messages)
	}
	if l := rep.Results[byName["local"]]; *l.ExcessAdmittedPct <= 0 || *l.Envelope <= 0 {
		t.Errorf("local: excess %v%% envelope %v: want both > 0", *l.ExcessAdmittedPct, *l.Envelope)
	}
	if s := rep.Results[byName["static"]]; *s.Envelope != 0 {
		t.Errorf("static violated the envelope by %v tokens", *s.Envelope)
	}
}

func TestSimDefaultWorkloadAndOut(t *testing.T) {
	dir := t.TempDir()
	out, errOut, code := tokenmesh(t, "sim", "--out", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, s := range []string{"central", "local", "static", "owner", "precision"} {
		if !strings.Contains(out, s) {
			t.Errorf("table lacks %q:\n%s", s, out)
		}
	}
	for _, f := range []string{"report.json", "report.md", "decisions.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("--out did not write %s: %v", f, err)
		}
	}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	corrupt := filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(corrupt, []byte("ts_ms,key\n0,a\n10,b\nxyz,c\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badScenario := filepath.Join(dir, "s.yaml")
	if err := os.WriteFile(badScenario, []byte("events:\n  - at: 1s\n    crash: [n42]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"sim", "--strategies", "central,bogus"}, `unknown strategy "bogus"`},
		{[]string{"sim", "--trace", filepath.Join(dir, "missing.csv")}, "missing.csv"},
		{[]string{"sim", "--trace", corrupt}, "bad.csv:4"},
		{[]string{"sim", "--rate", "-1"}, "--rate -1"},
		{[]string{"sim", "--burst", "0"}, "--burst 0"},
		{[]string{"sim", "--nodes", "0"}, "--nodes 0"},
		{[]string{"sim", "--loss", "1.5"}, "loss"},
		{[]string{"sim", "--latency", "fast"}, "latency"},
		{[]string{"sim", "--assign", "magic"}, "magic"},
		{[]string{"sim", "--param", "owner.nonsense=1", "--strategies", "owner"}, "nonsense"},
		{[]string{"sim", "--param", "hold=1ms"}, "name the strategy"},
		{[]string{"sim", "--param", "owner.retries=1.5", "--strategies", "owner"}, `--param owner.retries: strategy owner: parameter retries="1.5": want a whole number`},
		{[]string{"sim", "--param", "gdrl.graph=star", "--strategies", "gdrl"}, "want one of ring, regular, full"},
		{[]string{"sim", "--param", "lease.period=soon", "--strategies", "owner"}, `period="soon": want a duration`},
		{[]string{"strategies", "bogus"}, `unknown strategy "bogus"`},
		{[]string{"sim", "--param", "gdrl.overdraft=true", "--strategies", "gdrl"}, "strategy gdrl does not implement overdraft"},

		{[]string{"sim", "--param", "partition=maybe", "--strategies", "static"}, `partition=maybe: partition "maybe": want available or conserve`},
		{[]string{"sim", "--param", "static.partition=maybe", "--strategies", "static"}, `partition="maybe": want available or conserve`},
		{[]string{"sim", "--param", "partition=conserve", "--strategies", "static,local"}, "local does not implement partition: conserve"},
		{[]string{"sim", "--scenario", badScenario}, "n42"},
		{[]string{"sim", "--workload", "poisson:users=-3"}, "users"},
		{[]string{"sim", "--max-wait", "-1s"}, "--max-wait -1s"},
		{[]string{"sim", "--max-wait", "2h"}, "--max-wait 2h0m0s"},
		{[]string{"sim", "--recommend", "--max-excess", "lots"}, "--max-excess"},
		{[]string{"sim", "--recommend", "--max-false-rejections", "150%"}, "--max-false-rejections"},
		{[]string{"sim", "--recommend", "--max-shortfall", "-1%"}, "--max-shortfall"},
	}
	for _, c := range cases {
		_, errOut, code := tokenmesh(t, c.args...)
		if code == 0 {
			t.Errorf("%v: exit 0", c.args)
			continue
		}
		if !strings.Contains(errOut, c.want) {
			t.Errorf("%v: stderr %q does not name %q", c.args, errOut, c.want)
		}
	}
	// --skip-bad counts the corrupt line and goes on.
	_, errOut, code := tokenmesh(t, "sim", "--trace", corrupt, "--skip-bad", "--nodes", "2")
	if code != 0 || !strings.Contains(errOut, "skipped 1") {
		t.Errorf("--skip-bad: exit %d, stderr %q", code, errOut)
	}
}

func TestHelpExplains(t *testing.T) {
	out, _, code := tokenmesh(t, "sim", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, s := range []string{"--trace", "--strategies", "owner", "precision", "Examples"} {
		if !strings.Contains(out, s) {
			t.Errorf("sim --help lacks %q", s)
		}
	}
}

// TestStrategiesListsParams: `tokenmesh strategies` shows every strategy
// and, for each, whether it snapshots and every declared parameter with
// its type and default.
func TestStrategiesListsParams(t *testing.T) {
	out, errOut, code := tokenmesh(t, "strategies")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	sections := map[string]string{}
	for _, sec := range strings.Split(out, "\n\n") {
		name, _, _ := strings.Cut(sec, ":")
		sections[name] = sec
	}
	for _, info := range registry.List() {
		sec, ok := sections[info.Name]
		if !ok {
			t.Errorf("no section for %s in\n%s", info.Name, out)
			continue
		}
		for _, want := range []string{restartLine(info), fastPathLine(info)} {
			if !strings.Contains(sec, "\n"+want+"\n") {
				t.Errorf("%s: the section lacks its line %q", info.Name, want)
			}
		}
		if len(info.Params) == 0 {
			continue // no parameter table, not even partition's row
		}
		for _, p := range append(slices.Clone(info.Params), strategy.PartitionSpec) {
			// A row starts with two spaces and the name; a wrapped doc's
			// continuation lines are indented further.
			var row string
			for _, line := range strings.Split(sec, "\n") {
				if strings.HasPrefix(line, "  "+p.Name+" ") {
					row = line
				}
			}
			if row == "" || !strings.Contains(row, p.TypeText()) || (p.Default != "" && !strings.Contains(row, p.Default)) {
				t.Errorf("%s.%s: row %q lacks type %q or default %q", info.Name, p.Name, row, p.TypeText(), p.Default)
			}
		}
	}
	one, _, code := tokenmesh(t, "strategies", "gcounter")
	if code != 0 || !strings.HasPrefix(one, "gcounter:") || strings.Contains(one, "owner:") || !strings.Contains(one, "catch_up") {
		t.Errorf("strategies gcounter: exit %d, output\n%s", code, one)
	}
}

func TestPlan(t *testing.T) {
	out, errOut, code := tokenmesh(t, "plan", "--brokers", "../../examples/srtm/brokers.yaml", "--topic", "../../examples/srtm/topic.yaml")
	if code != 0 || !strings.Contains(out, "broker-4") || !strings.Contains(out, "policy maxmin") {
		t.Fatalf("default is SRTM's max-min: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = tokenmesh(t, "plan", "--brokers", "../../examples/srtm/brokers.yaml", "--topic", "../../examples/srtm/topic.yaml", "--policy", "concentration")
	if code != 0 || !strings.Contains(out, "policy concentration") {
		t.Fatalf("--policy concentration: exit %d\n%s%s", code, out, errOut)
	}
	help, _, _ := tokenmesh(t, "plan", "--help")
	for _, want := range []string{"maxmin         the paper's", "concentration  ours", "--stop-within", "footnote 11"} {
		if !strings.Contains(help, want) {
			t.Errorf("plan --help lacks %q", want)
		}
	}
	for _, args := range [][]string{{"--policy", "greedy"}, {"--simulate", "--stop-within", "1"}, {"--simulate", "--stop-within", "-0.1"}, {"--stop-within", "0.1"}} {
		_, errOut, code := tokenmesh(t, append([]string{"plan", "--brokers", "../../examples/srtm/brokers.yaml", "--topic", "../../examples/srtm/topic.yaml"}, args...)...)
		if code == 0 || !strings.Contains(errOut, args[len(args)-2]) {
			t.Errorf("plan %v: exit %d, stderr %q", args, code, errOut)
		}
	}
	dir := t.TempDir()
	small := filepath.Join(dir, "small.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(small, []byte("brokers:\n  - name: a\n    mcap: 100\n"), 0o644)
	os.WriteFile(bad, []byte("brokers:\n  - name: a\n    mcap: 100\n    lod: 3\n"), 0o644)
	for _, c := range []struct{ brokers, want string }{{small, "exceeds the total residual capacity"}, {bad, "lod"}} {
		_, errOut, code := tokenmesh(t, "plan", "--brokers", c.brokers, "--topic", "../../examples/srtm/topic.yaml")
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("plan --brokers %s: exit %d, stderr %q, want it to name %q", c.brokers, code, errOut, c.want)
		}
	}
}

func TestPlanSimulate(t *testing.T) {
	out, errOut, code := tokenmesh(t, "plan", "--brokers", "../../examples/srtm/brokers.yaml", "--topic", "../../examples/srtm/topic.yaml", "--simulate")
	if code != 0 || !strings.Contains(out, "online fitting") || !strings.Contains(out, "measurement rounds per iteration") || !strings.Contains(out, "p99") || !strings.Contains(out, "all") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
}

// --param partition=conserve without a strategy applies to every listed
// strategy; a prefixed one to that strategy only. Without faults N = k and
// conserve decides as available.
func TestSimPartitionParam(t *testing.T) {
	// --recommend=false: the recommendation names the parameters given.
	base := []string{"sim", "--workload", "poisson:users=20,rate=2,duration=20s", "--nodes", "3", "--json", "--strategies", "static,gdrl",
		"--recommend=false"}
	plain, errOut, code := tokenmesh(t, base...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, p := range []string{"partition=conserve", "gdrl.partition=conserve", "partition=available"} {
		out, errOut, code := tokenmesh(t, append(base, "--param", p)...)
		if code != 0 {
			t.Fatalf("--param %s: exit %d: %s", p, code, errOut)
		}
		if out != plain {
			t.Errorf("--param %s: no-fault output differs from the run without it", p)
		}
	}
}

// The report ends with the recommendation (on by default) and the next
// commands; --max-wait adds the waiting time table; --recommend=false
// leaves the recommendation out.
func TestSimRecommendAndMaxWait(t *testing.T) {
	args := []string{"sim", "--workload", "poisson:users=5,rate=3,duration=10s", "--nodes", "3",
		"--strategies", "owner,static", "--max-wait", "500ms", "--progress", "never"}
	out, errOut, code := tokenmesh(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	tail := out[strings.LastIndex(out, "\nrecommendation: ")+1:]
	if !strings.HasPrefix(tail, "recommendation: owner") || !strings.Contains(tail, "\nnext: evaluate your own traffic") ||
		!strings.HasSuffix(tail, "\n  tokenmesh serve --config examples/cluster/n1.yaml\n") {
		t.Errorf("the report does not end with the recommendation and the next commands:\n%s", tail)
	}
	for _, want := range []string{"max wait 500 ms", "waiting mode", "note: assign roundrobin"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	out, _, _ = tokenmesh(t, append(args, "--recommend=false")...)
	if strings.Contains(out, "recommendation:") || strings.Contains(out, "next:") {
		t.Errorf("--recommend=false printed a recommendation:\n%s", out)
	}
}

// The first command of the README: round-robin, every line within 120
// columns, the verdict and what to run next at the end; --wide prints the
// table whole; --assign hash is still there and says whom it flatters.
func TestSimDefaultOutput(t *testing.T) {
	out, errOut, code := tokenmesh(t, "sim", "--progress", "never")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "assign roundrobin") {
		t.Errorf("the default assignment is not round-robin:\n%s", out)
	}
	for i, l := range strings.Split(out, "\n") {
		if len(l) > 120 {
			t.Errorf("line %d has %d columns: %s", i+1, len(l), l)
		}
	}
	if !strings.Contains(out, "\nrecommendation: ") || !strings.HasSuffix(out, "  tokenmesh serve --config examples/cluster/n1.yaml\n") {
		t.Errorf("the report does not end with the recommendation and the next commands:\n%s", out)
	}
	wide, _, _ := tokenmesh(t, "sim", "--progress", "never", "--wide")
	if !strings.Contains(wide, "envelope viol.   msgs") {
		t.Errorf("--wide did not print the table whole:\n%s", wide)
	}
	hash, _, _ := tokenmesh(t, "sim", "--progress", "never", "--assign", "hash", "--strategies", "owner,static")
	if !strings.Contains(hash, "assign hash") || !strings.Contains(hash, "FLATTERS") || !strings.Contains(hash, "(static)") {
		t.Errorf("--assign hash does not say it flatters static (and only static):\n%s", hash)
	}
}

// A scenario event after the trace's end is named on stderr with the
// trace's end.
func TestSimWarnsOfLateScenarioEvents(t *testing.T) {
	_, errOut, code := tokenmesh(t, "sim", "--trace", "../../examples/access.log", "--strategies", "owner", "--progress", "never",
		"--scenario", "../../examples/scenarios/crash-hot-owner.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(errOut, `"restart n0,n1,n2,n3,n4,n5,n6,n7,n8,n9" at 9m0s falls after the trace's end (its last request arrives at 4m57s)`) {
		t.Errorf("no warning of the restart after the trace's end:\n%s", errOut)
	}
	_, errOut, _ = tokenmesh(t, "sim", "--trace", "../../examples/access.log", "--strategies", "owner", "--progress", "never",
		"--scenario", "../../examples/scenarios/crash-hot-owner-access-log.yaml")
	if strings.Contains(errOut, "warning") {
		t.Errorf("a scenario within the trace was warned about:\n%s", errOut)
	}
}

// --shortfall-window adds the shortfall column and JSON fields (and the
// recommendation's bound on the shortfall), leaves the output without it
// alone, and refuses a negative window.
func TestSimShortfallWindow(t *testing.T) {
	base := []string{"sim", "--workload", "poisson:users=10,rate=3,duration=10s", "--nodes", "3", "--json", "--strategies", "static", "--progress", "never"}
	plain, errOut, code := tokenmesh(t, base...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	out, errOut, code := tokenmesh(t, append(base, "--shortfall-window", "1s")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var got struct {
		Results        []map[string]any `json:"results"`
		Recommendation struct {
			Bounds map[string]any `json:"bounds"`
		} `json:"recommendation"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Results) == 0 {
		t.Fatalf("no results in\n%s", out) // else the loop below checks nothing
	}
	// The recommendation then bounds the shortfall (--max-shortfall, 0.5%).
	if v, ok := got.Recommendation.Bounds["max_shortfall_pct"]; !ok || v != 0.5 {
		t.Errorf("recommendation bounds %v: want max_shortfall_pct 0.5", got.Recommendation.Bounds)
	}
	for _, r := range got.Results {
		if _, ok := r["shortfall_pct"]; !ok {
			t.Errorf("%v: no shortfall_pct", r["strategy"])
		}
	}
	if strings.Contains(plain, "shortfall") {
		t.Errorf("shortfall without --shortfall-window:\n%s", plain)
	}
	if _, errOut, code := tokenmesh(t, append(base, "--shortfall-window", "-1s")...); code != 2 || !strings.Contains(errOut, "--shortfall-window") {
		t.Errorf("negative window: exit %d, stderr %q; want a usage error naming the flag", code, errOut)
	}
}

// tokenmesh strategies fits 120 columns, every doc still there; --wide
// prints one line per parameter.
func TestStrategiesFit120Columns(t *testing.T) {
	out, errOut, code := tokenmesh(t, "strategies")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for i, l := range strings.Split(out, "\n") {
		if len(l) > 120 {
			t.Errorf("line %d has %d columns: %s", i+1, len(l), l)
		}
	}
	flat := strings.Join(strings.Fields(out), " ")
	for _, info := range registry.List() {
		for _, p := range info.Params {
			if !strings.Contains(flat, strings.Join(strings.Fields(p.Doc), " ")) {
				t.Errorf("%s.%s: its doc is not in the output", info.Name, p.Name)
			}
		}
	}
	wide, _, _ := tokenmesh(t, "strategies", "--wide", "owner")
	found := false
	for _, l := range strings.Split(wide, "\n") {
		found = found || (strings.HasPrefix(l, "  hold ") && strings.HasSuffix(l, "decided once it is this old (003)."))
	}
	if !found {
		t.Errorf("--wide did not print owner's hold on one line:\n%s", wide)
	}
}
