package eval

import (
	"fmt"
	"hash/fnv"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/tokenmesh/tokenmesh/strategy/registry"
)

// Plot sizes. The time plots are wide so that ~200 bins stay readable.
const (
	plotWidth  = 10 * vg.Inch
	plotHeight = 5 * vg.Inch
)

var (
	colorTotal   = color.RGBA{R: 150, G: 150, B: 150, A: 255}
	colorCentral = color.Black
	colorGrid    = color.RGBA{R: 225, G: 225, B: 225, A: 255}
	colorExcess  = color.RGBA{R: 0xD5, G: 0x5E, B: 0x00, A: 255} // vermillion: over-admission
	colorFalse   = color.RGBA{R: 0x00, G: 0x72, B: 0xB2, A: 255} // blue: over-rejection
)

// strategyPalette holds the strategies' colours, given in the registry's
// order (registry.Names, central left out: it is black): Okabe & Ito's
// colour-blind safe set without black and yellow (unreadable on white),
// then five of Paul Tol's "muted" scheme (wine, indigo, olive, green,
// teal), which differ from those in lightness. It has a colour for every
// registered strategy (a test checks), so no two share one.
var strategyPalette = []string{
	"#D55E00", // vermillion
	"#0072B2", // blue
	"#009E73", // bluish green
	"#CC79A7", // reddish purple
	"#E69F00", // orange
	"#56B4E9", // sky blue
	"#882255", // wine
	"#332288", // indigo
	"#999933", // olive
	"#117733", // green
	"#44AA99", // teal
	"#CC6677", // rose
	"#DDCC77", // sand
	"#AA4499", // purple (Tol's muted too)
}

