package eval

import (
	"bufio"
	"html/template"
	"io"
	"slices"
)

// This file renders a Report as report.html (ours): one
// self-contained page, no script, no external asset, that a browser opens
// from file://. It holds what report.md holds (the setup, the results
// table as the terminal cuts it, into accuracy and cost, the metric
// legend, the notes, the recommendation and the commands to run next),
// the commands that reproduce the report, and htmlplot.go's plots as
// inline SVG. html/template escapes every string of the report.

// htmlTable is a table of report.html: one row per strategy.
type htmlTable struct {
	Title  string
	Header []string
	Rows   []htmlRow
}

// htmlRow is a table row: the strategy, its colour and the other cells.
type htmlRow struct {
	Strategy, Color string
	Cells           []string
}

// htmlDef is one entry of a legend.
type htmlDef struct{ Term, Text string }

// htmlPage is everything report.html shows, in display order.
type htmlPage struct {
	Title, Lead    string
	Recommendation *Recommendation
	Facts          [][2]string
	Reproduce      []Step
	Tables         []htmlTable
	Defs           []htmlDef
	Wait           *htmlTable
	WaitLegend     string
	Conv           *htmlTable // convergence times (convergenceTable)
	ConvLegend     string
	JFI            *htmlTable // gdrl's JFI (jfiTable)
	Plots          []htmlPlot
	Notes          []string
}

// resultGroupTitles name the results table's column groups (column.group).
var resultGroupTitles = map[int]string{1: "Accuracy against central", 2: "Cost"}

// newHTMLPage collects what report.html shows of rep.
func newHTMLPage(rep *Report) htmlPage {
	p := htmlPage{
		Title: "tokenmesh evaluation: " + inputName(rep.Input),
		Lead: "Every strategy ran on the same requests, in the same order, through a simulated cluster, " +
			"and is compared with central: one exact token bucket per key for the whole cluster.",
		Recommendation: rep.Recommendation,
		Facts:          append(inputFacts(rep.Input), setupFacts(rep.Setup)...),
		Reproduce:      rep.Reproduce,
		Notes:          reportNotes(rep),
		Plots:          htmlPlots(rep),
	}
	if rep.Setup.Latency == LiveLatency {
		p.Lead = "Every strategy ran on a local cluster of tokenmesh serve processes, sent the same requests at their times, " +
			"and is compared with central: one exact token bucket per key, computed from the trace."
	}
	header, rows, groups, undecided, shortfall := resultTable(rep)
	var order []int
	for _, g := range groups[1:] {
		if !slices.Contains(order, g) {
			order = append(order, g)
		}
	}
	for _, g := range order {
		t := htmlTable{Title: resultGroupTitles[g], Header: []string{header[0]}}
		var cols []int
		for i := 1; i < len(header); i++ {
			if groups[i] == g {
				cols = append(cols, i)
				t.Header = append(t.Header, header[i])
			}
		}
		for _, row := range rows {
			r := htmlRow{Strategy: row[0], Color: strategyColor(row[0])}
			for _, c := range cols {
				r.Cells = append(r.Cells, row[c])
			}
			t.Rows = append(t.Rows, r)
		}
		p.Tables = append(p.Tables, t)
	}
	for _, d := range metricDefs(rep, undecided, shortfall) {
		p.Defs = append(p.Defs, htmlDef{d.term, d.text})
	}
	if wh, wr := waitTable(rep); len(wr) > 0 {
		t := &htmlTable{Title: "Waiting time", Header: wh}
		for _, row := range wr {
			t.Rows = append(t.Rows, htmlRow{Strategy: row[0], Color: strategyColor(row[0]), Cells: row[1:]})
		}
		p.Wait, p.WaitLegend = t, waitLegend
	}
	if ch, cr := convergenceTable(rep); len(cr) > 0 {
		t := &htmlTable{Title: "Convergence time", Header: ch}
		for _, row := range cr {
			t.Rows = append(t.Rows, htmlRow{Strategy: row[0], Color: strategyColor(row[0]), Cells: row[1:]})
		}
		p.Conv, p.ConvLegend = t, convergenceLegend(rep)
	}
	if jh, jr := jfiTable(rep); len(jr) > 0 {
		t := &htmlTable{Title: "Fairness of the performance indicators (JFI)", Header: jh}
		for _, row := range jr {
			t.Rows = append(t.Rows, htmlRow{Strategy: row[0], Color: strategyColor(row[0]), Cells: row[1:]})
		}
		p.JFI = t
	}
	return p
}

