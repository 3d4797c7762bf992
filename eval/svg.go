package eval

import (
	"math"
	"strconv"
	"strings"
)

// This file draws report.html's plots as inline SVG (ours): geometry is
// computed here into a list of elements (svgEl), and html.go's template
// writes them, escaping every string. Plot sizes are in SVG user units,
// scaled by the page to its width (viewBox), so 1 unit is about 1 CSS
// pixel on a 1280 px wide window. Every number is rounded to one
// decimal, so that equal reports give equal bytes.

// svgWidth is the width of every plot, in SVG units.
const svgWidth = 1160

// Colours of report.html's plots besides the strategies'
// (strategyColor).
const (
	svgGrey      = "#BBBBBB" // all requests
	svgGrid      = "#E6E6E6"
	svgAxis      = "#444444"
	svgFaultFill = "#000000" // shaded at svgFaultOpacity
	svgFaultLine = "#333333"
)

const svgFaultOpacity = 0.08

// svgEl is one element of a plot: a rect, line, path or text (Tag).
type svgEl struct {
	Tag string
	// rect: corner and size; line: from (X, Y) to (X2, Y2); text: its
	// anchor point.
	X, Y, W, H, X2, Y2 float64
	D                  string // path data
	Fill, Stroke       string
	StrokeWidth        float64
	FillOpacity        float64 // 0: opaque
	Dash               string  // stroke-dasharray
	Anchor             string  // text-anchor: start (""), middle or end
	Size               float64 // font size
	Bold, Rotate       bool    // Rotate: -90 degrees about (X, Y)
	Text               string
	Tip                string // tooltip (a <title> child)
	Strategy           string // data-strategy: the strategy it draws
	Class              string // data-role, e.g. "fault-label"
}

// svgPlot is one plot of report.html: one <svg> element.
type svgPlot struct {
	Name  string // data-plot
	Label string // its accessible name and tooltip
	W, H  float64
	Els   []svgEl
}

// svgNum formats v for an SVG attribute: rounded to one decimal, as few
// digits as needed, no negative zero.
func svgNum(v float64) string { return svgRound(v, 1) }

// svgOpacity formats an opacity, rounded to two decimals.
func svgOpacity(v float64) string { return svgRound(v, 2) }

func svgRound(v float64, places int) string {
	s := strconv.FormatFloat(round(v, places), 'f', -1, 64)
	if s == "-0" {
		return "0"
	}
	return s
}

// frame maps data coordinates to a plot's data area: (x, y) its top left
// corner and w, h its size, in SVG units; [xmin, xmax] and [ymin, ymax]
// the data shown.
type frame struct {
	x, y, w, h             float64
	xmin, xmax, ymin, ymax float64
}

func (f frame) px(v float64) float64 { return f.x + (v-f.xmin)/(f.xmax-f.xmin)*f.w }
func (f frame) py(v float64) float64 { return f.y + f.h - (v-f.ymin)/(f.ymax-f.ymin)*f.h }

// tick is an axis mark at a data value, with its label.
type tick struct {
	v     float64
	label string
}

// niceTicks covers [lo, hi] with at most about n intervals of a round step
// (1, 2 or 5 times a power of ten; at least 1 if whole, for counts) and
// returns the ticks and the covered range, which starts and ends on a
// tick. hi <= lo is widened to a unit.
func niceTicks(lo, hi float64, n int, whole bool) (ticks []tick, from, to float64) {
	if !(hi > lo) {
		lo, hi = math.Floor(lo), math.Floor(lo)+1
	}
	raw := (hi - lo) / float64(n)
	if whole {
		raw = max(raw, 1)
	}
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	first, last := math.Floor(lo/step+1e-9), math.Ceil(hi/step-1e-9)
	for i := first; i <= last; i++ {
		v := i * step
		ticks = append(ticks, tick{v, num(round(v, 6))})
	}
	return ticks, first * step, last * step
}