// strategyColor is name's colour, "#RRGGBB", the same in every plot (the
// PNGs and report.html) and every report: black for central, the
// reference; a registered strategy's by its place in registry.Names; another
// name's picked by a hash of it.
func strategyColor(name string) string {
	if name == "central" {
		return "#000000"
	}
	i := 0
	for _, n := range registry.Names() {
		if n == "central" {
			continue
		}
		if n == name {
			return strategyPalette[i%len(strategyPalette)]
		}
		i++
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	return strategyPalette[h.Sum32()%uint32(len(strategyPalette))]
}

// rgb parses a "#RRGGBB" colour.
func rgb(hex string) color.Color {
	v, _ := strconv.ParseUint(strings.TrimPrefix(hex, "#"), 16, 32)
	return color.RGBA{R: uint8(v >> 16), G: uint8(v >> 8), B: uint8(v), A: 255}
}

// figure is a plot with its legend drawn outside the data area, so that the
// legend never covers a line or a bar.
type figure struct {
	p      *plot.Plot
	legend plot.Legend
	below  bool // legend under the plot; otherwise in a column on its right
}

// WritePlots writes PNG plots of rep into dir, which must exist, and returns
// their base names:
//
//   - decisions.png: one panel per strategy other than central, each with
//     all requests per time bin (grey), central's rejected requests per bin
//     (black) and the strategy's (its own colour), after Fig. 5.1 of the
//     thesis (Henriksson & Bennhage 2021); time ticks in minutes and
//     seconds since the trace's start; a scenario's fault windows
//     (Setup.Faults: from a crash or partition to the next restart or
//     heal, or the end) shaded;
//   - admitted.png: the same with admitted requests per bin;
//   - summary.png: per strategy, excess admitted (% of central's admitted
//     tokens) and false rejections (% of requests) as grouped bars;
//   - shortfall.png, with a shortfall window (Series.Shortfall): one
//     panel per strategy, its shortfall per window (ShortfallByWindow,
//     tokens) over time, titled with its total and the first window's
//     part (a float held when central's burst runs out, a change of
//     load, or a steady swing each have their own shape).
//
// Strategies appear in rep.Results order. A report without a series or
// results still gets (empty) plots. Errors name the file.
func WritePlots(dir string, rep *Report) ([]string, error) {
	if rep == nil {
		return nil, errNilReport
	}
	figs := []plotFile{
		{"decisions.png", func() (renderer, error) { return panelPlot(rep, false) }},
		{"admitted.png", func() (renderer, error) { return panelPlot(rep, true) }},
		{"summary.png", func() (renderer, error) { return summaryPlot(rep) }},
	}
	if s := rep.Series; s != nil && len(s.Shortfall) > 0 {
		figs = append(figs, plotFile{"shortfall.png", func() (renderer, error) { return shortfallPlot(rep) }})
	}
	var names []string
	for _, f := range figs {
		path := filepath.Join(dir, f.name)
		fig, err := f.fig()
		if err != nil {
			return names, fmt.Errorf("eval: plotting %s: %w", path, err)
		}
		w, h := fig.size()
		c := fig.render(w, h)
		if err := writeFile(path, func(w io.Writer) error {
			_, err := vgimg.PngCanvas{Canvas: c}.WriteTo(w)
			return err
		}); err != nil {
			return names, err
		}
		names = append(names, f.name)
	}
	return names, nil
}

// plotFile is one file of WritePlots: its name and how to make its
// content.
type plotFile struct {
	name string
	fig  func() (renderer, error)
}

// renderer is a plot file's content: its size and how to draw it.
type renderer interface {
	size() (w, h vg.Length)
	render(w, h vg.Length) *vgimg.Canvas
}

func (f *figure) size() (vg.Length, vg.Length) { return plotWidth, plotHeight }

// render draws f on a new white w x h canvas.
func (f *figure) render(w, h vg.Length) *vgimg.Canvas {
	c := vgimg.New(w, h)
	dc := draw.New(c)
	const gap = 8 // points between the plot and its legend, and around the legend
	size := f.legend.Rectangle(dc).Size()
	if size.X == 0 {
		f.p.Draw(dc)
		return c
	}
	if f.below {
		// Legend entries stacked under the x axis label, left-aligned with it.
		f.p.Draw(draw.Crop(dc, 0, 0, size.Y+2*gap, 0))
		f.legend.Top, f.legend.Left = true, true
		f.legend.Draw(draw.Crop(dc, 6*gap, 0, gap, -(h - size.Y - 2*gap)))
		return c
	}
	// Legend column on the right, its top level with the data area's.
	top := vg.Length(0)
	if f.p.Title.Text != "" {
		top = f.p.Title.TextStyle.Rectangle(f.p.Title.Text).Size().Y + f.p.Title.Padding + gap
	}
	f.p.Draw(draw.Crop(dc, 0, -(size.X + 3*gap), 0, 0))
	f.legend.Top, f.legend.Left = true, true
	f.legend.Draw(draw.Crop(dc, w-size.X-2*gap, -gap, 0, -top))
	return c
}

func newPlot(title, xLabel, yLabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.Padding = vg.Points(8)
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	g := plotter.NewGrid()
	g.Vertical.Color, g.Horizontal.Color = colorGrid, colorGrid
	p.Add(g)
	return p
}

func newLegend() plot.Legend {
	l := plot.NewLegend()
	l.ThumbnailWidth = vg.Points(28)
	l.Padding = vg.Points(3)
	return l
}

func seconds(v float64) string { return num(round(v, 3)) + " s" }

// summaryPlot is summary.png: who over-admits and who over-rejects.
func summaryPlot(rep *Report) (*figure, error) {
	n := len(rep.Results)
	title := "Over-admission and over-rejection against central: " + inputName(rep.Input)
	p := newPlot(title, "strategy", "% (see legend)")
	p.Y.Min = 0
	f := &figure{p: p, legend: newLegend(), below: true}
	if n == 0 {
		p.Title.Text += " (no results)"
		p.X.Tick.Marker = plot.ConstantTicks(nil)
		p.Y.Max = 1
		return f, nil
	}
	excess, falseRej := make(plotter.Values, n), make(plotter.Values, n)
	names := make([]string, n)
	for i, r := range rep.Results {
		names[i] = r.Strategy
		excess[i] = r.ExcessAdmittedPct
		if r.Requests > 0 {
			falseRej[i] = 100 * float64(r.FalseRejections) / float64(r.Requests)
		}
	}
	// Two bars per strategy, together at most ~70% of a strategy's slot.
	width := min(vg.Points(40), vg.Points(0.35*600/float64(n)))
	for _, b := range []struct {
		vals   plotter.Values
		col    color.Color
		offset vg.Length
		label  string
	}{
		{excess, colorExcess, -width / 2, "excess admitted (% of central's admitted tokens)"},
		{falseRej, colorFalse, width / 2, "false rejections (% of requests)"},
	} {
		bars, err := plotter.NewBarChart(b.vals, width)
		if err != nil {
			return nil, err
		}
		bars.Color, bars.LineStyle.Width, bars.Offset = b.col, 0, b.offset
		p.Add(bars)
		f.legend.Add(b.label, bars)

		xys := make(plotter.XYs, n)
		labels := make([]string, n)
		for i, v := range b.vals {
			xys[i].X, xys[i].Y = float64(i), v
			labels[i] = strconv.FormatFloat(v, 'f', 2, 64)
		}
		l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
		if err != nil {
			return nil, err
		}
		for i := range l.TextStyle {
			l.TextStyle[i].XAlign = draw.XCenter
			l.TextStyle[i].Font.Size = vg.Points(9)
		}
		l.Offset = vg.Point{X: b.offset, Y: vg.Points(2)}
		p.Add(l)
	}
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.5, float64(n)-0.5
	if p.Y.Max < 1 {
		p.Y.Max = 1
	}
	p.Y.Max *= 1.08 // room for the value labels
	return f, nil
}

// Panel layout of decisions.png and admitted.png.
const (
	panelCols   = 2
	panelHeight = 2.2 * vg.Inch
)

var colorFault = color.NRGBA{R: 0xD5, G: 0x5E, B: 0x00, A: 50} // translucent vermillion

// grid is a figure of panels sharing one scale, laid out panelCols wide
// (one panel alone takes the whole width).
type grid struct {
	title  string
	panels []*plot.Plot
}

func (g *grid) cols() int { return max(1, min(panelCols, len(g.panels))) }

func (g *grid) rows() int { return max(1, (len(g.panels)+g.cols()-1)/g.cols()) }

func (g *grid) size() (vg.Length, vg.Length) {
	return plotWidth, vg.Length(g.rows())*panelHeight + 0.5*vg.Inch
}

func (g *grid) render(w, h vg.Length) *vgimg.Canvas {
	c := vgimg.New(w, h)
	dc := draw.New(c)
	titleStyle := plot.New().Title.TextStyle
	titleStyle.Font.Size = vg.Points(12)
	titleStyle.XAlign = draw.XCenter
	dc.FillText(titleStyle, vg.Point{X: w / 2, Y: h - 0.3*vg.Inch}, g.title)
	body := draw.Crop(dc, 0, 0, 0, -0.5*vg.Inch)
	rows, cols := g.rows(), g.cols()
	cells := make([][]*plot.Plot, rows)
	for r := range cells {
		cells[r] = make([]*plot.Plot, cols)
		for col := range cols {
			if i := r*cols + col; i < len(g.panels) {
				cells[r][col] = g.panels[i]
			}
		}
	}
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Points(12), PadY: vg.Points(12),
		PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8)}
	canvases := plot.Align(cells, tiles, body)
	for r := range cells {
		for col, p := range cells[r] {
			if p != nil {
				p.Draw(canvases[r][col])
			}
		}
	}
	return c
}