// WriteHTML writes rep as report.html: a self-contained page (no script,
// no external asset) with the input and setup, the recommendation and
// the commands to run next, the commands that reproduce the report
// (Report.Reproduce), the results as two tables (accuracy and cost) with
// the metric legend, the waiting time table in waiting mode, the notes,
// and three inline SVG plots: admitted tokens per time bin by strategy,
// each strategy minus central per bin, and excess admitted and false
// rejections by strategy. Each strategy has one colour throughout; the
// scenario's fault windows are shaded and every fault event is labelled.
// Equal reports give equal bytes.
func WriteHTML(w io.Writer, rep *Report) error {
	if rep == nil {
		return errNilReport
	}
	bw := bufio.NewWriter(w)
	if err := htmlTemplate.Execute(bw, newHTMLPage(rep)); err != nil {
		return err
	}
	return bw.Flush()
}

var htmlTemplate = template.Must(template.New("page").Funcs(template.FuncMap{"f": svgNum, "o": svgOpacity}).Parse(pageTemplate))

const pageTemplate = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
body{margin:0;background:#fff;color:#1a1a1a;font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif}
main{max-width:1180px;margin:0 auto;padding:20px 30px 60px}
h1{font-size:26px;margin:10px 0 4px}
h2{font-size:20px;margin:34px 0 10px;padding-bottom:4px;border-bottom:1px solid #ddd}
h3{font-size:16px;margin:20px 0 6px}
p.lead{color:#444;margin:0 0 16px}
table{border-collapse:collapse;margin:6px 0 14px;font-variant-numeric:tabular-nums}
th,td{padding:4px 12px;border-bottom:1px solid #e4e4e4;text-align:right;vertical-align:top}
th{background:#f4f4f4;font-weight:600}
th:first-child,td:first-child{text-align:left}
table.facts th{background:none;text-align:left;width:11em}
table.facts td{text-align:left}
.swatch{display:inline-block;width:12px;height:12px;margin-right:7px;border-radius:2px;vertical-align:-1px}
pre{background:#f4f4f4;border:1px solid #e0e0e0;padding:8px 12px;margin:4px 0 12px;white-space:pre-wrap;overflow-wrap:anywhere;font-size:13.5px}
.verdict{background:#eef7f2;border-left:5px solid #009e73;padding:6px 16px;margin:16px 0}
.verdict h2{border:0;margin:8px 0 4px}
dl{margin:8px 0;font-size:14px}
dt{font-weight:600;float:left;clear:left;width:9.5em}
dd{margin:0 0 4px 10em}
figure{margin:12px 0 28px}
figcaption{color:#444;font-size:14px;margin-top:4px}
svg{display:block;width:100%;height:auto}
svg text{font-family:inherit}
ul{padding-left:22px}
li{margin:4px 0}
</style>
</head>
<body>
<main>
<h1>{{.Title}}</h1>
<p class="lead">{{.Lead}}</p>
{{with .Recommendation}}<section class="verdict" id="recommendation">
<h2>Recommendation</h2>
<p>{{.Line}}</p>
{{range .Next}}<p>Next: {{.Why}}</p>
<pre><code>{{.Command}}</code></pre>
{{end}}</section>
{{end}}
<h2 id="setup">Input and setup</h2>
<table class="facts">
{{range .Facts}}<tr><th>{{index . 0}}</th><td>{{index . 1}}</td></tr>
{{end}}</table>
<h2 id="reproduce">Reproduce</h2>
{{range .Reproduce}}<p>{{.Why}}</p>
<pre><code class="reproduce">{{.Command}}</code></pre>
{{else}}<p>Not recorded: the program that wrote this report did not say how it ran.</p>
{{end}}
<h2 id="results">Results</h2>
{{range .Tables}}{{template "table" .}}{{else}}<p>No strategy was run.</p>
{{end}}
<p>Central is the exact, centralized token bucket every other strategy is compared with.</p>
<dl>
{{range .Defs}}<dt>{{.Term}}</dt><dd>{{.Text}}</dd>
{{end}}</dl>
{{with .Wait}}{{template "table" .}}<p>{{$.WaitLegend}}.</p>
{{end}}{{with .Conv}}{{template "table" .}}<p>{{$.ConvLegend}}.</p>
{{end}}{{with .JFI}}{{template "table" .}}<p>` + jfiLegend + `.</p>
{{end}}
<h2 id="plots">Plots</h2>
{{range .Plots}}<figure>
<h3>{{.Title}}</h3>
{{template "svg" .SVG}}
<figcaption>{{.Caption}}</figcaption>
</figure>
{{end}}
<h2 id="notes">Notes</h2>
<ul>
{{range .Notes}}<li>{{.}}</li>
{{end}}</ul>
</main>
</body>
</html>
{{define "table"}}<h3>{{.Title}}</h3>
<table class="results">
<thead><tr>{{range .Header}}<th>{{.}}</th>{{end}}</tr></thead>
<tbody>
{{range .Rows}}<tr data-strategy="{{.Strategy}}"><td><span class="swatch" style="background:{{.Color}}"></span>{{.Strategy}}</td>{{range .Cells}}<td>{{.}}</td>{{end}}</tr>
{{end}}</tbody>
</table>
{{end}}
{{define "svg"}}<svg data-plot="{{.Name}}" viewBox="0 0 {{f .W}} {{f .H}}" role="img" aria-label="{{.Label}}"><title>{{.Label}}</title>
{{range .Els}}{{template "el" .}}{{end}}</svg>{{end}}
{{define "el"}}{{if eq .Tag "rect"}}<rect x="{{f .X}}" y="{{f .Y}}" width="{{f .W}}" height="{{f .H}}"{{template "paint" .}}>{{template "tip" .}}</rect>
{{else if eq .Tag "line"}}<line x1="{{f .X}}" y1="{{f .Y}}" x2="{{f .X2}}" y2="{{f .Y2}}"{{template "paint" .}}>{{template "tip" .}}</line>
{{else if eq .Tag "path"}}<path d="{{.D}}"{{template "paint" .}}>{{template "tip" .}}</path>
{{else if eq .Tag "text"}}<text x="{{f .X}}" y="{{f .Y}}"{{with .Anchor}} text-anchor="{{.}}"{{end}} font-size="{{f .Size}}"{{if .Bold}} font-weight="bold"{{end}}{{if .Rotate}} transform="rotate(-90 {{f .X}} {{f .Y}})"{{end}}{{template "paint" .}}>{{template "tip" .}}{{.Text}}</text>
{{end}}{{end}}
{{define "paint"}}{{with .Fill}} fill="{{.}}"{{end}}{{if .FillOpacity}} fill-opacity="{{o .FillOpacity}}"{{end}}{{with .Stroke}} stroke="{{.}}"{{end}}{{if .StrokeWidth}} stroke-width="{{f .StrokeWidth}}"{{end}}{{with .Dash}} stroke-dasharray="{{.}}"{{end}}{{with .Strategy}} data-strategy="{{.}}"{{end}}{{with .Class}} data-role="{{.}}"{{end}}{{end}}
{{define "tip"}}{{with .Tip}}<title>{{.}}</title>{{end}}{{end}}
`