// timeTicks are clock ticks (clockTicks) on [0, end] seconds.
func timeTicks(end float64) []tick {
	var out []tick
	for _, t := range (clockTicks{}).Ticks(0, end) {
		out = append(out, tick{t.Value, t.Label})
	}
	return out
}

// axes draws f's grid lines and tick labels, its frame, a zero line when 0
// lies inside the y range, and the axis labels: xLabel under the x ticks,
// yLabel rotated left of the y ticks.
func axes(f frame, xt, yt []tick, xLabel, yLabel string) []svgEl {
	var els []svgEl
	for _, t := range xt {
		x := f.px(t.v)
		els = append(els, svgEl{Tag: "line", X: x, Y: f.y, X2: x, Y2: f.y + f.h, Stroke: svgGrid, StrokeWidth: 1},
			svgEl{Tag: "text", X: x, Y: f.y + f.h + 15, Anchor: "middle", Size: 11, Fill: svgAxis, Text: t.label})
	}
	for _, t := range yt {
		y := f.py(t.v)
		els = append(els, svgEl{Tag: "line", X: f.x, Y: y, X2: f.x + f.w, Y2: y, Stroke: svgGrid, StrokeWidth: 1},
			svgEl{Tag: "text", X: f.x - 6, Y: y + 4, Anchor: "end", Size: 11, Fill: svgAxis, Text: t.label})
	}
	if f.ymin < 0 && f.ymax > 0 {
		y := f.py(0)
		els = append(els, svgEl{Tag: "line", X: f.x, Y: y, X2: f.x + f.w, Y2: y, Stroke: svgAxis, StrokeWidth: 1})
	}
	els = append(els, svgEl{Tag: "rect", X: f.x, Y: f.y, W: f.w, H: f.h, Fill: "none", Stroke: svgAxis, StrokeWidth: 1})
	if xLabel != "" {
		els = append(els, svgEl{Tag: "text", X: f.x + f.w/2, Y: f.y + f.h + 32, Anchor: "middle", Size: 12, Fill: svgAxis, Text: xLabel, Class: "axis-label"})
	}
	if yLabel != "" {
		yw := 0
		for _, t := range yt {
			yw = max(yw, len(t.label))
		}
		els = append(els, svgEl{Tag: "text", X: f.x - 16 - 6.5*float64(yw), Y: f.y + f.h/2, Anchor: "middle", Size: 12, Fill: svgAxis, Rotate: true, Text: yLabel, Class: "axis-label"})
	}
	return els
}

// faultLabel is a fault event's label: its line's x and its text's left
// edge, width and row above the data area (0 nearest it).
type faultLabel struct {
	ev         Fault
	text       string
	x, left, w float64
	row        int
}

// faultLabelH is the height of a row of fault labels, faultCharW about
// the width of one of their characters.
const faultLabelH, faultCharW = 14, 6