// clockTicks marks time since the trace's start at round steps (1 s ... 1
// day), labelled as clock durations ("1:30", "1:02:00").
type clockTicks struct{}

func (clockTicks) Ticks(lo, hi float64) []plot.Tick {
	span := hi - lo
	steps := []float64{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400}
	step := steps[len(steps)-1]
	for _, s := range steps {
		if span/s <= 8 {
			step = s
			break
		}
	}
	var ticks []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi; v += step {
		ticks = append(ticks, plot.Tick{Value: v, Label: clock(v)})
	}
	return ticks
}

// countTicks marks a count axis (requests, tokens) at whole numbers,
// labelled as integers ("75", not gonum's "75.00"): gonum's default ticks
// when they are whole, else (a span of a few: "2.50 tokens") report.html's
// whole steps (niceTicks: 1, 2 or 5 times a power of ten, at most 5
// intervals) within [lo, hi].
type countTicks struct{}

func (countTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	whole := true
	for _, t := range ticks {
		if t.Label != "" && t.Value != math.Trunc(t.Value) {
			whole = false
		}
	}
	if whole {
		for i := range ticks {
			if ticks[i].Label != "" {
				ticks[i].Label = num(ticks[i].Value)
			}
		}
		return ticks
	}
	nice, _, _ := niceTicks(lo, hi, 5, true)
	ticks = ticks[:0]
	for _, t := range nice {
		if t.v >= lo && t.v <= hi {
			ticks = append(ticks, plot.Tick{Value: t.v, Label: t.label})
		}
	}
	return ticks
}

