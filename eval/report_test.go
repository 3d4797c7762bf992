package eval

import (
	"bytes"
	"encoding/json"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy/registry"
	"github.com/tokenmesh/tokenmesh/workload"
	"gonum.org/v1/plot"
)

func ptr(v float64) *float64 { return &v }

// testReport is a small hand-made report: central, local (over-admits) and
// static (over-rejects, precision undefined).
func testReport() *Report {
	return &Report{
		Input: Input{Name: "sample.csv", Requests: 100, Keys: 3, SpanSec: 4.5},
		Setup: Setup{Nodes: 3, RatePerSec: 10, Burst: 20, Assign: "round-robin", Latency: "2ms",
			Loss: 0.01, Scenario: "partition", Seed: 7},
		Results: []Result{
			{Strategy: "central", Requests: 100, Admitted: 80, Rejected: 20, Precision: ptr(1),
				Messages: 0, Bytes: 0, StateBytesPeak: 512, DecisionLatencyP50Ms: 0, DecisionLatencyP99Ms: 0},
			{Strategy: "local", Requests: 100, Admitted: 95, Rejected: 5, Precision: ptr(0.25),
				ExcessAdmittedPct: 18.75, ExcessAdmitted: 15, FalseRejections: 0, EnvelopeViolationTokens: 12.5,
				Messages: 0, Bytes: 0, StateBytesPeak: 1536, DecisionLatencyP50Ms: 0.1, DecisionLatencyP99Ms: 0.2},
			{Strategy: "static", Requests: 100, Admitted: 70, Rejected: 30, Precision: nil,
				FalseRejections: 10, Messages: 12345, Bytes: 4_500_000, MessagesLost: 3, StateBytesPeak: 12_300,
				DecisionLatencyP50Ms: 2.5, DecisionLatencyP99Ms: 9.875, CrashedNodes: []string{"n2"}},
		},
		Series: &Series{
			Bin:      time.Second,
			Requests: []int{30, 20, 25, 15, 10},
			Admitted: map[string][]int{
				"central": {20, 15, 20, 15, 10}, "local": {28, 19, 23, 15, 10}, "static": {18, 12, 17, 13, 10},
			},
			Rejected: map[string][]int{
				"central": {10, 5, 5, 0, 0}, "local": {2, 1, 2, 0, 0}, "static": {12, 8, 8, 2, 0},
			},
		},
	}
}

