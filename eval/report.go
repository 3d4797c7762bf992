package eval

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
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

// metricDefs returns the legend of the results table, in column order;
// undecided only when that column is shown.
func metricDefs(undecided, shortfall bool) []metricDef {
	defs := []metricDef{
		{"precision", "rejections / central's rejections (thesis 002 §5.1.1); 1 = as many as central, n/a = central rejected nothing"},
		{"excess %", "tokens admitted beyond central's, summed per key, as % of central's admitted tokens (over-admission)"},
		{"false rej.", "requests rejected that central admitted (over-rejection)"},
		{"envelope viol.", "largest excess, in tokens, of one key's admissions in any interval T over b + r*T (0 = within the (r, b) envelope)"},
		{"msgs, bytes", "peer messages sent (lost ones included) and their payload bytes; bytes in SI units (1 kB = 1000 B)"},
		{"state peak", "largest limiter state of any node, in bytes"},
		{"p50/p99 ms", "decision latency percentiles: decision time minus arrival, in simulated milliseconds"},
		{"local %", "requests decided without waiting for a peer (by the receiving node, at once or at its own wake-up), as % of all"},
		{"B/req", "peer payload bytes per request"},
	}
	if undecided {
		defs = append(defs, metricDef{"undecided", "requests never decided by the end of the run (counted as rejected)"})
	}
	if shortfall {
		defs = append(defs, metricDef{"shortfall %", "per key and per window (setup's shortfall window), the tokens central admitted beyond the strategy's, summed, as % of central's admitted tokens: how many tokens were refused, not which requests (an overloaded key's false rejections count the requests that lost the race to the ones admitted instead)"})
	}
	return defs
}

// resultTable returns the results table's header and rows, one per result
// in rep.Results order, as display strings. The undecided column is present
// only if some result has undecided requests.
func resultTable(rep *Report) (header []string, rows [][]string, undecided, shortfall bool) {
	for _, r := range rep.Results {
		if r.Undecided > 0 {
			undecided = true
		}
		if r.ShortfallPct != nil {
			shortfall = true
		}
	}
	header = []string{"strategy", "admitted", "rejected", "precision", "excess %", "false rej.",
		"envelope viol.", "msgs", "bytes", "state peak", "p50 ms", "p99 ms", "local %", "B/req"}
	if undecided {
		header = append(header, "undecided")
	}
	if shortfall {
		header = append(header, "shortfall %")
	}
	for _, r := range rep.Results {
		prec := "n/a"
		if r.Precision != nil {
			prec = strconv.FormatFloat(*r.Precision, 'f', 3, 64)
		}
		row := []string{
			r.Strategy,
			strconv.Itoa(r.Admitted),
			strconv.Itoa(r.Rejected),
			prec,
			strconv.FormatFloat(r.ExcessAdmittedPct, 'f', 2, 64),
			strconv.Itoa(r.FalseRejections),
			strconv.FormatFloat(r.EnvelopeViolationTokens, 'f', 2, 64),
			strconv.FormatInt(r.Messages, 10),
			humanBytes(r.Bytes),
			humanBytes(int64(r.StateBytesPeak)),
			strconv.FormatFloat(r.DecisionLatencyP50Ms, 'f', 3, 64),
			strconv.FormatFloat(r.DecisionLatencyP99Ms, 'f', 3, 64),
			strconv.FormatFloat(r.LocalDecisionPct, 'f', 2, 64),
			strconv.FormatFloat(r.BytesPerRequest, 'f', 1, 64),
		}
		if undecided {
			row = append(row, strconv.Itoa(r.Undecided))
		}
		if shortfall {
			cell := ""
			if r.ShortfallPct != nil {
				cell = strconv.FormatFloat(*r.ShortfallPct, 'f', 2, 64)
			}
			row = append(row, cell)
		}
		rows = append(rows, row)
	}
	return header, rows, undecided, shortfall
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
	return append(f, [2]string{"seed", strconv.FormatUint(s.Seed, 10)})
}

