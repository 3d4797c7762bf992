package eval

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// This file renders a Report for people: a fixed-width table for the
// terminal (WriteTable), a Markdown report (WriteMarkdown), the JSON the
// `--json` output promises (WriteJSON), and all of them plus the plots of
// plot.go into one directory (WriteAll). Every output depends only on the
// Report, so equal reports render to equal bytes.

var errNilReport = errors.New("eval: nil report")

// metricDef explains one column that isn't self-explanatory.
type metricDef struct{ term, text string }

// metricDefs returns the legend of rep's results table, in column order;
// undecided and shortfall only when those columns are shown. A live
// report's (Setup.Latency LiveLatency, tokenmesh replay) latencies were
// measured, not simulated, and it says so; "n/a" is explained when some
// cell is not measured.
func metricDefs(rep *Report, undecided, shortfall bool) []metricDef {
	live := rep.Setup.Latency == LiveLatency
	latency := metricDef{"p50/p99 ms", "decision latency percentiles: decision time minus arrival, in simulated milliseconds"}
	costs := metricDef{"msgs, bytes", "peer messages sent (lost ones included) and their payload bytes; bytes in SI units (1 kB = 1000 B)"}
	if live {
		latency.text = "decision latency percentiles, measured: the client's gRPC Check round trip on the live cluster, in wall milliseconds"
		costs.text = "peer messages and their payload bytes, as the live nodes counted them (/metrics); bytes in SI units (1 kB = 1000 B)"
	}
	defs := []metricDef{
		{"precision", "rejections / central's rejections (thesis 002 §5.1.1); 1 = as many as central, n/a = central rejected nothing"},
		{"excess %", "tokens admitted beyond central's, summed per key, as % of central's admitted tokens (over-admission)"},
		{"false rej.", "requests rejected that central admitted (over-rejection)"},
		{"envelope viol.", "largest excess, in tokens, of one key's admissions in any interval T over b + r*T (0 = within the (r, b) envelope)"},
		costs,
		{"state peak", "largest limiter state of any node, in bytes"},
		latency,
		{"local %", "requests decided without waiting for a peer (by the receiving node, at once or at its own wake-up), as % of all"},
		{"B/req", "peer payload bytes per request"},
	}
	if rep.Setup.Proxies != nil {
		defs = append(defs[:len(defs)-2], proxyDefs...) // local % and B/req, then the proxy columns
	}
	if rep.Setup.Topology != nil {
		defs = append(defs, regionDefs...)
	}
	if hasHotServer(rep) {
		defs = append(defs, metricDef{"hot srv", "the hot-server measure (the throttling article's \"hot server\"): max over nodes of the requests a node decided / mean over nodes; a forwarded request counts at the node whose verdict decided it; 1 = even, N = one node of N decided everything"})
	}
	if undecided {
		defs = append(defs, metricDef{"undecided", "requests never decided by the end of the run (counted as rejected)"})
	}
	if shortfall {
		defs = append(defs, metricDef{"shortfall %", "per key and per window (setup's shortfall window), the tokens central admitted beyond the strategy's, summed, as % of central's admitted tokens: how many tokens were refused, not which requests (an overloaded key's false rejections count the requests that lost the race to the ones admitted instead)"},
			metricDef{"after birth %", "shortfall % with each key's first window left out, as % of central's admitted tokens in the windows it counts (JSON shortfall_after_birth_pct): the steady part, which a longer run does not dilute; a strategy that holds tokens away from where they are used (leases, stocks, tokens in flight) is short of them once, when a new key's burst runs out"})
	}
	if na, ok := notMeasuredDef(rep, undecided, shortfall, live); ok {
		defs = append(defs, na)
	}
	return defs
}

