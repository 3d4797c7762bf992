package archtest

import (
	"context"

	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenmesh/tokenmesh/config"
	"github.com/tokenmesh/tokenmesh/daemon"
	"github.com/tokenmesh/tokenmesh/rlqs"
	"github.com/tokenmesh/tokenmesh/server"
)

// The metrics catalogue: what a running node registers is what docs/API.md
// ("Metrics") and server/metrics.go's list name, label for label. A
// metric the table marks "Only ..." (in its row's meaning, or in the
// paragraph that introduces its table) is registered only under that
// condition: the default node (`tokenmesh serve` with no options) lacks
// it, a node with every option that adds metrics has it.

// metricDoc is one metric as a catalogue names it.
type metricDoc struct {
	labels    []string // sorted
	condition string   // "" when always registered; else what registers it
	line      int      // where the catalogue names it, from 1
}

// catalogue is a set of metrics by name.
type catalogue map[string]metricDoc

// Every metric a default node registers is in docs/API.md's tables, and
// every metric there not marked "Only ..." is registered by it; a node
// with a peer, latency_hint auto and an Envoy config (RLQS) registers
// exactly the whole table. Labels agree too, and so does
// server/metrics.go's list.
func TestMetricsCatalogue(t *testing.T) {
	doc := apiMetrics(t)
	if len(doc) == 0 {
		t.Fatal(`docs/API.md: no metrics table found under "## Metrics"`)
	}
	always := catalogue{}
	for name, m := range doc {
		if m.condition == "" {
			always[name] = m
		}
	}
	t.Run("default node", func(t *testing.T) {
		compare(t, always, registered(t, startNode(t, false)), "a default node (serve with no options)", false)
	})
	t.Run("node with every option", func(t *testing.T) {
		compare(t, doc, registered(t, startNode(t, true)), "a node with a peer, latency_hint auto and an Envoy config", false)
	})
	t.Run("server/metrics.go", func(t *testing.T) {
		compare(t, doc, sourceMetrics(t), "server/metrics.go's list", true)
	})
}

