package eval

import (
	"fmt"
	"strconv"
)

// This file builds report.html's plots (ours) from a Report, with
// svg.go's pieces: admitted tokens over time, each strategy minus central
// over time, the accuracy summary, and with a shortfall window the
// shortfall per window over time. Each strategy keeps its colour
// (strategyColor) in all of them; every axis has one unit.

// htmlPlot is a plot of report.html with its heading and caption.
type htmlPlot struct {
	Title, Caption string
	SVG            svgPlot
}

// timeBase is what the time plots share: the bin width and the plotted
// span in seconds, the series' origin in seconds of trace time, and the
// strategies other than central, in rep.Results order.
type timeBase struct {
	bin, end, origin float64
	others           []string
}

func newTimeBase(rep *Report) timeBase {
	b := timeBase{bin: 1, end: 1}
	if s := rep.Series; s != nil {
		if s.Bin > 0 {
			b.bin = s.Bin.Seconds()
		}
		b.origin = s.Origin.Seconds()
		b.end = float64(max(len(s.RequestTokens), 1)) * b.bin
	}
	for _, r := range rep.Results {
		if r.Strategy != "central" {
			b.others = append(b.others, r.Strategy)
		}
	}
	return b
}

// binUnit is the unit of a per-bin count: "tokens per 2 s".
func (b timeBase) binUnit() string { return "tokens per " + seconds(b.bin) }

const timeLabel = "time since the trace's start (m:ss)"

// floats converts counts per bin to float64s (nil for nil).
func floats(v []int64) []float64 {
	if v == nil {
		return nil
	}
	out := make([]float64, len(v))
	for i, n := range v {
		out[i] = float64(n)
	}
	return out
}

// htmlPlots returns report.html's plots of rep.
func htmlPlots(rep *Report) []htmlPlot {
	b := newTimeBase(rep)
	plots := []htmlPlot{
		{Title: "Admitted tokens over time",
			Caption: fmt.Sprintf("Tokens admitted per %s bin by each strategy (its colour) and by central, the exact reference (black), over all requested tokens (grey area). Shaded: the scenario's fault windows, each event a dashed line with its label.", seconds(b.bin)),
			SVG:     admittedSVG(rep, b)},
		{Title: "Each strategy minus central",
			Caption: fmt.Sprintf("Per %s bin, the strategy's admitted tokens minus central's: above 0 it admitted more than central (over-admission), below 0 fewer (over-rejection). Each panel has its own scale, so that small differences show under the request spikes; sums over the run in the panel's title.", seconds(b.bin)),
			SVG:     diffSVG(rep, b)},
		{Title: "Accuracy by strategy",
			Caption: "Left: excess admitted, the tokens admitted beyond central's per key, in % of central's admitted tokens. Right: false rejections, requests rejected that central admitted, in % of the requests central admitted (the recommendation's bounds).",
			SVG:     summarySVG(rep)},
	}
	if s := rep.Series; s != nil && len(s.Shortfall) > 0 {
		plots = append(plots, htmlPlot{Title: "Shortfall per window",
			Caption: fmt.Sprintf("Per %s window (--shortfall-window), the tokens central admitted beyond the strategy, summed over keys: a spike at the start is the tokens a strategy holds when central's burst runs out, one at a change of load what the change cost, and the rest the steady swing. Each panel has its own scale; the run's total, the first window's part and the after birth %% (the shortfall without each key's first window) at its right.", seconds(s.ShortfallWindow.Seconds())),
			SVG:     shortfallSVG(rep, b)})
	}
	return plots
}

// noData is a plot's message when there is nothing to draw.
func noData(f frame, text string) svgEl {
	return svgEl{Tag: "text", X: f.x + f.w/2, Y: f.y + f.h/2, Anchor: "middle", Size: 14, Fill: svgAxis, Text: text}
}