// notMeasuredDef is the legend's "n/a" entry: the columns of the results
// table (undecided and shortfall only when shown) some strategy did not
// measure, each with those strategies, consecutive columns of the same
// strategies together; live (a replay) says why. ok is false when every
// cell is measured.
func notMeasuredDef(rep *Report, undecided, shortfall, live bool) (def metricDef, ok bool) {
	var parts []string
	var cols []string
	var prev string
	flush := func() {
		if len(cols) > 0 {
			parts = append(parts, strings.Join(cols, ", ")+" of "+prev)
		}
		cols = nil
	}
	for _, c := range resultColumns(undecided, shortfall, rep.Setup.Proxies != nil, rep.Setup.Topology != nil, hasHotServer(rep)) {
		var who []string
		for _, r := range rep.Results {
			if c.json != "" && slices.Contains(r.NotMeasured, c.json) {
				who = append(who, r.Strategy)
			}
		}
		if len(who) == 0 {
			continue
		}
		if w := strings.Join(who, ", "); w != prev {
			flush()
			prev = w
		}
		cols = append(cols, c.header)
	}
	flush()
	if len(parts) == 0 {
		return metricDef{}, false
	}
	why := ""
	if live {
		why = " (a replay computes central from the trace, and a client cannot see which decisions a node took without a peer)"
	}
	return metricDef{"n/a", "not measured: " + strings.Join(parts, "; ") + why + "; 0 in the JSON, which lists them in not_measured"}, true
}

// column is one column of the results table: its header, the JSON name of
// the metric it shows ("" for none: the strategy's name), its group (the
// terminal table wraps between groups: accuracy, then cost) and its cell.
type column struct {
	header, json string
	group        int
	cell         func(Result) string
}

// resultColumns are the results table's columns, in order; the undecided,
// shortfall, proxy, region and hot-server columns only when asked for.
func resultColumns(undecided, shortfall, proxies, regions, hot bool) []column {
	f := func(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }
	cols := []column{
		{"strategy", "", 0, func(r Result) string { return r.Strategy }},
		{"admitted", "admitted", 1, func(r Result) string { return strconv.Itoa(r.Admitted) }},
		{"rejected", "rejected", 1, func(r Result) string { return strconv.Itoa(r.Rejected) }},
		{"precision", "precision", 1, func(r Result) string {
			if r.Precision == nil {
				return "n/a"
			}
			return f(*r.Precision, 3)
		}},
		{"excess %", "excess_admitted_pct", 1, func(r Result) string { return f(r.ExcessAdmittedPct, 2) }},
		{"false rej.", "false_rejections", 1, func(r Result) string { return strconv.Itoa(r.FalseRejections) }},
		{"envelope viol.", "envelope_violation_tokens", 1, func(r Result) string { return f(r.EnvelopeViolationTokens, 2) }},
		{"msgs", "messages", 2, func(r Result) string { return strconv.FormatInt(r.Messages, 10) }},
		{"bytes", "bytes", 2, func(r Result) string { return humanBytes(r.Bytes) }},
		{"state peak", "state_bytes_peak", 2, func(r Result) string { return humanBytes(int64(r.StateBytesPeak)) }},
		{"p50 ms", "decision_latency_p50_ms", 2, func(r Result) string { return f(r.DecisionLatencyP50Ms, 3) }},
		{"p99 ms", "decision_latency_p99_ms", 2, func(r Result) string { return f(r.DecisionLatencyP99Ms, 3) }},
		{"local %", "local_decision_pct", 2, func(r Result) string { return f(r.LocalDecisionPct, 2) }},
		{"B/req", "bytes_per_request", 2, func(r Result) string { return f(r.BytesPerRequest, 1) }},
	}
	if proxies {
		cols = append(cols, proxyColumns()...)
	}
	if regions {
		cols = append(cols, regionColumns()...)
	}
	if hot {
		cols = append(cols, column{"hot srv", "hot_server", 2, func(r Result) string {
			if r.HotServer == nil {
				return ""
			}
			return f(r.HotServer.MaxOverMean, 2)
		}})
	}
	if undecided {
		cols = append(cols, column{"undecided", "undecided", 1, func(r Result) string { return strconv.Itoa(r.Undecided) }})
	}
	if shortfall {
		cols = append(cols, column{"shortfall %", "shortfall_pct", 1, func(r Result) string {
			if r.ShortfallPct == nil {
				return ""
			}
			return f(*r.ShortfallPct, 2)
		}}, column{"after birth %", "shortfall_after_birth_pct", 1, func(r Result) string {
			if r.ShortfallAfterBirthPct == nil {
				return ""
			}
			return f(*r.ShortfallAfterBirthPct, 2)
		}})
	}
	return cols
}

