package eval

import (
	"fmt"
	"image/color"
	"io"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
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
	// palette is Okabe & Ito's colour-blind safe set without black (central's)
	// and yellow (unreadable on white). Past its end, colours repeat dashed.
	palette = []color.Color{
		color.RGBA{R: 0xE6, G: 0x9F, B: 0x00, A: 255}, // orange
		color.RGBA{R: 0x00, G: 0x72, B: 0xB2, A: 255}, // blue
		color.RGBA{R: 0x00, G: 0x9E, B: 0x73, A: 255}, // bluish green
		color.RGBA{R: 0xD5, G: 0x5E, B: 0x00, A: 255}, // vermillion
		color.RGBA{R: 0x56, G: 0xB4, B: 0xE9, A: 255}, // sky blue
		color.RGBA{R: 0xCC, G: 0x79, B: 0xA7, A: 255}, // reddish purple
	}
	dashes = [][]vg.Length{nil, {vg.Points(6), vg.Points(3)}, {vg.Points(2), vg.Points(2)}}
)

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
//   - decisions.png: requests per time bin (grey) and, for each strategy,
//     its rejected requests per bin (central thick black), after Fig. 5.1 of
//     the thesis (Henriksson & Bennhage 2021);
//   - admitted.png: the same with admitted requests per bin;
//   - summary.png: per strategy, excess admitted (% of central's admitted
//     tokens) and false rejections (% of requests) as grouped bars.
//
// Strategies appear in rep.Results order. A report without a series or
// results still gets (empty) plots. Errors name the file.
func WritePlots(dir string, rep *Report) ([]string, error) {
	if rep == nil {
		return nil, errNilReport
	}
	figs := []struct {
		name string
		fig  func() (*figure, error)
	}{
		{"decisions.png", func() (*figure, error) { return timePlot(rep, false) }},
		{"admitted.png", func() (*figure, error) { return timePlot(rep, true) }},
		{"summary.png", func() (*figure, error) { return summaryPlot(rep) }},
	}
	var names []string
	for _, f := range figs {
		path := filepath.Join(dir, f.name)
		fig, err := f.fig()
		if err != nil {
			return names, fmt.Errorf("eval: plotting %s: %w", path, err)
		}
		c := fig.render(plotWidth, plotHeight)
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

// timePlot is decisions.png (rejected per bin) or, if admitted,
// admitted.png.
func timePlot(rep *Report, admitted bool) (*figure, error) {
	what, series := "Rejected", map[string][]int(nil)
	s := rep.Series
	bin := 0.0
	if s != nil {
		series, bin = s.Rejected, s.Bin.Seconds()
		if admitted {
			series = s.Admitted
		}
	}
	if admitted {
		what = "Admitted"
	}
	binText := "per bin"
	if bin > 0 {
		binText = "per " + seconds(bin) + " bin"
	} else {
		bin = 1 // a hand-made series without a width: bins one second apart
	}
	title := fmt.Sprintf("%s requests over time, by strategy: %s", what, inputName(rep.Input))
	p := newPlot(title, "time since trace start (s)", "requests "+binText)
	p.Y.Min = 0
	f := &figure{p: p, legend: newLegend()}

	origin := 0.0
	if s != nil {
		origin = s.Origin.Seconds()
	}
	xy := func(counts []int) plotter.XYs {
		pts := make(plotter.XYs, len(counts))
		for i, n := range counts {
			pts[i].X, pts[i].Y = origin+float64(i)*bin, float64(n)
		}
		return pts
	}
	// add draws counts and returns its legend thumbnail; a single bin gets
	// a dot, as a line needs two points.
	add := func(counts []int, style draw.LineStyle) (plot.Thumbnailer, error) {
		l, err := plotter.NewLine(xy(counts))
		if err != nil {
			return nil, err
		}
		l.LineStyle = style
		p.Add(l)
		if len(counts) == 1 {
			sc, err := plotter.NewScatter(xy(counts))
			if err != nil {
				return nil, err
			}
			sc.GlyphStyle = draw.GlyphStyle{Color: style.Color, Radius: style.Width + vg.Points(1.5), Shape: draw.CircleGlyph{}}
			p.Add(sc)
		}
		return l, nil
	}

	if s == nil || len(s.Requests) == 0 {
		p.Title.Text += " (no data)"
	} else {
		th, err := add(s.Requests, draw.LineStyle{Color: colorTotal, Width: vg.Points(1.5)})
		if err != nil {
			return nil, err
		}
		f.legend.Add("all requests", th)
	}
	// Central, the reference, is drawn first and thick so that the others,
	// drawn over it, show where they agree with it; the legend keeps
	// rep.Results order.
	thumbs := make([]plot.Thumbnailer, len(rep.Results))
	order := make([]int, 0, len(rep.Results))
	for i, r := range rep.Results {
		if r.Strategy == "central" {
			order = append([]int{i}, order...)
		} else {
			order = append(order, i)
		}
	}
	other := 0
	styles := make([]draw.LineStyle, len(rep.Results))
	for i, r := range rep.Results {
		if r.Strategy == "central" {
			styles[i] = draw.LineStyle{Color: colorCentral, Width: vg.Points(3.5)}
			continue
		}
		styles[i] = draw.LineStyle{
			Color:  palette[other%len(palette)],
			Width:  vg.Points(1.5),
			Dashes: dashes[(other/len(palette))%len(dashes)],
		}
		other++
	}
	for _, i := range order {
		counts, ok := series[rep.Results[i].Strategy]
		if !ok || len(counts) == 0 {
			continue
		}
		th, err := add(counts, styles[i])
		if err != nil {
			return nil, err
		}
		thumbs[i] = th
	}
	for i, r := range rep.Results {
		if thumbs[i] != nil {
			label := r.Strategy
			if label == "central" {
				label = "central (exact)"
			}
			f.legend.Add(label, thumbs[i])
		}
	}
	if p.Y.Max < 1 {
		p.Y.Max = 1 // no data or all zero: keep the axis at 0..1, not -1..1
	}
	if !(p.X.Max > p.X.Min) {
		p.X.Min, p.X.Max = origin, origin+bin // no data or one bin: show that bin
	}
	return f, nil
}

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