// admittedSVG plots the admitted tokens per bin of every strategy over
// central's and the requested tokens, with a legend on the right.
func admittedSVG(rep *Report, b timeBase) svgPlot {
	const h, legendW = 420, 190
	s := rep.Series
	ymax := 1.0
	if s != nil {
		for _, v := range s.RequestTokens {
			ymax = max(ymax, float64(v))
		}
	}
	yt, ylo, yhi := niceTicks(0, ymax, 6, true)
	f := frame{x: 78, w: svgWidth - 78 - legendW, xmin: 0, xmax: b.end, ymin: ylo, ymax: yhi}
	_, rows := faultLabels(f, rep.Setup.Faults, b.origin, b.end)
	f.y = 12 + faultLabelH*float64(rows)
	f.h = h - f.y - 48
	p := svgPlot{Name: "admitted", Label: "Admitted tokens per " + seconds(b.bin) + " bin, by strategy", W: svgWidth, H: h}
	back, front := faultLayers(f, rep.Setup.Faults, b.origin, b.end)
	p.Els = append(p.Els, back...)
	p.Els = append(p.Els, axes(f, timeTicks(b.end), yt, timeLabel, "admitted "+b.binUnit())...)
	entries := []legendEntry{{text: "all requested tokens", color: svgGrey, box: true}}
	if s == nil || len(s.RequestTokens) == 0 {
		p.Els = append(p.Els, noData(f, "no requests"))
	} else {
		p.Els = append(p.Els, svgEl{Tag: "path", D: stepPath(f, b.bin, floats(s.RequestTokens), true), Fill: svgGrey, FillOpacity: 0.45})
		// Central, the reference, last: on top of the strategies, thinner,
		// so that a strategy shows where it leaves central.
		var lines []svgEl
		for _, name := range append([]string{"central"}, b.others...) {
			adm, ok := s.AdmittedTokens[name]
			if !ok {
				continue
			}
			width := 2.2
			if name == "central" {
				width = 1.4
			}
			lines = append(lines, svgEl{Tag: "path", D: stepPath(f, b.bin, floats(adm), false), Fill: "none",
				Stroke: strategyColor(name), StrokeWidth: width, Strategy: name, Tip: name})
			entries = append(entries, legendEntry{text: name, color: strategyColor(name), strategy: name})
		}
		if len(lines) > 0 && lines[0].Strategy == "central" {
			lines = append(lines[1:], lines[0])
		}
		p.Els = append(p.Els, lines...)
	}
	p.Els = append(p.Els, front...)
	p.Els = append(p.Els, legend(svgWidth-legendW+24, f.y+10, entries)...)
	return p
}

// stratPanel is one panel of panelGrid: a strategy's series per bin, the
// panel's title and the text at its right, and what to say when there
// is nothing to draw (empty: no series; flat: all zero).
type stratPanel struct {
	name, title, sums string
	vals              []float64
	empty, flat       string
}

// panelGrid draws panels, two columns (one panel alone the whole width),
// one per strategy, each on its own scale (0 included) over the time
// base's span with the scenario's fault windows: bin is the width of one
// value (seconds), yLabel the y axis's label with its unit.
func panelGrid(rep *Report, b timeBase, name, label, yLabel string, bin float64, panels []stratPanel) svgPlot {
	cols := max(1, min(2, len(panels)))
	const left, right, top, bottom, plotH = 84, 18, 30, 50, 120 // a panel's margins and data area height
	panelW := float64(svgWidth) / float64(cols)
	// The fault labels take the same rows in every panel.
	_, labelRows := faultLabels(frame{x: left, w: panelW - left - right, xmin: 0, xmax: b.end}, rep.Setup.Faults, b.origin, b.end)
	panelH := top + faultLabelH*float64(labelRows) + plotH + bottom
	rows := max(1, (len(panels)+cols-1)/cols)
	p := svgPlot{Name: name, Label: label, W: svgWidth, H: float64(rows) * panelH}
	if len(panels) == 0 {
		f := frame{x: left, y: top, w: svgWidth - left - right, h: panelH - top - bottom, xmin: 0, xmax: b.end, ymin: -1, ymax: 1}
		p.Els = append(p.Els, noData(f, "no strategy besides central was run"))
		return p
	}
	for i, pn := range panels {
		x0, y0 := float64(i%cols)*panelW, float64(i/cols)*panelH
		lo, hi := 0.0, 0.0
		for _, v := range pn.vals {
			lo, hi = min(lo, v), max(hi, v)
		}
		flat := lo == 0 && hi == 0 // every value 0 (or none)
		if flat {
			lo, hi = -1, 1
		}
		yt, ylo, yhi := niceTicks(lo, hi, 4, true)
		f := frame{x: x0 + left, y: y0 + panelH - bottom - plotH, w: panelW - left - right, h: plotH, xmin: 0, xmax: b.end, ymin: ylo, ymax: yhi}
		col := strategyColor(pn.name)
		back, front := faultLayers(f, rep.Setup.Faults, b.origin, b.end)
		p.Els = append(p.Els, back...)
		p.Els = append(p.Els, axes(f, timeTicks(b.end), yt, timeLabel, yLabel)...)
		p.Els = append(p.Els,
			svgEl{Tag: "text", X: f.x, Y: y0 + 20, Size: 14, Bold: true, Fill: col, Text: pn.title, Strategy: pn.name, Class: "panel-title"},
			svgEl{Tag: "text", X: f.x + f.w, Y: y0 + 20, Anchor: "end", Size: 12, Fill: svgAxis, Text: pn.sums})
		switch {
		case len(pn.vals) == 0:
			p.Els = append(p.Els, noData(f, pn.empty))
		case flat:
			p.Els = append(p.Els, noData(f, pn.flat))
		default:
			p.Els = append(p.Els,
				svgEl{Tag: "path", D: stepPath(f, bin, pn.vals, true), Fill: col, FillOpacity: 0.3},
				svgEl{Tag: "path", D: stepPath(f, bin, pn.vals, false), Fill: "none", Stroke: col, StrokeWidth: 1.3, Strategy: pn.name, Tip: pn.title})
		}
		p.Els = append(p.Els, front...)
	}
	return p
}