// resultTable returns the results table's header, rows (one per result in
// rep.Results order, as display strings; "n/a" for a metric the result
// did not measure, Result.NotMeasured) and column groups. The undecided
// column is present only if some result has undecided requests, the
// shortfall column only if some result has a shortfall.
func resultTable(rep *Report) (header []string, rows [][]string, groups []int, undecided, shortfall bool) {
	for _, r := range rep.Results {
		if r.Undecided > 0 {
			undecided = true
		}
		if r.ShortfallPct != nil {
			shortfall = true
		}
	}
	cols := resultColumns(undecided, shortfall, rep.Setup.Proxies != nil, rep.Setup.Topology != nil, hasHotServer(rep))
	for _, c := range cols {
		header = append(header, c.header)
		groups = append(groups, c.group)
	}
	for _, r := range rep.Results {
		row := make([]string, len(cols))
		for i, c := range cols {
			if c.json != "" && slices.Contains(r.NotMeasured, c.json) {
				row[i] = "n/a"
			} else {
				row[i] = c.cell(r)
			}
		}
		rows = append(rows, row)
	}
	return header, rows, groups, undecided, shortfall
}

// humanBytes formats n bytes with SI prefixes: "999 B", "12.3 kB", "4.5 MB".
func humanBytes(n int64) string {
	if n < 0 {
		return "-" + humanBytes(-n)
	}
	if n < 1000 {
		return strconv.FormatInt(n, 10) + " B"
	}
	units := []string{"kB", "MB", "GB", "TB", "PB", "EB"}
	v, i := float64(n)/1000, 0
	// Move up a unit when one decimal would round to 1000.0.
	for v >= 999.95 && i < len(units)-1 {
		v /= 1000
		i++
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + units[i]
}

// num formats v with as few digits as needed ("10", "0.5").
func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// pct formats a probability as a percentage ("0.1" -> "10%").
func pct(p float64) string { return num(round(100*p, 4)) + "%" }

func inputName(in Input) string {
	if in.Name == "" {
		return "(unnamed)"
	}
	return in.Name
}

// inputFacts and setupFacts are the header's name/value pairs, in display
// order; optional ones appear only when set.
func inputFacts(in Input) [][2]string {
	f := [][2]string{
		{"input", inputName(in)},
		{"requests", strconv.Itoa(in.Requests)},
		{"keys", strconv.Itoa(in.Keys)},
		{"span", num(round(in.SpanSec, 3)) + " s"},
	}
	if in.Skipped > 0 {
		f = append(f, [2]string{"skipped lines", strconv.Itoa(in.Skipped)})
	}
	return f
}

func setupFacts(s Setup) [][2]string {
	f := [][2]string{
		{"nodes", strconv.Itoa(s.Nodes)},
		{"rate", num(s.RatePerSec) + " tokens/s"},
		{"burst", strconv.FormatInt(s.Burst, 10)},
		{"assign", s.Assign},
		{"latency", s.Latency},
		{"loss", pct(s.Loss)},
	}
	if s.Duplicate > 0 {
		f = append(f, [2]string{"duplicate", pct(s.Duplicate)})
	}
	if s.Reorder > 0 {
		f = append(f, [2]string{"reorder", pct(s.Reorder)})
	}
	if s.Scenario != "" {
		f = append(f, [2]string{"scenario", s.Scenario})
	}
	if len(s.Faults) > 0 {
		ev := make([]string, len(s.Faults))
		for i, x := range s.Faults {
			ev[i] = x.Event + " at " + num(x.AtSec) + " s"
		}
		f = append(f, [2]string{"faults", strings.Join(ev, "; ")}, [2]string{"membership", s.Detection})
	}
	if s.MaxWaitMs > 0 {
		f = append(f, [2]string{"max wait", num(s.MaxWaitMs) + " ms (waiting mode, 000 §5.2)"})
	}
	if s.ShortfallWindowS > 0 {
		f = append(f, [2]string{"shortfall window", num(s.ShortfallWindowS) + " s"})
	}
	if s.Proxies != nil {
		f = append(f, proxyFact(s.Proxies))
	}
	if s.Topology != nil {
		f = append(f, regionFact(s.Topology))
	}
	return append(f, [2]string{"seed", strconv.FormatUint(s.Seed, 10)})
}

// reportNotes are the notes every report carries: the assignment policy
// and whom it flatters, then what each precision other than 1 means.
func reportNotes(rep *Report) []string {
	ran := make([]string, len(rep.Results))
	for i, r := range rep.Results {
		ran[i] = r.Strategy
	}
	notes := []string{AssignNote(rep.Setup.Assign, rep.ColocatedPct, ran)}
	if rep.Setup.Proxies != nil {
		notes = append(notes, proxyNote(rep.Setup.Proxies))
	}
	if rep.Setup.Topology != nil {
		notes = append(notes, regionNote(rep.Setup.Topology))
	}
	return append(notes, PrecisionNotes(rep)...)
}

// waitTable returns the waiting time table (waiting mode only): one row
// per result that has a Wait.
func waitTable(rep *Report) (header []string, rows [][]string) {
	header = []string{"strategy", "waiting mode", "waited", "waited %", "mean ms", "p50 ms", "p90 ms", "p99 ms", "max ms"}
	for _, r := range rep.Results {
		if r.Wait == nil {
			continue
		}
		w := r.Wait
		mode := "yes"
		if !w.WaitingMode {
			mode = "no (refuses)"
		}
		rows = append(rows, []string{r.Strategy, mode, strconv.Itoa(w.Waited), strconv.FormatFloat(w.WaitedPct, 'f', 2, 64),
			strconv.FormatFloat(w.MeanMs, 'f', 3, 64), strconv.FormatFloat(w.P50Ms, 'f', 3, 64),
			strconv.FormatFloat(w.P90Ms, 'f', 3, 64), strconv.FormatFloat(w.P99Ms, 'f', 3, 64), strconv.FormatFloat(w.MaxMs, 'f', 3, 64)})
	}
	return header, rows
}

// waitLegend explains the waiting time table.
const waitLegend = "waiting time (the DRL penalty of 000 §2.1): the delay after arrival before an admitted request may proceed, its tokens reserved in arrival order; percentiles over all admitted requests (0 for those admitted at once); strategies without waiting mode refuse instead"

// columnGroups is the group of each of n columns, by group(i), for
// writeTableFit.
func columnGroups(n int, group func(i int) int) []int {
	g := make([]int, n)
	for i := range g {
		g[i] = group(i)
	}
	return g
}

// writeSideTable writes one of the tables after the main one: a blank
// line, the table (cut between its column groups at width, as
// writeTableFit), a blank line and each legend line wrapped and indented.
func writeSideTable(bw *bufio.Writer, header []string, rows [][]string, groups []int, width int, legend ...string) error {
	fmt.Fprintln(bw)
	if err := writeTableFit(bw, header, rows, groups, width); err != nil {
		return err
	}
	fmt.Fprintln(bw)
	for _, l := range legend {
		writeWrapped(bw, "  "+l, width, "  ")
	}
	return nil
}

// writeAligned writes rows under header as a right-aligned text table, the
// first column left-aligned: tabwriter aligns every column the same way,
// so the first column's cells are padded to one width.
func writeAligned(w io.Writer, header []string, rows [][]string) error {
	width := len(header[0])
	for _, row := range rows {
		width = max(width, len(row[0]))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, row := range append([][]string{header}, rows...) {
		fmt.Fprintf(tw, "%-*s\t", width, row[0])
		for _, cell := range row[1:] {
			fmt.Fprint(tw, cell, "\t")
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

func joinFacts(f [][2]string) string {
	parts := make([]string, len(f))
	for i, kv := range f {
		parts[i] = kv[0] + " " + kv[1]
	}
	return strings.Join(parts, ", ")
}

// DefaultWidth is the terminal width WriteTable fits its lines in.
const DefaultWidth = 120

// WriteTable writes rep for the terminal, every line within DefaultWidth
// columns (WriteTableWidth).
func WriteTable(w io.Writer, rep *Report) error { return WriteTableWidth(w, rep, DefaultWidth) }

// WriteTableWidth writes rep as fixed-width text for the terminal: two
// header lines naming the input and the cluster setup, the results table
// (one row per strategy in rep.Results order, right-aligned numbers), a
// legend of the metrics that aren't self-explanatory, the waiting time
// table in waiting mode, the notes, and last the recommendation and the
// commands to run next, when rep has them. Lines are fitted in width
// columns: a table wider than that is cut between its column groups
// (accuracy, then cost) into tables that each repeat the strategy column,
// and text is wrapped (commands with a shell continuation, " \"). width
// <= 0 writes every table and line whole, however wide.
func WriteTableWidth(w io.Writer, rep *Report, width int) error {
	if rep == nil {
		return errNilReport
	}
	bw := bufio.NewWriter(w)
	in := inputFacts(rep.Input)
	writeWrapped(bw, "input: "+in[0][1]+" ("+joinFacts(in[1:])+")", width, "       ")
	writeWrapped(bw, "setup: "+joinFacts(setupFacts(rep.Setup)), width, "       ")
	fmt.Fprintln(bw)

	header, rows, groups, undecided, shortfall := resultTable(rep)
	if err := writeTableFit(bw, header, rows, groups, width); err != nil {
		return err
	}
	fmt.Fprintln(bw)
	for _, d := range metricDefs(rep, undecided, shortfall) {
		writeWrapped(bw, fmt.Sprintf("  %-15s %s", d.term, d.text), width, strings.Repeat(" ", 18))
	}
	if wh, wr := waitTable(rep); len(wr) > 0 {
		legend := []string{waitLegend}
		if err := writeSideTable(bw, wh, wr, columnGroups(len(wh), func(i int) int { return i }), width, append(legend, md1Lines(rep)...)...); err != nil {
			return err
		}
	}
	if hh, hr := holdTable(rep); len(hr) > 0 {
		if err := writeSideTable(bw, hh, hr, columnGroups(len(hh), func(i int) int { return i }), width, holdLegend); err != nil {
			return err
		}
	}
	if ch, cr := convergenceTable(rep); len(cr) > 0 {
		// faults, demand changes and deviation, then cut between them
		groups := columnGroups(len(ch), func(i int) int { return 1 + min(i, 11)/6 })
		if err := writeSideTable(bw, ch, cr, groups, width, convergenceLegend(rep)); err != nil {
			return err
		}
	}
	if jh, jr := jfiTable(rep); len(jr) > 0 {
		// the JFI, after faults, after demand changes
		groups := columnGroups(len(jh), func(i int) int { return 1 + min(i, 9)/4 })
		if err := writeSideTable(bw, jh, jr, groups, width, jfiLegend); err != nil {
			return err
		}
	}
	fmt.Fprintln(bw)
	for _, n := range reportNotes(rep) {
		writeWrapped(bw, "note: "+n, width, "      ")
	}
	if rec := rep.Recommendation; rec != nil {
		writeWrapped(bw, rec.Line, width, "  ")
		for _, st := range rec.Next {
			writeWrapped(bw, "next: "+st.Why, width, "      ")
			writeCommand(bw, st.Command, width)
		}
	}
	return bw.Flush()
}

// writeTableFit writes header and rows (writeAligned) within width
// columns: when the whole table is wider, it is cut into tables that each
// hold the first column and whole column groups (groups[i] is column i's;
// the first column's is ignored), packed in order of first appearance as
// long as they fit; a group that does not fit alone is cut between its
// columns. The tables are separated by a blank line. width <= 0: one
// table.
func writeTableFit(w io.Writer, header []string, rows [][]string, groups []int, width int) error {
	colW := make([]int, len(header))
	for i := range header {
		colW[i] = len(header[i])
		for _, r := range rows {
			colW[i] = max(colW[i], len(r[i]))
		}
	}
	// tabwriter pads every cell, the first too, by 2 on the left.
	total := 0
	for _, cw := range colW {
		total += 2 + cw
	}
	if width <= 0 || total <= width {
		return writeAligned(w, header, rows)
	}
	for i, cols := range fitChunks(colW, groups, width) {
		if i > 0 {
			fmt.Fprintln(w)
		}
		sub := make([][]string, len(rows))
		for j, r := range rows {
			sub[j] = pickColumns(r, cols)
		}
		if err := writeAligned(w, pickColumns(header, cols), sub); err != nil {
			return err
		}
	}
	return nil
}

// fitChunks packs the columns but the first (of widths colW, in groups)
// into chunks that fit width with the first column, as writeTableFit
// says.
func fitChunks(colW, groups []int, width int) [][]int {
	// The groups in order of first appearance, each its columns.
	var order []int
	members := map[int][]int{}
	for i := 1; i < len(colW); i++ {
		g := groups[i]
		if _, seen := members[g]; !seen {
			order = append(order, g)
		}
		members[g] = append(members[g], i)
	}
	pk := &chunkPacker{width: width, first: 2 + colW[0]}
	pk.curW = pk.first
	for _, g := range order {
		gw := 0
		for _, c := range members[g] {
			gw += 2 + colW[c]
		}
		if pk.first+gw <= width {
			pk.add(members[g], gw)
			continue
		}
		for _, c := range members[g] { // too wide alone: column by column
			pk.add([]int{c}, 2+colW[c])
		}
	}
	if len(pk.cur) > 0 {
		pk.chunks = append(pk.chunks, pk.cur)
	}
	return pk.chunks
}

// chunkPacker packs columns into chunks of at most width (first: the
// first column's, in every chunk).
type chunkPacker struct {
	width, first int
	chunks       [][]int
	cur          []int
	curW         int
}

// add adds cols, together wid wide, to the current chunk, or to a new one
// if they do not fit.
func (pk *chunkPacker) add(cols []int, wid int) {
	if len(pk.cur) > 0 && pk.curW+wid > pk.width {
		pk.chunks = append(pk.chunks, pk.cur)
		pk.cur, pk.curW = nil, pk.first
	}
	pk.cur = append(pk.cur, cols...)
	pk.curW += wid
}

// pickColumns is row's first cell and its cells cols.
func pickColumns(row []string, cols []int) []string {
	out := []string{row[0]}
	for _, c := range cols {
		out = append(out, row[c])
	}
	return out
}

// writeWrapped writes text as Wrap's lines.
func writeWrapped(w io.Writer, text string, width int, indent string) {
	for _, l := range Wrap(text, width, indent) {
		fmt.Fprintln(w, l)
	}
}

// Wrap cuts text into lines of at most width columns (bytes) for the
// terminal: at the last space that leaves a line within width (spaces
// inside the line, like a legend's padding, are kept), or at the first
// space after it when a word is longer; the lines after the first start
// with indent. width <= 0: text as one line.
func Wrap(text string, width int, indent string) []string {
	var lines []string
	lead := len(text) - len(strings.TrimLeft(text, " "))
	for width > 0 && len(text) > width {
		cut := strings.LastIndexByte(text[:width+1], ' ')
		if cut <= lead {
			next := strings.IndexByte(text[width:], ' ')
			if next < 0 {
				break
			}
			cut = width + next
		}
		lines = append(lines, strings.TrimRight(text[:cut], " "))
		text = indent + strings.TrimLeft(text[cut:], " ")
		lead = len(indent)
	}
	return append(lines, text)
}

// writeCommand writes a shell command indented by two spaces; wider than
// width, it is continued on lines indented by four, each line but the last
// ending in " \", so that it can be pasted as it is. width <= 0: one line.
func writeCommand(w io.Writer, cmd string, width int) {
	lines := Wrap("  "+cmd, width-2, "    ") // room for " \"
	if width <= 0 {
		lines = []string{"  " + cmd}
	}
	for i, l := range lines {
		if i < len(lines)-1 {
			l += " \\"
		}
		fmt.Fprintln(w, l)
	}
}

// mdEscape makes s safe inside a Markdown table cell.
func mdEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, "|", `\|`, "\n", " ").Replace(s)
}

// plotCaptions describes the plots WritePlots makes.
var plotCaptions = map[string]string{
	"decisions.png": "Rejected requests per time bin: one panel per strategy (colour) against central, the exact reference (black), and all requests (grey); fault windows shaded",
	"admitted.png":  "Admitted requests per time bin: one panel per strategy (colour) against central (black) and all requests (grey); fault windows shaded",
	"summary.png":   "Excess admitted (% of central's admitted tokens) and false rejections (% of requests), by strategy",
	"shortfall.png": "Shortfall per window (--shortfall-window): per strategy, the tokens central admitted beyond it, summed over keys, over time; its total, the first window's part and the after birth % in the panel's title",
}

// WriteMarkdown writes rep as a Markdown report: a title, the input and setup
// as a table, the results table (WriteTable's columns), the metric
// definitions, the notes, an image link to each file of plots (names
// relative to the report, as WritePlots returns them), and last the
// recommendation and the commands to run next, when rep has them.
func WriteMarkdown(w io.Writer, rep *Report, plots []string) error {
	if rep == nil {
		return errNilReport
	}
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "# tokenmesh evaluation: %s\n\n", inputName(rep.Input))

	fmt.Fprint(bw, "## Input and setup\n\n| parameter | value |\n|:--|:--|\n")
	for _, kv := range append(inputFacts(rep.Input), setupFacts(rep.Setup)...) {
		fmt.Fprintf(bw, "| %s | %s |\n", kv[0], mdEscape(kv[1]))
	}

	header, rows, _, undecided, shortfall := resultTable(rep)
	fmt.Fprint(bw, "\n## Results\n\n")
	writeMDTable(bw, header, rows, true)
	if len(rows) == 0 {
		fmt.Fprint(bw, "\nNo strategy was run.\n")
	}

	fmt.Fprint(bw, "\n## Metrics\n\n")
	fmt.Fprintln(bw, "Central is the exact, centralized token bucket every other strategy is compared with.")
	fmt.Fprintln(bw)
	for _, d := range metricDefs(rep, undecided, shortfall) {
		fmt.Fprintf(bw, "- **%s**: %s\n", d.term, d.text)
	}

	if wh, wr := waitTable(rep); len(wr) > 0 {
		fmt.Fprint(bw, "\n## Waiting time\n\n")
		writeMDTable(bw, wh, wr, false)
		fmt.Fprintf(bw, "\n%s.\n", waitLegend)
		for _, l := range md1Lines(rep) {
			fmt.Fprintf(bw, "\n%s\n", l)
		}
	}
	if hh, hr := holdTable(rep); len(hr) > 0 {
		fmt.Fprint(bw, "\n## Permits held\n\n")
		writeMDTable(bw, hh, hr, false)
		fmt.Fprintf(bw, "\n%s.\n", holdLegend)
	}
	if ch, cr := convergenceTable(rep); len(cr) > 0 {
		fmt.Fprint(bw, "\n## Convergence time\n\n")
		writeMDTable(bw, ch, cr, false)
		fmt.Fprintf(bw, "\n%s.\n", convergenceLegend(rep))
	}
	if jh, jr := jfiTable(rep); len(jr) > 0 {
		fmt.Fprint(bw, "\n## Fairness of the performance indicators (JFI)\n\n")
		writeMDTable(bw, jh, jr, false)
		fmt.Fprintf(bw, "\n%s.\n", jfiLegend)
	}

	fmt.Fprint(bw, "\n## Notes\n\n")
	for _, n := range reportNotes(rep) {
		fmt.Fprintf(bw, "- %s\n", n)
	}
	if len(plots) > 0 {
		writeMDPlots(bw, plots)
	}
	if rec := rep.Recommendation; rec != nil {
		fmt.Fprintf(bw, "\n## Recommendation\n\n%s\n", rec.Line)
		for _, st := range rec.Next {
			fmt.Fprintf(bw, "\nNext: %s\n\n```sh\n%s\n```\n", st.Why, st.Command)
		}
	}
	return bw.Flush()
}

// writeMDTable writes a Markdown table, the first column left-aligned and
// the others right-aligned, its cells escaped (mdEscape) if escape.
func writeMDTable(w io.Writer, header []string, rows [][]string, escape bool) {
	fmt.Fprintf(w, "| %s |\n|:--", strings.Join(header, " | "))
	for range header[1:] {
		fmt.Fprint(w, "|--:")
	}
	fmt.Fprintln(w, "|")
	for _, row := range rows {
		cells := row
		if escape {
			cells = make([]string, len(row))
			for i, c := range row {
				cells[i] = mdEscape(c)
			}
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
}

// writeMDPlots writes the Plots section: an image link to each of plots,
// with its caption.
func writeMDPlots(w io.Writer, plots []string) {
	fmt.Fprint(w, "\n## Plots\n")
	for _, name := range plots {
		caption, ok := plotCaptions[filepath.Base(name)]
		if !ok {
			caption = filepath.Base(name)
		}
		link := filepath.ToSlash(name)
		if strings.ContainsAny(link, " ()<>") {
			link = "<" + link + ">"
		}
		fmt.Fprintf(w, "\n![%s](%s)\n", caption, link)
	}
}

// WriteJSON writes rep as JSON indented by two spaces, with a trailing
// newline. The series is not part of it.
func WriteJSON(w io.Writer, rep *Report) error {
	if rep == nil {
		return errNilReport
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// WriteAll creates dir if needed and writes into it report.json, report.md,
// the plots of WritePlots (which report.md links) and report.html
// (WriteHTML, one page with its plots inline). Errors name the file.
func WriteAll(dir string, rep *Report) error {
	if rep == nil {
		return errNilReport
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("eval: creating %s: %w", dir, err)
	}
	plots, err := WritePlots(dir, rep)
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, "report.json"), func(w io.Writer) error { return WriteJSON(w, rep) }); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, "report.md"), func(w io.Writer) error { return WriteMarkdown(w, rep, plots) }); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, "report.html"), func(w io.Writer) error { return WriteHTML(w, rep) })
}

// writeFile creates path and fills it with write; the error names path.
func writeFile(path string, write func(io.Writer) error) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("eval: %w", err) // *PathError: "open <path>: ..."
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("eval: writing %s: %w", path, cerr)
		}
	}()
	bw := bufio.NewWriter(f)
	if err := write(bw); err != nil {
		return fmt.Errorf("eval: writing %s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("eval: writing %s: %w", path, err)
	}
	return nil
}