// shorten cuts s to n characters, the last an ellipsis, if it is longer.
func shorten(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// faultLabels places a label for every event of faults within [0, end]
// seconds since origin over f's x axis: right of its line, or left where
// it would pass f's right edge; a label that would overlap one before it
// goes a row further up. rows is the number of rows used.
func faultLabels(f frame, faults []Fault, origin, end float64) (labels []faultLabel, rows int) {
	var rowEnd []float64 // per row, where its last label ends
	for _, ev := range faults {
		at := ev.AtSec - origin
		if at < 0 || at > end {
			continue
		}
		l := faultLabel{ev: ev, x: f.px(at), left: f.px(at)}
		// Right of the line, cut to the room up to the right edge; left of
		// it when that leaves fewer than 12 characters.
		chars := min(26, int((f.x+f.w-l.x)/faultCharW)-1)
		if chars < 12 {
			chars = 26
		}
		l.text = shorten(ev.Event, chars)
		l.w = faultCharW*float64(len([]rune(l.text))) + 6
		if l.left+l.w > f.x+f.w {
			l.left = l.x - l.w
		}
		for l.row < len(rowEnd) && rowEnd[l.row] > l.left {
			l.row++
		}
		if l.row == len(rowEnd) {
			rowEnd = append(rowEnd, 0)
		}
		rowEnd[l.row] = l.left + l.w + 4
		labels = append(labels, l)
	}
	return labels, len(rowEnd)
}

// faultLayers draws the scenario's faults on f, whose x axis is seconds
// since origin: back holds the shaded fault windows (faultWindows), front
// for every event within [0, end] a dashed line through the data area up
// to its label (the event, e.g. "crash n1" or "heal", with its time in
// the tooltip), in the rows of faultLabels above f, for which the caller
// leaves room.
func faultLayers(f frame, faults []Fault, origin, end float64) (back, front []svgEl) {
	for _, w := range faultWindows(faults, origin, end) {
		x0, x1 := f.px(w[0]), f.px(w[1])
		back = append(back, svgEl{Tag: "rect", X: x0, Y: f.y, W: x1 - x0, H: f.h, Fill: svgFaultFill, FillOpacity: svgFaultOpacity, Class: "fault-window",
			Tip: "fault window " + seconds(w[0]) + " to " + seconds(w[1]) + " since the trace's start"})
	}
	labels, _ := faultLabels(f, faults, origin, end)
	for _, l := range labels {
		top := f.y - float64(l.row+1)*faultLabelH
		tx, anchor := l.x+3, ""
		if l.left < l.x {
			tx, anchor = l.x-3, "end"
		}
		front = append(front,
			svgEl{Tag: "line", X: l.x, Y: top, X2: l.x, Y2: f.y + f.h, Stroke: svgFaultLine, StrokeWidth: 1, Dash: "4 3"},
			svgEl{Tag: "text", X: tx, Y: top + faultLabelH - 4, Anchor: anchor, Size: 10.5, Fill: svgFaultLine, Text: l.text,
				Tip: l.ev.Event + " at " + seconds(l.ev.AtSec) + " of trace time", Class: "fault-label"})
	}
	return back, front
}

// stepPath is the path of vals per bin of width bin as steps: flat over
// each bin [i*bin, (i+1)*bin). area closes it down to y = 0, to be filled.
func stepPath(f frame, bin float64, vals []float64, area bool) string {
	if len(vals) == 0 {
		return ""
	}
	var b strings.Builder
	if area {
		b.WriteString("M" + svgNum(f.px(0)) + " " + svgNum(f.py(0)) + "V" + svgNum(f.py(vals[0])))
	} else {
		b.WriteString("M" + svgNum(f.px(0)) + " " + svgNum(f.py(vals[0])))
	}
	for i, v := range vals {
		if i > 0 {
			b.WriteString("V" + svgNum(f.py(v)))
		}
		b.WriteString("H" + svgNum(f.px(float64(i+1)*bin)))
	}
	if area {
		b.WriteString("V" + svgNum(f.py(0)) + "Z")
	}
	return b.String()
}

// legendEntry is one line of a plot's legend: a swatch (a line, or a
// filled box if box) in colour and its text.
type legendEntry struct {
	text, color, strategy string
	box                   bool
}

// legend draws entries in a column from (x, y) down.
func legend(x, y float64, entries []legendEntry) []svgEl {
	var els []svgEl
	for i, e := range entries {
		cy := y + 18*float64(i)
		if e.box {
			els = append(els, svgEl{Tag: "rect", X: x, Y: cy - 6, W: 22, H: 12, Fill: e.color, Strategy: e.strategy, Class: "legend"})
		} else {
			els = append(els, svgEl{Tag: "line", X: x, Y: cy, X2: x + 22, Y2: cy, Stroke: e.color, StrokeWidth: 3, Strategy: e.strategy, Class: "legend"})
		}
		els = append(els, svgEl{Tag: "text", X: x + 28, Y: cy + 4, Size: 12, Fill: "#1A1A1A", Text: e.text})
	}
	return els
}