// diffSVG plots, in one panel per strategy other than central (two
// columns), the strategy's admitted tokens per bin minus central's.
func diffSVG(rep *Report, b timeBase) svgPlot {
	var central []int64
	if rep.Series != nil {
		central = rep.Series.AdmittedTokens["central"]
	}
	var panels []stratPanel
	for _, name := range b.others {
		var adm []int64
		if rep.Series != nil {
			adm = rep.Series.AdmittedTokens[name]
		}
		diff := make([]float64, min(len(adm), len(central)))
		var over, under float64
		for j := range diff {
			diff[j] = float64(adm[j] - central[j])
			if diff[j] > 0 {
				over += diff[j]
			} else {
				under -= diff[j]
			}
		}
		panels = append(panels, stratPanel{name: name, title: fmt.Sprintf("%s − central", name),
			sums: fmt.Sprintf("+%s / −%s tokens over the run", strconv.FormatFloat(over, 'f', 0, 64), strconv.FormatFloat(under, 'f', 0, 64)),
			vals: diff, empty: "no series", flat: "the same as central in every bin"})
	}
	return panelGrid(rep, b, "difference", "Admitted tokens per "+seconds(b.bin)+" bin, strategy minus central",
		"Δ "+b.binUnit(), b.bin, panels)
}

// shortfallSVG plots, in one panel per strategy that has a shortfall
// series (Series.Shortfall: with a shortfall window), its shortfall per
// window over time (ShortfallByWindow), with its total and the first
// window's part at the panel's right.
func shortfallSVG(rep *Report, b timeBase) svgPlot {
	s := rep.Series
	win := s.ShortfallWindow.Seconds()
	var panels []stratPanel
	for _, name := range b.others {
		w, ok := s.Shortfall[name]
		if !ok {
			continue
		}
		panels = append(panels, stratPanel{name: name, title: name, sums: shortfallSummary(rep, name, w),
			vals: floats(w), empty: "no windows", flat: "no shortfall in any window"})
	}
	return panelGrid(rep, b, "shortfall", "Shortfall per "+seconds(win)+" window, by strategy",
		"shortfall, tokens per "+seconds(win)+" window", win, panels)
}

// summarySVG draws two bar panels side by side, one bar per strategy other
// than central: excess admitted and false rejections, each in its own unit.
func summarySVG(rep *Report) svgPlot {
	centralAdmitted := 0
	var rs []Result
	for _, r := range rep.Results {
		if r.Strategy == "central" {
			centralAdmitted = r.Admitted
		} else {
			rs = append(rs, r)
		}
	}
	const rowH, top, bottom = 24.0, 34.0, 46.0
	h := top + bottom + rowH*float64(max(len(rs), 1))
	p := svgPlot{Name: "summary", Label: "Excess admitted and false rejections by strategy", W: svgWidth, H: h}
	panels := []struct {
		title, unit string
		val         func(Result) float64
	}{
		{"Excess admitted (over-admission)", "% of central's admitted tokens", func(r Result) float64 { return r.ExcessAdmittedPct }},
		{"False rejections (over-rejection)", "% of the requests central admitted", func(r Result) float64 { return falseRejectionsPct(r, centralAdmitted) }},
	}
	panelW := float64(svgWidth) / float64(len(panels))
	for i, pn := range panels {
		x0 := float64(i) * panelW
		vmax := 0.0
		for _, r := range rs {
			vmax = max(vmax, pn.val(r))
		}
		xt, xlo, xhi := niceTicks(0, max(vmax, 0.1), 5, false)
		f := frame{x: x0 + 100, y: top, w: panelW - 100 - 60, h: h - top - bottom, xmin: xlo, xmax: xhi, ymin: 0, ymax: 1}
		p.Els = append(p.Els, svgEl{Tag: "text", X: f.x, Y: 20, Size: 14, Bold: true, Fill: "#1A1A1A", Text: pn.title})
		p.Els = append(p.Els, axes(f, xt, nil, pn.unit, "")...)
		if len(rs) == 0 {
			p.Els = append(p.Els, noData(f, "no strategy besides central was run"))
			continue
		}
		for j, r := range rs {
			v := pn.val(r)
			y := f.y + rowH*float64(j)
			col := strategyColor(r.Strategy)
			label := strconv.FormatFloat(v, 'f', 2, 64)
			p.Els = append(p.Els,
				svgEl{Tag: "text", X: f.x - 8, Y: y + rowH/2 + 4, Anchor: "end", Size: 12, Fill: "#1A1A1A", Text: r.Strategy},
				svgEl{Tag: "rect", X: f.x, Y: y + 4, W: f.px(v) - f.x, H: rowH - 8, Fill: col, Strategy: r.Strategy, Tip: r.Strategy + ": " + label + " " + pn.unit},
				svgEl{Tag: "text", X: f.px(v) + 5, Y: y + rowH/2 + 4, Size: 11, Fill: svgAxis, Text: label})
		}
	}
	return p
}