// table is rep as WriteTableWidth writes it whole (--wide): one line per
// strategy.
func table(t *testing.T, rep *Report) string {
	t.Helper()
	var b bytes.Buffer
	if err := WriteTableWidth(&b, rep, 0); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// jsonText is rep as WriteJSON writes it.
func jsonText(t *testing.T, rep *Report) string {
	t.Helper()
	var b bytes.Buffer
	if err := WriteJSON(&b, rep); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// smallRun is the Options of a run of the strategies (registry.ParseList) over
// the generated workload spec, on 3 nodes of a 1 ms fixed-latency
// network without loss, r = 1/s, b = 2, seed 1.
func smallRun(t *testing.T, spec, strategies, assign string) Options {
	t.Helper()
	g, err := workload.ParseGenerator(spec)
	if err != nil {
		t.Fatal(err)
	}
	strats, err := registry.ParseList(strategies)
	if err != nil {
		t.Fatal(err)
	}
	return Options{Trace: g.Generate(1), Strategies: strats, Nodes: 3, Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 2,
		Network:      sim.Network{Latency: sim.Latency{Kind: "fixed", Mean: time.Millisecond, Min: time.Millisecond, Max: time.Millisecond}},
		AssignPolicy: assign, Seed: 1}
}

func TestWriteTable(t *testing.T) {
	rep := testReport()
	out := table(t, rep)
	t.Log("\n" + out)
	lines := strings.Split(out, "\n")
	for _, want := range []string{"sample.csv", "requests 100", "keys 3", "span 4.5 s",
		"nodes 3", "rate 10 tokens/s", "burst 20", "assign round-robin", "latency 2ms", "loss 1%",
		"scenario partition", "seed 7"} {
		if !strings.Contains(lines[0]+lines[1], want) {
			t.Errorf("header lacks %q:\n%s\n%s", want, lines[0], lines[1])
		}
	}
	row := func(name string) string {
		for _, l := range lines {
			if f := strings.Fields(l); len(f) > 0 && f[0] == name {
				return l
			}
		}
		t.Fatalf("no row for %s in\n%s", name, out)
		return ""
	}
	for _, c := range []struct {
		name string
		want []string
	}{
		{"central", []string{"80", "20", "1.000", "0.00", "0 B", "512 B"}},
		{"local", []string{"95", "0.250", "18.75", "12.50", "1.5 kB", "0.100", "0.200"}},
		{"static", []string{"n/a", "10", "12345", "4.5 MB", "12.3 kB", "2.500", "9.875"}},
	} {
		cells := " " + row(c.name) + " " // cells are separated by spaces; "0 B" is one
		for _, w := range c.want {
			if !strings.Contains(cells, " "+w+" ") {
				t.Errorf("row %s lacks cell %q: %s", c.name, w, row(c.name))
			}
		}
	}
	if strings.Count(out, "n/a") < 2 { // the cell and the legend
		t.Errorf("no n/a for nil precision")
	}
	if strings.Contains(out, "undecided") {
		t.Errorf("undecided column shown though every result decided everything")
	}
	for _, w := range []string{"§5.1.1", "b + r*T", "% of central's admitted"} {
		if !strings.Contains(out, w) {
			t.Errorf("legend lacks %q", w)
		}
	}
	// Right-aligned columns: the header and every row end at the same column.
	hdr := row("strategy")
	for _, name := range []string{"central", "local", "static"} {
		if r := row(name); len(r) != len(hdr) {
			t.Errorf("row %q has width %d, header %d:\n%s\n%s", name, len(r), len(hdr), hdr, r)
		}
	}
	if !strings.HasSuffix(hdr, "B/req") || !strings.HasSuffix(row("static"), "9.875     0.00    0.0") {
		t.Errorf("last column not right-aligned:\n%s\n%s", hdr, row("static"))
	}
	if again := table(t, testReport()); again != out {
		t.Errorf("output not deterministic")
	}
}

func TestWriteTableUndecided(t *testing.T) {
	rep := testReport()
	rep.Results[2].Undecided = 4
	out := table(t, rep)
	var hdr, static string
	for _, l := range strings.Split(out, "\n") {
		switch f := strings.Fields(l); {
		case len(f) > 0 && f[0] == "strategy":
			hdr = l
		case len(f) > 0 && f[0] == "static":
			static = l
		}
	}
	if !strings.HasSuffix(hdr, "undecided") || !strings.HasSuffix(static, " 4") {
		t.Errorf("no undecided column:\n%s", out)
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 999: "999 B", 1000: "1.0 kB", 12_345: "12.3 kB", 999_949: "999.9 kB",
		999_950: "1.0 MB", 4_500_000: "4.5 MB", 2_000_000_000: "2.0 GB", -1500: "-1.5 kB",
	} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestWriteJSON(t *testing.T) {
	rep := testReport()
	var b bytes.Buffer
	if err := WriteJSON(&b, rep); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.HasSuffix(out, "}\n") || !strings.Contains(out, "\n  \"input\": {") {
		t.Errorf("not indented by two spaces with a trailing newline:\n%s", out)
	}
	var raw struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(b.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	if len(raw.Results) != 3 {
		t.Fatalf("%d results, want 3", len(raw.Results))
	}
	for _, r := range raw.Results {
		for _, k := range []string{"strategy", "requests", "admitted", "rejected", "precision",
			"excess_admitted_pct", "false_rejections", "envelope_violation_tokens", "messages", "bytes",
			"state_bytes_peak", "decision_latency_p50_ms", "decision_latency_p99_ms"} {
			if _, ok := r[k]; !ok {
				t.Errorf("result %v lacks %q", r["strategy"], k)
			}
		}
	}
	if p, ok := raw.Results[2]["precision"]; !ok || p != nil {
		t.Errorf("nil precision encoded as %v, want null", p)
	}
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	want := *rep
	want.Series = nil
	if !reflect.DeepEqual(back, want) {
		t.Errorf("round trip:\n got %+v\nwant %+v", back, want)
	}
}

func TestWriteMarkdown(t *testing.T) {
	var b bytes.Buffer
	plots := []string{"decisions.png", "admitted.png", "summary.png", "extra plot.png"}
	if err := WriteMarkdown(&b, testReport(), plots); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, w := range []string{"# tokenmesh evaluation: sample.csv", "| nodes | 3 |", "| scenario | partition |",
		"| strategy | admitted | rejected | precision |", "|:--|--:|",
		"| static | 70 | 30 | n/a | 0.00 | 10 |", "§5.1.1",
		"](decisions.png)", "](admitted.png)", "](summary.png)", "](<extra plot.png>)"} {
		if !strings.Contains(md, w) {
			t.Errorf("markdown lacks %q:\n%s", w, md)
		}
	}
}

var pngMagic = []byte("\x89PNG\r\n\x1a\n")

func TestWriteAll(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out", "run1") // WriteAll creates it
	if err := WriteAll(dir, testReport()); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"report.json", "report.md", "decisions.png", "admitted.png", "summary.png", "report.html"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if len(b) == 0 {
			t.Errorf("%s is empty", name)
		}
		if !strings.HasSuffix(name, ".png") {
			continue
		}
		if !bytes.HasPrefix(b, pngMagic) {
			t.Errorf("%s does not start with the PNG signature", name)
			continue
		}
		cfg, err := png.DecodeConfig(bytes.NewReader(b))
		if err != nil {
			t.Errorf("%s: %v", name, err)
		} else if want := 480; name == "summary.png" && (cfg.Width != 960 || cfg.Height != want) { // 10x5 in at 96 dpi
			t.Errorf("%s is %dx%d, want 960x%d", name, cfg.Width, cfg.Height, want)
		} else if want := 259; name != "summary.png" && (cfg.Width != 960 || cfg.Height != want) {
			// one row of two panels (local, static): 2.2 in + 0.5 in of title at 96 dpi
			t.Errorf("%s is %dx%d, want 960x%d", name, cfg.Width, cfg.Height, want)
		}
	}
	// Equal reports give equal files, PNGs included.
	again := t.TempDir()
	if err := WriteAll(again, testReport()); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"report.json", "report.md", "decisions.png", "admitted.png", "summary.png", "report.html"} {
		a, _ := os.ReadFile(filepath.Join(dir, name))
		b, _ := os.ReadFile(filepath.Join(again, name))
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between two runs", name)
		}
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"decisions.png", "admitted.png", "summary.png"} {
		if !bytes.Contains(md, []byte("]("+name+")")) {
			t.Errorf("report.md does not link %s", name)
		}
	}
	if os.Getenv("TOKENMESH_KEEP_PLOTS") != "" { // to look at them
		if err := WriteAll(os.Getenv("TOKENMESH_KEEP_PLOTS"), testReport()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWriteAllErrorNamesFile(t *testing.T) {
	dir := t.TempDir()
	// A directory where report.json should go makes writing it fail.
	if err := os.Mkdir(filepath.Join(dir, "report.json"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := WriteAll(dir, testReport())
	if err == nil || !strings.Contains(err.Error(), "report.json") {
		t.Errorf("err = %v, want one naming report.json", err)
	}
}

// Degenerate reports must still render: nothing run, one strategy, an
// empty or one-bin series, a series missing a strategy.
func TestDegenerateReports(t *testing.T) {
	one := testReport()
	one.Results = one.Results[:1]
	oneBin := testReport()
	oneBin.Series = &Series{Bin: time.Second, Requests: []int{5},
		Admitted: map[string][]int{"central": {5}}, Rejected: map[string][]int{"central": {0}}}
	zero := &Report{Input: Input{}, Results: []Result{{Strategy: "central", Precision: ptr(1)}},
		Series: &Series{Bin: time.Second, Requests: []int{0}, Admitted: map[string][]int{}, Rejected: map[string][]int{}}}
	for name, rep := range map[string]*Report{
		"empty":     {},
		"one":       one,
		"one-bin":   oneBin,
		"zero":      zero,
		"no-series": {Results: testReport().Results},
		"no-bins":   {Results: testReport().Results, Series: &Series{}},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := WriteAll(dir, rep); err != nil {
				t.Fatal(err)
			}
			names, err := WritePlots(dir, rep)
			if err != nil {
				t.Fatal(err)
			}
			if want := []string{"decisions.png", "admitted.png", "summary.png"}; !reflect.DeepEqual(names, want) {
				t.Errorf("WritePlots = %v, want %v", names, want)
			}
			table(t, rep)
		})
	}
	if err := WriteTable(&bytes.Buffer{}, nil); err == nil {
		t.Errorf("WriteTable(nil) did not fail")
	}
}

// Without Options.ShortfallWindow a run's JSON and table have no shortfall
// (the bytes of earlier versions); with it, every row has one, central's 0.
func TestShortfallOptIn(t *testing.T) {
	opts := smallRun(t, "poisson:users=5,rate=3,duration=20s", "central,static", "roundrobin")
	rep, err := Run(opts)
	if err != nil {
		t.Fatal(err)
	}
	if js, tab := jsonText(t, rep), table(t, rep); strings.Contains(js, "shortfall") || strings.Contains(tab, "shortfall") {
		t.Fatalf("shortfall reported without a window:\n%s\n%s", js, tab)
	}
	opts.ShortfallWindow = time.Second
	rep, err = Run(opts)
	if err != nil {
		t.Fatal(err)
	}
	c, s := rep.Results[0], rep.Results[1]
	if c.ShortfallTokens == nil || *c.ShortfallTokens != 0 || s.ShortfallTokens == nil || *s.ShortfallTokens <= 0 {
		t.Fatalf("shortfall central %v static %v; want 0 and > 0 (static splits a burst of 2 over 3 nodes)", c.ShortfallTokens, s.ShortfallTokens)
	}
	if *s.ShortfallTokens > int64(s.FalseRejections) {
		t.Fatalf("static's shortfall %d above its %d false rejections (1-token requests)", *s.ShortfallTokens, s.FalseRejections)
	}
	js, tab := jsonText(t, rep), table(t, rep)
	for _, want := range []string{`"shortfall_tokens"`, `"shortfall_pct"`, `"shortfall_after_birth_pct"`, `"shortfall_window_s": 1`} {
		if !strings.Contains(js, want) {
			t.Errorf("JSON lacks %s", want)
		}
	}
	if !strings.Contains(tab, "shortfall %") || !strings.Contains(tab, "after birth %") || !strings.Contains(tab, "shortfall window 1 s") {
		t.Errorf("table lacks the shortfall column or window:\n%s", tab)
	}
}

// WriteTable fits every line in DefaultWidth columns: the results table
// is cut between its accuracy and cost columns, each part repeating the
// strategy column, and the text is wrapped; nothing is lost.
func TestWriteTableFitsWidth(t *testing.T) {
	rep := testReport()
	rep.Results[2].Undecided = 4
	rep.Setup.Scenario = strings.Repeat("a long scenario description ", 8)
	rep.Recommendation = &Recommendation{Line: "recommendation: owner (default parameters) meets " + strings.Repeat("every bound ", 12),
		Next: []Step{{Why: "check it on real processes", Command: "tokenmesh replay --trace ../shared/data/traces/zanbil-2019-http.csv.gz --nodes 10 --rate 1 --burst 10 --strategy owner --speed 10"}}}
	var b bytes.Buffer
	if err := WriteTable(&b, rep); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Log("\n" + out)
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if len(l) > DefaultWidth {
			t.Errorf("line %d has %d columns (> %d): %s", i+1, len(l), DefaultWidth, l)
		}
	}
	var headers []string
	for _, l := range lines {
		if strings.HasPrefix(l, "  strategy ") {
			headers = append(headers, l)
		}
	}
	if len(headers) != 2 || !strings.Contains(headers[0], "envelope viol.") || !strings.Contains(headers[0], "undecided") ||
		!strings.Contains(headers[1], "msgs") || !strings.HasSuffix(headers[1], "B/req") {
		t.Errorf("want two tables, accuracy (with undecided) then cost, got headers %q", headers)
	}
	// The wrapped command pastes as one: every line but the last ends in " \".
	var cmd []string
	for i, l := range lines {
		if strings.HasPrefix(l, "next: ") {
			for _, c := range lines[i+1:] {
				cmd = append(cmd, c)
				if !strings.HasSuffix(c, " \\") {
					break
				}
			}
		}
	}
	joined := strings.Join(cmd, "\n")
	joined = strings.Join(strings.Fields(strings.ReplaceAll(joined, " \\\n", " ")), " ")
	if len(cmd) < 2 || joined != rep.Recommendation.Next[0].Command {
		t.Errorf("wrapped command %q does not rejoin to %q", cmd, rep.Recommendation.Next[0].Command)
	}
	if !strings.HasSuffix(strings.TrimSpace(out), "--speed 10") {
		t.Errorf("the report does not end with the next command:\n%s", out)
	}
	wide := table(t, rep)
	if strings.Count(wide, "\n  strategy ") != 1 {
		t.Errorf("width 0 cut the table:\n%s", wide)
	}
}

// A metric a result did not measure (Result.NotMeasured) prints n/a, and
// the legend says why; a live report's latencies are "measured".
func TestWriteTableNotMeasuredAndLive(t *testing.T) {
	rep := testReport()
	rep.Setup.Latency = LiveLatency
	rep.Results[1].NotMeasured = []string{"local_decision_pct", "bytes_per_request"}
	out := table(t, rep)
	var local string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "  local ") && local == "" {
			local = l
		}
	}
	if !strings.HasSuffix(local, "n/a    n/a") {
		t.Errorf("local's row does not end in n/a n/a: %q", local)
	}
	for _, want := range []string{"n/a             not measured: local %, B/req of local (a replay computes",
		"decision latency percentiles, measured"} {
		if !strings.Contains(out, want) {
			t.Errorf("legend lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "simulated milliseconds") {
		t.Errorf("a live report calls its latency simulated:\n%s", out)
	}
}

func TestWrap(t *testing.T) {
	for _, c := range []struct {
		text  string
		width int
		want  []string
	}{
		{"short", 10, []string{"short"}},
		{"aaa bbb ccc ddd", 7, []string{"aaa bbb", "  ccc", "  ddd"}},
		{"  term    the text goes on", 14, []string{"  term    the", "  text goes on"}},
		{"averyveryverylongword tail", 5, []string{"averyveryverylongword", "  tail"}},
		{"aaa bbb", 0, []string{"aaa bbb"}},
	} {
		if got := Wrap(c.text, c.width, "  "); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Wrap(%q, %d) = %q, want %q", c.text, c.width, got, c.want)
		}
	}
}

// With a shortfall window WritePlots adds shortfall.png: one panel per
// strategy that has a shortfall series (central has none), linked from
// report.md; each panel's title gives its total and its first window's
// part.
func TestShortfallPlot(t *testing.T) {
	rep := testReport()
	rep.Series.ShortfallWindow = time.Second
	rep.Series.Shortfall = map[string][]int64{"local": {6, 1, 0, 3}, "static": {0, 0, 0, 0}}
	dir := t.TempDir()
	if err := WriteAll(dir, rep); err != nil {
		t.Fatal(err)
	}
	names, err := WritePlots(t.TempDir(), rep)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"decisions.png", "admitted.png", "summary.png", "shortfall.png"}; !reflect.DeepEqual(names, want) {
		t.Errorf("WritePlots = %v, want %v", names, want)
	}
	b, err := os.ReadFile(filepath.Join(dir, "shortfall.png"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Width != 960 || cfg.Height != 259 { // one row of two panels, as decisions.png
		t.Errorf("shortfall.png is %dx%d, want 960x259", cfg.Width, cfg.Height)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(md, []byte("](shortfall.png)")) {
		t.Errorf("report.md does not link shortfall.png")
	}
	g, err := shortfallPlot(rep)
	if err != nil {
		t.Fatal(err)
	}
	var titles []string
	for _, p := range g.panels {
		titles = append(titles, p.Title.Text)
	}
	if want := []string{"local: 10 tokens, first window 60%", "static: no shortfall"}; !reflect.DeepEqual(titles, want) {
		t.Errorf("panel titles %q, want %q", titles, want)
	}
	// With the result's after birth % (a run with a shortfall window) the
	// title gives it too.
	for i := range rep.Results {
		if rep.Results[i].Strategy == "local" {
			v := 1.25
			rep.Results[i].ShortfallAfterBirthPct = &v
		}
	}
	if g, err = shortfallPlot(rep); err != nil {
		t.Fatal(err)
	}
	if got, want := g.panels[0].Title.Text, "local: 10 tokens, first window 60%, after birth 1.25%"; got != want {
		t.Errorf("panel title %q, want %q", got, want)
	}
}

// One panel takes the figure's whole width, in shortfall.png and in
// report.html's panels alike; two or more are laid out two per row.
func TestPanelLayoutOnePanelWide(t *testing.T) {
	for n, want := range map[int][2]int{1: {1, 1}, 2: {2, 1}, 3: {2, 2}} {
		g := &grid{panels: make([]*plot.Plot, n)}
		if c, r := g.cols(), g.rows(); c != want[0] || r != want[1] {
			t.Errorf("%d panels: %d columns x %d rows, want %d x %d", n, c, r, want[0], want[1])
		}
	}
	// report.html: one panel's grid lines reach the figure's right margin.
	rep := testReport()
	one := panelGrid(rep, newTimeBase(rep), "x", "x", "tokens", 1, []stratPanel{{name: "local", vals: []float64{1, 2}}})
	right := 0.0
	for _, e := range one.Els {
		if e.Tag == "line" {
			right = max(right, e.X, e.X2)
		}
	}
	if right < 0.9*float64(svgWidth) {
		t.Errorf("one panel's lines end at x %.1f, want near the figure's width %d", right, svgWidth)
	}
}

// A count axis is marked at whole numbers, labelled as integers: over a
// few units gonum's default put "2.50 tokens" on shortfall.png, and wider
// spans keep gonum's ticks, relabelled ("75", not "75.00").
func TestCountTicks(t *testing.T) {
	labels := func(lo, hi float64) []string {
		var out []string
		for _, tk := range (countTicks{}).Ticks(lo, hi) {
			if tk.Label != "" {
				out = append(out, tk.Label)
			}
		}
		return out
	}
	for _, c := range []struct {
		lo, hi float64
		want   []string
	}{
		{0, 5, []string{"0", "1", "2", "3", "4", "5"}},
		{0, 3.2, []string{"0", "1", "2", "3"}},
		{0, 0.9, []string{"0"}},
		{0, 11, []string{"0", "5", "10"}}, // gonum's, whole already
	} {
		if got := labels(c.lo, c.hi); !slices.Equal(got, c.want) {
			t.Errorf("countTicks(%v, %v) labels %q, want %q", c.lo, c.hi, got, c.want)
		}
	}
	if got, want := labels(0, 76), []string{"0", "25", "50", "75"}; !slices.Equal(got, want) { // gonum's "25.00", relabelled
		t.Errorf("countTicks(0, 76) labels %q, want %q", got, want)
	}
	for _, tk := range (countTicks{}).Ticks(0, 2000) {
		if tk.Label != "" && (tk.Value != math.Trunc(tk.Value) || strings.Contains(tk.Label, ".")) {
			t.Errorf("countTicks(0, 2000): label %q at %v", tk.Label, tk.Value)
		}
	}
}
