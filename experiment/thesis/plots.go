package thesis

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Okabe & Ito's colour-blind safe palette (black is central's).
var colors = map[string]color.Color{
	"central":         color.Black,
	"counter":         color.RGBA{R: 0xE6, G: 0x9F, B: 0x00, A: 255},
	"queue":           color.RGBA{R: 0x56, G: 0xB4, B: 0xE9, A: 255},
	"queue_freq":      color.RGBA{R: 0x00, G: 0x9E, B: 0x73, A: 255},
	"queue_linf":      color.RGBA{R: 0xCC, G: 0x79, B: 0xA7, A: 255},
	"queue_freq_linf": color.RGBA{R: 0x00, G: 0x72, B: 0xB2, A: 255},
	"best_queue":      color.RGBA{R: 0xD5, G: 0x5E, B: 0x00, A: 255},
	"best_counter":    color.RGBA{R: 0x99, G: 0x66, B: 0x00, A: 255},
}

var grey = color.RGBA{R: 170, G: 170, B: 170, A: 255}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	g := plotter.NewGrid()
	g.Vertical.Color = color.RGBA{R: 230, G: 230, B: 230, A: 255}
	g.Horizontal.Color = g.Vertical.Color
	p.Add(g)
	p.Legend.Top = true
	return p
}

func addLine(p *plot.Plot, label string, xs, ys []float64, c color.Color, width vg.Length, dashed bool) error {
	pts := make(plotter.XYs, len(xs))
	for i := range xs {
		pts[i].X, pts[i].Y = xs[i], ys[i]
	}
	l, err := plotter.NewLine(pts)
	if err != nil {
		return err
	}
	l.Color, l.Width = c, width
	if dashed {
		l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
	}
	p.Add(l)
	p.Legend.Add(label, l)
	return nil
}

func save(p *plot.Plot, dir, name string, w, h vg.Length) error {
	if err := p.Save(w, h, filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("thesis: plotting %s: %w", name, err)
	}
	return nil
}

// writePlots writes the figures and returns their file names.
func writePlots(dir string, res *Results) ([]string, error) {
	var names []string
	if err := plotADiff(dir, res.A); err != nil {
		return nil, err
	}
	names = append(names, "fig5_3_a_rejection_difference.png")
	figs := map[BSubset]string{Extreme: "fig5_5_b_extreme.png", Substantial: "fig5_7_b_substantial.png", Barely: "fig5_9_b_barely.png", NotLimited: "fig5_11_b_not_limited.png"}
	for i, b := range BSubsets {
		if err := plotB(dir, figs[b], res.B[i]); err != nil {
			return nil, err
		}
		names = append(names, figs[b])
	}
	if err := plotD(dir, res.D); err != nil {
		return nil, err
	}
	names = append(names, "fig5_15_d_precision.png")
	if err := plotRatios(dir, compare(res)); err != nil {
		return nil, err
	}
	names = append(names, "memory_bandwidth.png")
	return names, nil
}

// plotADiff is Fig. 5.3: per variant, central's rejections minus the
// variant's, cumulative over time (0 is ideal; positive = fewer rejections
// than central so far).
func plotADiff(dir string, ds *DataSet) error {
	p := newPlot("Data set A: central's rejections minus the variant's, cumulative (mean over seeds)", "time (s)", "rejections")
	se := ds.series
	xs := make([]float64, len(se.requests))
	for i := range xs {
		xs[i] = float64(i+1) * se.bin.Seconds()
	}
	central := se.rejected["central"]
	for _, v := range allVariants[1:] {
		rej := se.rejected[v.ID]
		ys := make([]float64, len(xs))
		acc := 0.0
		for i := range ys {
			acc += central[i] - rej[i]
			ys[i] = acc
		}
		if err := addLine(p, v.ID, xs, ys, colors[v.ID], vg.Points(1.5), strings.HasPrefix(v.ID, "best")); err != nil {
			return err
		}
	}
	return save(p, dir, "fig5_3_a_rejection_difference.png", 10*vg.Inch, 5*vg.Inch)
}