// clock formats seconds as m:ss or h:mm:ss.
func clock(sec float64) string {
	neg := ""
	if sec < 0 {
		neg, sec = "-", -sec
	}
	t := int64(math.Round(sec))
	h, m, s := t/3600, t/60%60, t%60
	if h > 0 {
		return fmt.Sprintf("%s%d:%02d:%02d", neg, h, m, s)
	}
	return fmt.Sprintf("%s%d:%02d", neg, m, s)
}

// faultWindows are the scenario's fault windows in seconds since the
// trace's start: from each crash or partition to the next restart or heal
// (or to end).
func faultWindows(faults []Fault, origin, end float64) [][2]float64 {
	var out [][2]float64
	open := -1.0
	for _, f := range faults {
		at := f.AtSec - origin
		healing := f.Event == "heal" || strings.HasPrefix(f.Event, "restart")
		switch {
		case healing && open >= 0:
			out = append(out, [2]float64{open, at})
			open = -1
		case !healing && open < 0:
			open = at
		}
	}
	if open >= 0 {
		out = append(out, [2]float64{open, max(end, open)})
	}
	// Only what lies within the plotted span [0, end].
	clipped := out[:0]
	for _, w := range out {
		if w[0] < end && w[1] > 0 {
			clipped = append(clipped, [2]float64{max(w[0], 0), min(w[1], end)})
		}
	}
	return clipped
}

// panelSeries is the bin (seconds), the origin (seconds) and the
// rejected or, if admitted, admitted series by strategy of s (nil: none).
func panelSeries(s *Series, admitted bool) (bin, origin float64, series map[string][]int) {
	bin = 1.0
	if s == nil {
		return bin, 0, nil
	}
	series = s.Rejected
	if admitted {
		series = s.Admitted
	}
	if s.Bin > 0 {
		bin = s.Bin.Seconds()
	}
	return bin, s.Origin.Seconds(), series
}

// panelParams is what every panel of panelPlot shares: the bin and the
// axes' extent (seconds, requests), the fault windows, all requests and
// central's series.
type panelParams struct {
	bin, ymax, end float64
	windows        [][2]float64
	total, central []int
}

// strategyPanel is the panel of strategy, its series counts: the fault
// windows shaded, all requests, central and the strategy's series.
func strategyPanel(strategy string, counts []int, pp panelParams) (*plot.Plot, error) {
	p, col := strategyTimePanel(strategy, strategy, "requests")
	p.Y.Min, p.Y.Max = 0, pp.ymax*1.05
	p.X.Min, p.X.Max = 0, pp.end
	for _, w := range pp.windows {
		poly, err := plotter.NewPolygon(plotter.XYs{{X: w[0], Y: 0}, {X: w[1], Y: 0}, {X: w[1], Y: pp.ymax * 1.05}, {X: w[0], Y: pp.ymax * 1.05}})
		if err != nil {
			return nil, err
		}
		poly.Color, poly.LineStyle.Width = colorFault, 0
		p.Add(poly)
	}
	for _, l := range []struct {
		counts []int
		style  draw.LineStyle
	}{
		{pp.total, draw.LineStyle{Color: colorTotal, Width: vg.Points(1)}},
		{pp.central, draw.LineStyle{Color: colorCentral, Width: vg.Points(2.5)}},
		{counts, draw.LineStyle{Color: col, Width: vg.Points(1.2)}},
	} {
		if len(l.counts) == 0 {
			continue
		}
		line, err := plotter.NewLine(binXYs(l.counts, pp.bin))
		if err != nil {
			return nil, err
		}
		line.LineStyle = l.style
		p.Add(line)
	}
	return p, nil
}

// strategyTimePanel is a panel over time since the trace's start (clock
// ticks) against yLabel, titled title in strategy's colour, which it
// returns too.
func strategyTimePanel(strategy, title, yLabel string) (*plot.Plot, color.Color) {
	col := rgb(strategyColor(strategy))
	p := newPlot("", "time since trace start (m:ss)", yLabel)
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.Title.TextStyle.Color = col
	p.X.Tick.Marker = clockTicks{}
	p.Y.Tick.Marker = countTicks{}
	return p, col
}

// binXYs are counts per bin as points (bin start in seconds, count).
func binXYs(counts []int, bin float64) plotter.XYs {
	pts := make(plotter.XYs, len(counts))
	for i, n := range counts {
		pts[i].X, pts[i].Y = float64(i)*bin, float64(n)
	}
	return pts
}

