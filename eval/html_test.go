package eval

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy/registry"
)

// reproduceCmd is the command the test reports carry; its quote and < test
// the escaping.
const reproduceCmd = "tokenmesh sim --workload mix:duration=20s --strategies all --scenario 'faults <1>.yaml' --out report"

// htmlFaults is a scenario with every kind of fault event.
const htmlFaults = "detection: 1s\nreconnect_interval: 2s\nevents:\n" +
	"  - at: 3s\n    crash: [n1]\n  - at: 6s\n    restart: [n1]\n" +
	"  - at: 10s\n    partition: [[n0], [n1, n2]]\n  - at: 14s\n    heal: true\n"

// htmlReport runs every registered strategy on a small synthetic workload with
// htmlFaults, and recommends, as tokenmesh sim does.
func htmlReport(t *testing.T) *Report {
	t.Helper()
	sc, err := sim.ParseScenario([]byte(htmlFaults))
	if err != nil {
		t.Fatal(err)
	}
	opts := smallRun(t, "mix:duration=20s", strings.Join(registry.Names(), ","), "roundrobin")
	opts.Scenario, opts.ScenarioName = sc, "faults <1>.yaml"
	rep, err := RunParallel(opts, 2)
	if err != nil {
		t.Fatal(err)
	}
	rep.Recommendation = Recommend(rep, Bounds{MaxExcessPct: 0.5, MaxFalseRejectionsPct: 0.5, MaxEnvelopeTokens: 1}, opts.Params)
	rep.Recommendation.Next = []Step{{Why: "serve it", Command: "tokenmesh serve --config n1.yaml"}}
	rep.Reproduce = []Step{{Why: "from here", Command: reproduceCmd}}
	return rep
}

func writeHTML(t *testing.T, rep *Report) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteHTML(&b, rep); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// attr is n's attribute key, "" if absent.
func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

