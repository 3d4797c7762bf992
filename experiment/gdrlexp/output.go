package gdrlexp

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/tokenmesh/tokenmesh/experiment"
)

var dashes = [][]vg.Length{nil, {vg.Points(6), vg.Points(3)}, {vg.Points(2), vg.Points(2)}}

// series is one line of a plot; style picks colour and dashes (style i:
// colour i mod 7, dashes i / 7 unless dash >= 0 overrides).
type series struct {
	name   string
	xs, ys []float64
	style  int
	dash   int // -1: from style
	points bool
}

type axes struct {
	title, x, y  string
	logX, logY   bool
	yMin, yMax   float64 // used when yMin < yMax
	legendBottom bool
	legendLeft   bool
}

// linePlot writes a PNG line plot to path.
func linePlot(path string, ax axes, lines []series) error {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = ax.title, ax.x, ax.y
	p.Add(plotter.NewGrid())
	if ax.logX {
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	}
	if ax.logY {
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	}
	for _, s := range lines {
		if err := addLine(p, ax, s); err != nil {
			return err
		}
	}
	if ax.yMin < ax.yMax {
		p.Y.Min, p.Y.Max = ax.yMin, ax.yMax
	}
	p.Legend.Top = !ax.legendBottom
	p.Legend.Left = ax.legendLeft
	return p.Save(10*vg.Inch, 5*vg.Inch, path)
}

// addLine adds s to p as a line (with points if s.points), leaving out
// the points the axes ax cannot show; no line if none is left.
func addLine(p *plot.Plot, ax axes, s series) error {
	xy := plottable(ax, s)
	if len(xy) == 0 {
		return nil
	}
	l, err := plotter.NewLine(xy)
	if err != nil {
		return err
	}
	l.Color = experiment.Palette[s.style%len(experiment.Palette)]
	d := s.dash
	if d < 0 {
		d = s.style / len(experiment.Palette)
	}
	l.Dashes = dashes[d%len(dashes)]
	l.Width = vg.Points(1.2)
	p.Add(l)
	if s.points {
		sc, err := plotter.NewScatter(xy)
		if err != nil {
			return err
		}
		sc.Color = l.Color
		sc.Shape = draw.CircleGlyph{}
		p.Add(sc)
		p.Legend.Add(s.name, l, sc)
	} else if s.name != "" {
		p.Legend.Add(s.name, l)
	}
	return nil
}

// plottable are the points of s the axes ax can show: finite, and
// positive on a log axis.
func plottable(ax axes, s series) plotter.XYs {
	xy := make(plotter.XYs, 0, len(s.xs))
	for i := range s.xs {
		x, y := s.xs[i], s.ys[i]
		if math.IsNaN(y) || math.IsInf(y, 0) || (ax.logX && x <= 0) || (ax.logY && y <= 0) {
			continue
		}
		xy = append(xy, plotter.XY{X: x, Y: y})
	}
	return xy
}

// sample returns the indices 0, step, 2 step, ... and the last of a series
// of length n, at most about limit of them.
func sample(n, limit int) []int {
	step := max(1, n/limit)
	var out []int
	for i := 0; i < n; i += step {
		out = append(out, i)
	}
	if n > 0 && out[len(out)-1] != n-1 {
		out = append(out, n-1)
	}
	return out
}

func writeJSON(dir string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.json"), append(b, '\n'), 0o644)
}

func writeMD(dir, text string) error {
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(text), 0o644)
}

func progress(ctx experiment.Context, step string, done, total int) {
	if ctx.Progress != nil {
		ctx.Progress(step, done, total)
	}
}

// intervals formats a number of intervals, "not within N" when negative.
func intervals(k, limit int) string {
	if k < 0 {
		return fmt.Sprintf("> %d (not reached)", limit)
	}
	return fmt.Sprint(k)
}

// mean of xs[from:].
func tailMean(xs []float64, from int) float64 {
	from = max(0, min(from, len(xs)))
	if from == len(xs) {
		return math.NaN()
	}
	s := 0.0
	for _, x := range xs[from:] {
		s += x
	}
	return s / float64(len(xs)-from)
}

// r4 rounds for JSON (NaN and infinities become -1: JSON has no NaN).
func r4(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return -1
	}
	return math.Round(x*1e4) / 1e4
}

// plotSpec is one line plot of an experiment: its file name in the output
// directory, its axes and its lines.
type plotSpec struct {
	name  string
	ax    axes
	lines []series
}

// writePlots draws plots into dir and returns their file names, in order.
// Errors name the experiment and the plot.
func writePlots(dir, exp string, plots []plotSpec) ([]string, error) {
	var names []string
	for _, p := range plots {
		if err := linePlot(filepath.Join(dir, p.name), p.ax, p.lines); err != nil {
			return nil, fmt.Errorf("%s: plotting %s: %w", exp, p.name, err)
		}
		names = append(names, p.name)
	}
	return names, nil
}