// reportNotes are the notes every report carries: the assignment policy
// and whom it flatters, then what each precision other than 1 means.
func reportNotes(rep *Report) []string {
	return append([]string{AssignNote(rep.Setup.Assign, rep.ColocatedPct)}, PrecisionNotes(rep)...)
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

// WriteTable writes rep as a fixed-width text table for the terminal: two
// header lines naming the input and the cluster setup, one row per strategy
// in rep.Results order with right-aligned numbers, then a legend of the
// metrics that aren't self-explanatory.
func WriteTable(w io.Writer, rep *Report) error {
	if rep == nil {
		return errNilReport
	}
	bw := bufio.NewWriter(w)
	in := inputFacts(rep.Input)
	fmt.Fprintf(bw, "input: %s (%s)\n", in[0][1], joinFacts(in[1:]))
	fmt.Fprintf(bw, "setup: %s\n\n", joinFacts(setupFacts(rep.Setup)))

	header, rows, undecided, shortfall := resultTable(rep)
	if err := writeAligned(bw, header, rows); err != nil {
		return err
	}
	fmt.Fprintln(bw)
	for _, d := range metricDefs(undecided, shortfall) {
		fmt.Fprintf(bw, "  %-15s %s\n", d.term, d.text)
	}
	if wh, wr := waitTable(rep); len(wr) > 0 {
		fmt.Fprintln(bw)
		if err := writeAligned(bw, wh, wr); err != nil {
			return err
		}
		fmt.Fprintf(bw, "\n  %s\n", waitLegend)
	}
	fmt.Fprintln(bw)
	for _, n := range reportNotes(rep) {
		fmt.Fprintf(bw, "note: %s\n", n)
	}
	if rep.Recommendation != nil {
		fmt.Fprintln(bw, rep.Recommendation.Line)
	}
	return bw.Flush()
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
}

// WriteMarkdown writes rep as a Markdown report: a title, the input and setup
// as a table, the results table (WriteTable's columns), the metric
// definitions, and an image link to each file of plots (names relative to
// the report, as WritePlots returns them).
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

	header, rows, undecided, shortfall := resultTable(rep)
	fmt.Fprint(bw, "\n## Results\n\n")
	fmt.Fprintf(bw, "| %s |\n|:--", strings.Join(header, " | "))
	for range header[1:] {
		fmt.Fprint(bw, "|--:")
	}
	fmt.Fprintln(bw, "|")
	for _, row := range rows {
		cells := make([]string, len(row))
		for i, c := range row {
			cells[i] = mdEscape(c)
		}
		fmt.Fprintf(bw, "| %s |\n", strings.Join(cells, " | "))
	}
	if len(rows) == 0 {
		fmt.Fprint(bw, "\nNo strategy was run.\n")
	}

	fmt.Fprint(bw, "\n## Metrics\n\n")
	fmt.Fprintln(bw, "Central is the exact, centralized token bucket every other strategy is compared with.")
	fmt.Fprintln(bw)
	for _, d := range metricDefs(undecided, shortfall) {
		fmt.Fprintf(bw, "- **%s**: %s\n", d.term, d.text)
	}

	if wh, wr := waitTable(rep); len(wr) > 0 {
		fmt.Fprint(bw, "\n## Waiting time\n\n")
		fmt.Fprintf(bw, "| %s |\n|:--", strings.Join(wh, " | "))
		for range wh[1:] {
			fmt.Fprint(bw, "|--:")
		}
		fmt.Fprintln(bw, "|")
		for _, row := range wr {
			fmt.Fprintf(bw, "| %s |\n", strings.Join(row, " | "))
		}
		fmt.Fprintf(bw, "\n%s.\n", waitLegend)
	}

	fmt.Fprint(bw, "\n## Notes\n\n")
	for _, n := range reportNotes(rep) {
		fmt.Fprintf(bw, "- %s\n", n)
	}
	if rep.Recommendation != nil {
		fmt.Fprintf(bw, "\n## Recommendation\n\n%s\n", rep.Recommendation.Line)
	}

	if len(plots) > 0 {
		fmt.Fprint(bw, "\n## Plots\n")
		for _, name := range plots {
			caption, ok := plotCaptions[filepath.Base(name)]
			if !ok {
				caption = filepath.Base(name)
			}
			link := filepath.ToSlash(name)
			if strings.ContainsAny(link, " ()<>") {
				link = "<" + link + ">"
			}
			fmt.Fprintf(bw, "\n![%s](%s)\n", caption, link)
		}
	}
	return bw.Flush()
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

// WriteAll creates dir if needed and writes into it report.json, report.md
// and the plots of WritePlots (which report.md links). Errors name the file.
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
	return writeFile(filepath.Join(dir, "report.md"), func(w io.Writer) error { return WriteMarkdown(w, rep, plots) })
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