// plotB is Figs. 5.5/5.7/5.9/5.11: requests and rejections per second.
func plotB(dir, name string, ds *DataSet) error {
	p := newPlot(ds.Name+": requests and rejections per second (mean over seeds)", "time (s)", "requests per second")
	se := ds.series
	xs := make([]float64, len(se.requests))
	for i := range xs {
		xs[i] = float64(i) * se.bin.Seconds()
	}
	if err := addLine(p, "requests", xs, se.requests, grey, vg.Points(1), false); err != nil {
		return err
	}
	for _, id := range []string{"central", "counter", "queue_freq_linf", "best_queue", "best_counter"} {
		w := vg.Points(1.5)
		if id == "central" {
			w = vg.Points(2.5)
		}
		if err := addLine(p, "rejected: "+id, xs, se.rejected[id], colors[id], w, strings.HasPrefix(id, "best")); err != nil {
			return err
		}
	}
	return save(p, dir, name, 10*vg.Inch, 5*vg.Inch)
}

// plotD is data set D (§5.4, Fig. 5.15 as a summary): precision against
// the gossip interval.
func plotD(dir string, ds []*DataSet) error {
	p := newPlot("Data set D: precision vs gossip interval (100% = central's rejections)", "gossip interval (ms)", "precision (%)")
	for _, v := range dVariants[1:] {
		var xs, ys []float64
		for _, d := range ds {
			r := d.Row(v.ID)
			if r == nil || r.Precision == nil {
				continue
			}
			g := 0.0
			fmt.Sscanf(strings.TrimSuffix(d.Gossip, "ms"), "%g", &g)
			xs = append(xs, g)
			ys = append(ys, 100**r.Precision)
		}
		if len(xs) == 0 {
			continue
		}
		if err := addLine(p, v.ID, xs, ys, colors[v.ID], vg.Points(2), false); err != nil {
			return err
		}
		sc, err := plotter.NewScatter(xyOf(xs, ys))
		if err != nil {
			return err
		}
		sc.Color = colors[v.ID]
		sc.Shape = draw.CircleGlyph{}
		p.Add(sc)
	}
	return save(p, dir, "fig5_15_d_precision.png", 8*vg.Inch, 5*vg.Inch)
}

func xyOf(xs, ys []float64) plotter.XYs {
	pts := make(plotter.XYs, len(xs))
	for i := range xs {
		pts[i].X, pts[i].Y = xs[i], ys[i]
	}
	return pts
}

// plotRatios compares the thesis' memory and bandwidth ratios with ours
// (after Figs. 5.4-5.13, which the thesis summarizes as these ratios), on a
// log2 scale so that 0.5x and 2x are equally far from 1.
func plotRatios(dir string, rows []CmpRow) error {
	var labels []string
	var thesis, ours plotter.Values
	for _, r := range rows {
		if isPct(r.Metric) || r.Ours == nil {
			continue
		}
		labels = append(labels, shortLabel(r))
		thesis = append(thesis, math.Log2(r.Thesis))
		ours = append(ours, math.Log2(math.Max(*r.Ours, 1e-6)))
	}
	p := newPlot("Memory (mean state) and bandwidth (bytes) ratios, thesis vs ours; C = counter, Q = queue, F = frequency analysis, L = LINF", "", "log2(ratio)  (0 = equal, 1 = 2x, -1 = half)")
	if len(labels) == 0 {
		return save(p, dir, "memory_bandwidth.png", 14*vg.Inch, 6*vg.Inch)
	}
	w := vg.Points(12)
	bt, err := plotter.NewBarChart(thesis, w)
	if err != nil {
		return err
	}
	bt.Color, bt.Offset = grey, -w/2
	bo, err := plotter.NewBarChart(ours, w)
	if err != nil {
		return err
	}
	bo.Color, bo.Offset = colors["queue_freq_linf"], w/2
	p.Add(bt, bo)
	p.Legend.Add("thesis", bt)
	p.Legend.Add("ours", bo)
	p.NominalX(labels...)
	p.X.Tick.Label.Rotation = math.Pi / 6
	p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = draw.XRight, draw.YCenter
	return save(p, dir, "memory_bandwidth.png", 16*vg.Inch, 6*vg.Inch)
}

// shortLabel names a ratio row: "B extreme, mem Q+F+L/C".
func shortLabel(r CmpRow) string {
	abbr := map[string]string{"counter": "C", "queue": "Q", "queue_freq": "Q+F", "queue_linf": "Q+L", "queue_freq_linf": "Q+F+L"}
	var vs []string
	for _, v := range r.Variants {
		vs = append(vs, abbr[v])
	}
	kind := "bw"
	if strings.HasPrefix(r.Metric, "memory") {
		kind = "mem"
	}
	ds := strings.TrimPrefix(strings.TrimPrefix(r.DataSet, "data set "), "B, ")
	return ds + ", " + kind + " " + strings.Join(vs, "/")
}