// compare reports every metric of got that doc (docs/API.md's, or its
// unconditional rows) lacks, every one of doc that got lacks, and every
// label set that differs. got is a node's registry, or server/metrics.go's
// list when list is true; gotName says which.
func compare(t *testing.T, doc catalogue, got catalogue, gotName string, list bool) {
	t.Helper()
	for _, name := range slices.Sorted(maps.Keys(got)) {
		d, ok := doc[name]
		switch {
		case !ok && list:
			t.Errorf("server/metrics.go:%d lists %s, which docs/API.md's Metrics tables do not have: add a row there, or remove it from the list", got[name].line, name)
		case !ok:
			t.Errorf("%s registers %s%s, which docs/API.md's Metrics tables do not have: add a row (its meaning starting \"Only with ...:\" if an option registers it)",
				gotName, name, labelText(got[name].labels))
		case !slices.Equal(d.labels, got[name].labels):
			t.Errorf("docs/API.md:%d gives %s the labels %v; %s has %v", d.line, name, d.labels, gotName, got[name].labels)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(doc)) {
		d := doc[name]
		switch _, ok := got[name]; {
		case ok:
		case list:
			t.Errorf("docs/API.md:%d: %s is not in server/metrics.go's list: add it there", d.line, name)
		case d.condition != "":
			t.Errorf("docs/API.md:%d: %s (only %s) is not registered by %s: its condition is wrong, or the metric is gone", d.line, name, d.condition, gotName)
		default:
			t.Errorf("docs/API.md:%d: %s is not registered by %s: remove the row, start its meaning with \"Only with ...:\" naming the option that registers it, or register it", d.line, name, gotName)
		}
	}
}

// labelText is labels as "{a,b}" ("" for none).
func labelText(labels []string) string {
	if len(labels) == 0 {
		return ""
	}
	return "{" + strings.Join(labels, ",") + "}"
}

// startNode starts a daemon on 127.0.0.1 as `tokenmesh serve` does (build
// info set, the RLQS service offered), shut down when the test ends. full
// adds what registers the conditional metrics: a peer listener and gossip
// (networked), node.latency_hint: auto, and an Envoy config directory.
func startNode(t *testing.T, full bool) *daemon.Daemon {
	t.Helper()
	dir := t.TempDir()
	text := "node:\n  name: n1\n  api_addr: 127.0.0.1:0\n  grpc_addr: 127.0.0.1:0\n" +
		"rules:\n  - {name: api, rate: 10/s, burst: 20}\n"
	if full {
		envoyDir := filepath.Join(dir, "envoy")
		if err := os.Mkdir(envoyDir, 0o755); err != nil {
			t.Fatal(err)
		}
		limits := "domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: second, requests_per_unit: 100}\n    tokenmesh: {strategy: quota}\n"
		if err := os.WriteFile(filepath.Join(envoyDir, "edge.yaml"), []byte(limits), 0o644); err != nil {
			t.Fatal(err)
		}
		text = strings.Replace(text, "node:\n", "node:\n  peer_addr: 127.0.0.1:0\n  gossip_addr: 127.0.0.1:0\n  insecure: true\n  latency_hint: auto\n  envoy_config: "+envoyDir+"\n", 1)
	}
	path := filepath.Join(dir, "node.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d, err := daemon.Start(ctx, daemon.Config{File: f, ConfigPath: path, Networked: full,
		BuildInfo: server.BuildInfo{Version: "test"}, Services: []daemon.Service{rlqs.Service()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := d.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return d
}

// descRE parses a prometheus.Desc's String: its name, constant labels
// (name="value",...) and variable labels (name,... ; c(name) when
// constrained).
var descRE = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: "(?:[^"\\]|\\.)*", constLabels: \{(.*)\}, variableLabels: \{(.*)\}\}$`)

// registered is every tokenmesh_ metric d's registry (served at
// /metrics) has a collector for, whether or not it has a series yet,
// with its label names (constant and variable).
func registered(t *testing.T, d *daemon.Daemon) catalogue {
	t.Helper()
	ch := make(chan *prometheus.Desc)
	go func() {
		d.Registry().Describe(ch)
		close(ch)
	}()
	out := catalogue{}
	for desc := range ch {
		m := descRE.FindStringSubmatch(desc.String())
		if m == nil {
			t.Fatalf("cannot read the metric description %s (did client_golang change Desc.String?)", desc)
		}
		name, err := strconv.Unquote(m[1])
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(name, "tokenmesh_") {
			continue // the standard go_* and process_* collectors
		}
		var labels []string
		for _, pair := range strings.Split(m[2], ",") {
			if label, _, _ := strings.Cut(pair, "="); label != "" {
				labels = append(labels, label)
			}
		}
		for _, label := range strings.Split(m[3], ",") {
			if label = strings.TrimSuffix(strings.TrimPrefix(label, "c("), ")"); label != "" {
				labels = append(labels, label)
			}
		}
		slices.Sort(labels)
		out[name] = metricDoc{labels: labels}
	}
	return out
}

// apiMetrics reads the metrics tables of docs/API.md's "## Metrics"
// section: rows | `name` | type | labels | meaning |, labels as "—" or
// "`a`, `b` = `x` \| `y`". A row is conditional when its meaning, or the
// paragraph just before its table, starts with "Only " (the condition is
// the text up to the first colon).
func apiMetrics(t *testing.T) catalogue {
	t.Helper()
	lines := strings.Split(readDoc(t, "docs/API.md"), "\n")
	start := slices.Index(lines, "## Metrics")
	if start < 0 {
		t.Fatal(`docs/API.md has no "## Metrics" section`)
	}
	out := catalogue{}
	para, intro := "", "" // the paragraph being read; the last one before a blank line
	tableCondition := ""  // of the table being read
	inTable := false
	for i := start + 1; i < len(lines) && !strings.HasPrefix(lines[i], "## "); i++ {
		line := strings.TrimSpace(lines[i])
		switch {
		case strings.HasPrefix(line, "|"):
			if !inTable {
				inTable = true
				if para == "" {
					para = intro
				}
				tableCondition, para = condition(para), ""
			}
			cells := tableCells(line)
			if len(cells) != 4 || !strings.HasPrefix(cells[0], "`tokenmesh_") {
				continue // the header, its rule, or another table
			}
			name := strings.Trim(cells[0], "`")
			if _, dup := out[name]; dup {
				t.Errorf("docs/API.md:%d: %s is in the tables twice", i+1, name)
			}
			m := metricDoc{labels: docLabels(cells[2]), condition: tableCondition, line: i + 1}
			if c := condition(cells[3]); c != "" {
				m.condition = c
			}
			out[name] = m
		case line == "":
			if para != "" {
				intro, para = para, ""
			}
			if inTable {
				inTable, intro = false, ""
			}
		default:
			para = strings.TrimSpace(para + " " + line)
			inTable = false
		}
	}
	return out
}

// condition is the condition of a text that starts with "Only ", up to
// its first colon ("" for any other text).
func condition(text string) string {
	rest, ok := strings.CutPrefix(text, "Only ")
	if !ok {
		return ""
	}
	c, _, _ := strings.Cut(rest, ":")
	return c
}

// tableCells splits a Markdown table row on its unescaped pipes.
func tableCells(row string) []string {
	row = strings.TrimSuffix(strings.TrimPrefix(row, "|"), "|")
	var cells []string
	cell := strings.Builder{}
	for i := 0; i < len(row); i++ {
		switch {
		case row[i] == '\\' && i+1 < len(row) && row[i+1] == '|':
			cell.WriteByte('|')
			i++
		case row[i] == '|':
			cells = append(cells, strings.TrimSpace(cell.String()))
			cell.Reset()
		default:
			cell.WriteByte(row[i])
		}
	}
	return append(cells, strings.TrimSpace(cell.String()))
}

// docLabels reads a labels cell: each comma-separated part's first
// backquoted name ("`result` = `allowed` | ..." is result); "—": none.
func docLabels(cell string) []string {
	var labels []string
	for _, part := range strings.Split(cell, ",") {
		if _, rest, ok := strings.Cut(part, "`"); ok {
			label, _, _ := strings.Cut(rest, "`")
			labels = append(labels, label)
		}
	}
	slices.Sort(labels)
	return labels
}

// sourceListRE is a metric of server/metrics.go's list: a comment line
// "//<tab>tokenmesh_name{label,...}  what it is".
var sourceListRE = regexp.MustCompile(`^//\t(tokenmesh_\w+)(?:\{([\w,]*)\})?\s`)

// sourceMetrics reads server/metrics.go's list of the metrics at
// /metrics (its comment lines "//\ttokenmesh_...").
func sourceMetrics(t *testing.T) catalogue {
	t.Helper()
	out := catalogue{}
	for i, line := range strings.Split(readDoc(t, "server/metrics.go"), "\n") {
		m := sourceListRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var labels []string
		if m[2] != "" {
			labels = strings.Split(m[2], ",")
		}
		slices.Sort(labels)
		if _, dup := out[m[1]]; dup {
			t.Errorf("server/metrics.go:%d lists %s twice", i+1, m[1])
		}
		out[m[1]] = metricDoc{labels: labels, line: i + 1}
	}
	return out
}