// panelPlot is decisions.png (rejected per bin) or, if admitted,
// admitted.png: one panel per strategy against central and all requests.
func panelPlot(rep *Report, admitted bool) (*grid, error) {
	what := "Rejected"
	if admitted {
		what = "Admitted"
	}
	s := rep.Series
	g := &grid{}
	bin, origin, series := panelSeries(s, admitted)
	g.title = fmt.Sprintf("%s requests per %s bin, %s: strategy (colour), central (black), all requests (grey), faults (shaded)",
		what, seconds(bin), inputName(rep.Input))
	ymax, end := 1.0, bin
	if s != nil {
		for _, n := range s.Requests {
			ymax = max(ymax, float64(n))
		}
		end = float64(max(len(s.Requests), 1)) * bin
	}
	pp := panelParams{bin: bin, ymax: ymax, end: end, windows: faultWindows(rep.Setup.Faults, origin, end),
		total: s.requestsOrNil()}
	if series != nil {
		pp.central = series["central"]
	}
	for _, r := range rep.Results {
		if r.Strategy == "central" {
			continue
		}
		p, err := strategyPanel(r.Strategy, series[r.Strategy], pp)
		if err != nil {
			return nil, err
		}
		g.panels = append(g.panels, p)
	}
	if len(g.panels) == 0 {
		g.panels = append(g.panels, emptyPanel("requests", end, ymax))
	}
	return g, nil
}

// requestsOrNil is the series' requests per bin, nil for a nil series.
func (s *Series) requestsOrNil() []int {
	if s == nil {
		return nil
	}
	return s.Requests
}

// shortfallPlot is shortfall.png: one panel per strategy (rep.Results
// order, central left out), its shortfall per window over time on a
// shared scale, each titled with its total, its first window's share and
// its after birth %.
func shortfallPlot(rep *Report) (*grid, error) {
	s := rep.Series
	win := s.ShortfallWindow.Seconds()
	g := &grid{title: fmt.Sprintf("Shortfall per %s window, %s: tokens central admitted beyond the strategy, summed over keys",
		seconds(win), inputName(rep.Input))}
	ymax, end := 1.0, win
	for _, w := range s.Shortfall {
		for _, v := range w {
			ymax = max(ymax, float64(v))
		}
		end = max(end, float64(len(w))*win)
	}
	for _, r := range rep.Results {
		w, ok := s.Shortfall[r.Strategy]
		if !ok {
			continue
		}
		p, col := strategyTimePanel(r.Strategy, r.Strategy+": "+shortfallSummary(rep, r.Strategy, w), "tokens")
		p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, end, 0, ymax*1.05
		pts := make(plotter.XYs, len(w))
		for i, v := range w {
			pts[i].X, pts[i].Y = float64(i)*win, float64(v)
		}
		if len(pts) > 0 {
			line, err := plotter.NewLine(pts)
			if err != nil {
				return nil, err
			}
			line.LineStyle = draw.LineStyle{Color: col, Width: vg.Points(1.2)}
			p.Add(line)
		}
		g.panels = append(g.panels, p)
	}
	if len(g.panels) == 0 {
		g.panels = append(g.panels, emptyPanel("tokens", end, ymax))
	}
	return g, nil
}

// shortfallSummary is a panel's title after the strategy: the total of
// byWindow and its first window's part ("6136 tokens, first window 35%"),
// and the strategy's after birth % when its result in rep has one (",
// after birth 0.32%": on a trace whose keys are born throughout, the
// first window says little).
func shortfallSummary(rep *Report, strategy string, byWindow []int64) string {
	var total int64
	for _, v := range byWindow {
		total += v
	}
	if total == 0 {
		return "no shortfall"
	}
	out := fmt.Sprintf("%d tokens, first window %.0f%%", total, 100*float64(byWindow[0])/float64(total))
	for _, r := range rep.Results {
		if r.Strategy == strategy && r.ShortfallAfterBirthPct != nil {
			out += fmt.Sprintf(", after birth %.2f%%", *r.ShortfallAfterBirthPct)
		}
	}
	return out
}

// emptyPanel is the one panel of a grid with no strategy besides central:
// time (0 to end seconds) against yLabel (0 to ymax).
func emptyPanel(yLabel string, end, ymax float64) *plot.Plot {
	p := newPlot("(no strategy besides central)", "time since trace start (m:ss)", yLabel)
	p.X.Tick.Marker = clockTicks{}
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, end, 0, ymax
	return p
}