// elements returns the element nodes under n (n included) that keep says
// to.
func elements(n *html.Node, keep func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && keep(n) {
			out = append(out, n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return out
}

func tag(name string) func(*html.Node) bool {
	return func(n *html.Node) bool { return n.Data == name }
}

// text is the text under n, its <title> children (tooltips) left out.
func text(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		switch {
		case n.Type == html.TextNode:
			b.WriteString(n.Data)
		case n.Type == html.ElementNode && n.Data == "title" && n.Parent != nil && n.Parent.Data != "head":
			return
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return b.String()
}

// report.html parses as HTML and holds, self-contained, what its brief
// asks: one <svg> per plot, one colour per strategy (the same in
// every plot and table, and no two alike), the fault events labelled in
// every time plot, a row per strategy in the accuracy and the cost
// table, the notes, the recommendation and the command that reproduces
// it; the same report gives the same bytes.
func TestWriteHTML(t *testing.T) {
	rep := htmlReport(t)
	page := writeHTML(t, rep)
	if dir := os.Getenv("TOKENMESH_KEEP_HTML"); dir != "" { // to open it in a browser
		if err := os.WriteFile(filepath.Join(dir, "report.html"), page, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	doc, err := html.Parse(bytes.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}

	// One <svg> per plot, each in its figure.
	svgs := elements(doc, tag("svg"))
	var plots []string
	for _, s := range svgs {
		plots = append(plots, attr(s, "data-plot"))
		if s.Parent == nil || s.Parent.Data != "figure" {
			t.Errorf("svg %s is not in a figure", attr(s, "data-plot"))
		}
	}
	if want := []string{"admitted", "difference", "summary"}; !slices.Equal(plots, want) {
		t.Errorf("plots %v, want %v", plots, want)
	}
	if n := len(elements(doc, tag("figure"))); n != len(svgs) {
		t.Errorf("%d figures, %d svgs: want one svg per plot", n, len(svgs))
	}

	// One colour per strategy, everywhere; no two strategies alike.
	colours := map[string]map[string]bool{}
	for _, n := range elements(doc, func(n *html.Node) bool { return attr(n, "data-strategy") != "" }) {
		c := attr(n, "stroke")
		if c == "" {
			c = attr(n, "fill")
		}
		if n.Data == "tr" {
			sw := elements(n, func(n *html.Node) bool { return attr(n, "class") == "swatch" })
			if len(sw) != 1 {
				t.Fatalf("table row %s has %d swatches", attr(n, "data-strategy"), len(sw))
			}
			c = strings.TrimPrefix(attr(sw[0], "style"), "background:")
		}
		s := attr(n, "data-strategy")
		if colours[s] == nil {
			colours[s] = map[string]bool{}
		}
		colours[s][strings.ToUpper(c)] = true
	}
	owner := map[string]string{}
	for _, r := range rep.Results {
		cs := colours[r.Strategy]
		if len(cs) != 1 {
			t.Errorf("%s is drawn in %d colours %v, want 1", r.Strategy, len(cs), cs)
			continue
		}
		for c := range cs {
			if other, ok := owner[c]; ok {
				t.Errorf("%s and %s share the colour %s", other, r.Strategy, c)
			}
			owner[c] = r.Strategy
		}
	}
	if len(rep.Results) < 11 {
		t.Errorf("only %d strategies ran; want every registered one", len(rep.Results))
	}

	// Every fault event labelled in each time plot, its window shaded.
	for _, s := range svgs[:2] {
		var labels []string
		for _, n := range elements(s, func(n *html.Node) bool { return attr(n, "data-role") == "fault-label" }) {
			labels = append(labels, text(n))
		}
		for _, want := range []string{"crash n1", "restart n1", "partition n0|n1,n2", "heal"} {
			if !slices.Contains(labels, want) {
				t.Errorf("plot %s: no fault label %q (labels %q)", attr(s, "data-plot"), want, labels)
			}
		}
		if n := len(elements(s, func(n *html.Node) bool { return attr(n, "data-role") == "fault-window" })); n < 2 {
			t.Errorf("plot %s: %d shaded fault windows, want at least 2", attr(s, "data-plot"), n)
		}
	}

	// Axis labels name their unit.
	for _, s := range svgs {
		for _, n := range elements(s, func(n *html.Node) bool { return attr(n, "data-role") == "axis-label" }) {
			if l := text(n); !strings.Contains(l, "tokens per") && !strings.Contains(l, "%") && !strings.Contains(l, "(m:ss)") {
				t.Errorf("plot %s: axis label %q names no unit", attr(s, "data-plot"), l)
			}
		}
	}

	// The accuracy and the cost table, then the convergence times, a row
	// per strategy in each (and gdrl's JFI, when it ran).
	tables := elements(doc, func(n *html.Node) bool { return n.Data == "table" && attr(n, "class") == "results" })
	wantTables := 3
	if slices.ContainsFunc(rep.Results, func(r Result) bool { return r.Strategy == "gdrl" }) {
		wantTables = 4
	}
	if len(tables) != wantTables {
		t.Fatalf("%d results tables, want %d (accuracy, cost, convergence, gdrl's JFI)", len(tables), wantTables)
	}
	for i, want := range []string{"excess %", "bytes", "demand ch."} {
		var head []string
		for _, th := range elements(tables[i], tag("th")) {
			head = append(head, text(th))
		}
		if !slices.Contains(head, want) {
			t.Errorf("table %d header %q lacks %q", i, head, want)
		}
		var rows []string
		for _, tr := range elements(tables[i], tag("tr")) {
			if td := elements(tr, tag("td")); len(td) == len(head) {
				rows = append(rows, text(td[0]))
			}
		}
		for _, r := range rep.Results {
			if !slices.Contains(rows, r.Strategy) {
				t.Errorf("table %d has no row for %s (rows %q)", i, r.Strategy, rows)
			}
		}
	}

	// The reproduce command, the recommendation and the notes, as text.
	var code []string
	for _, n := range elements(doc, tag("code")) {
		code = append(code, text(n))
	}
	for _, want := range []string{reproduceCmd, "tokenmesh serve --config n1.yaml"} {
		if !slices.Contains(code, want) {
			t.Errorf("no <code> holds %q (have %q)", want, code)
		}
	}
	body := text(doc)
	for _, want := range append([]string{rep.Recommendation.Line}, reportNotes(rep)...) {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}

	// Self-contained: nothing loaded from anywhere.
	for _, n := range elements(doc, func(*html.Node) bool { return true }) {
		switch n.Data {
		case "script", "link", "img", "iframe", "object", "embed", "image", "use", "base":
			t.Errorf("the page has a <%s>", n.Data)
		}
		for _, a := range n.Attr {
			if a.Key == "src" || a.Key == "href" || strings.HasSuffix(a.Key, ":href") || strings.Contains(a.Val, "url(") {
				t.Errorf("<%s %s=%q> refers to something outside the page", n.Data, a.Key, a.Val)
			}
		}
	}
	for _, st := range elements(doc, tag("style")) {
		if css := text(st); strings.Contains(css, "url(") || strings.Contains(css, "@import") {
			t.Errorf("the style sheet loads something: %s", css)
		}
	}

	// Deterministic: another run of the same evaluation, the same bytes.
	if again := writeHTML(t, htmlReport(t)); !bytes.Equal(page, again) {
		t.Error("two runs of the same evaluation gave different report.html")
	}
}

// Every registered strategy has a colour of its own.
func TestStrategyColorsDistinct(t *testing.T) {
	seen := map[string]string{}
	for _, name := range registry.Names() {
		c := strategyColor(name)
		if other, ok := seen[c]; ok {
			t.Errorf("%s and %s share %s", other, name, c)
		}
		seen[c] = name
	}
}

// With a shortfall window report.html adds a fourth plot: one panel per
// strategy besides central, its shortfall per window, the run's total and
// the first window's part beside its title, the y axis in tokens per
// window; without one, the page keeps its three plots (TestWriteHTML).
func TestWriteHTMLShortfall(t *testing.T) {
	opts := smallRun(t, "mix:duration=10s", "static,local,owner", "roundrobin")
	opts.ShortfallWindow = time.Second
	rep, err := Run(opts)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := html.Parse(bytes.NewReader(writeHTML(t, rep)))
	if err != nil {
		t.Fatal(err)
	}
	var plots []string
	var short *html.Node
	for _, s := range elements(doc, tag("svg")) {
		plots = append(plots, attr(s, "data-plot"))
		if attr(s, "data-plot") == "shortfall" {
			short = s
		}
	}
	if want := []string{"admitted", "difference", "summary", "shortfall"}; !slices.Equal(plots, want) {
		t.Fatalf("plots %v, want %v", plots, want)
	}
	var titles []string
	for _, n := range elements(short, func(n *html.Node) bool { return attr(n, "data-role") == "panel-title" }) {
		titles = append(titles, text(n))
	}
	if want := []string{"static", "local", "owner"}; !slices.Equal(titles, want) {
		t.Errorf("shortfall panels %v, want %v", titles, want)
	}
	var sums int
	for _, n := range elements(short, tag("text")) {
		if l := text(n); strings.Contains(l, "tokens, first window") || l == "no shortfall" {
			sums++
		}
	}
	if sums != 3 {
		t.Errorf("%d panels say their total, want 3", sums)
	}
	for _, n := range elements(short, func(n *html.Node) bool { return attr(n, "data-role") == "axis-label" }) {
		if l := text(n); !strings.Contains(l, "(m:ss)") && !strings.Contains(l, "tokens per 1 s window") {
			t.Errorf("shortfall axis label %q", l)
		}
	}
}
