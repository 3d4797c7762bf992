package thesis

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/experiment"
	"github.com/tokenmesh/tokenmesh/workload"
)

// limitedKeys returns the keys a central bucket (capacity c, refill
// 0.001c/s) rejects at least once on tr.
func limitedKeys(t *testing.T, tr *workload.Trace, c int, perSec float64) map[string]bool {
	t.Helper()
	rate, err := bucket.PerSecond(perSec)
	if err != nil {
		t.Fatal(err)
	}
	bs := map[string]*bucket.Bucket{}
	out := map[string]bool{}
	for _, r := range tr.Requests {
		b, ok := bs[r.Key]
		if !ok {
			nb := bucket.MustNew(rate, int64(c), r.Arrival)
			b = &nb
			bs[r.Key] = b
		}
		if !b.Allow(r.Arrival) {
			out[r.Key] = true
		}
	}
	return out
}

func sorted(t *testing.T, tr *workload.Trace) {
	t.Helper()
	for i := 1; i < len(tr.Requests); i++ {
		if tr.Requests[i].Arrival < tr.Requests[i-1].Arrival {
			t.Fatalf("%s: request %d out of order", tr.Name, i)
		}
	}
}

func TestDataSetA(t *testing.T) {
	c := DefaultCapacity
	for _, seed := range []uint64{1, 2, 3} {
		tr := GenerateA(DefaultA(c), seed)
		sorted(t, tr)
		if got := tr.Keys(); got != 10 {
			t.Errorf("seed %d: %d users, want 10", seed, got)
		}
		if got, want := len(tr.Requests), int(math.Round(68.3*float64(c))); got != want {
			t.Errorf("seed %d: %d requests, want 68.3c = %d", seed, got, want)
		}
		if span := tr.Requests[len(tr.Requests)-1].Arrival; span >= 5*time.Minute {
			t.Errorf("seed %d: last request at %v, want within 5 min", seed, span)
		}
		if lim := limitedKeys(t, tr, c, RefillFraction*float64(c)); len(lim) != 10 {
			t.Errorf("seed %d: %d users limited by a central bucket, want all 10", seed, len(lim))
		}
	}
	a, b := GenerateA(DefaultA(c), 7), GenerateA(DefaultA(c), 7)
	if len(a.Requests) != len(b.Requests) || a.Requests[100] != b.Requests[100] {
		t.Error("GenerateA is not deterministic per seed")
	}
}

func TestDataSetB(t *testing.T) {
	c := DefaultCapacity
	for _, s := range BSubsets {
		tr := GenerateB(s, c, 3)
		sorted(t, tr)
		if tr.Keys() != 1 {
			t.Errorf("%s: %d users, want 1", s, tr.Keys())
		}
		if span := tr.Requests[len(tr.Requests)-1].Arrival; span >= BDuration(s) {
			t.Errorf("%s: last request at %v, beyond %v", s, span, BDuration(s))
		}
		lim := limitedKeys(t, tr, c, RefillFraction*float64(c))
		if s == NotLimited {
			if len(lim) != 0 {
				t.Errorf("not rate-limited user is limited by a central bucket")
			}
			continue
		}
		if got, want := len(tr.Requests), int(math.Round(BRequestsC[s]*float64(c))); got != want {
			t.Errorf("%s: %d requests, want %gc = %d", s, got, BRequestsC[s], want)
		}
		if len(lim) != 1 {
			t.Errorf("%s: not limited by a central bucket", s)
		}
	}
}

func TestDataSetsCD(t *testing.T) {
	cs := DefaultC(DefaultCapacity)
	cs.Users, cs.Duration = 500, 10*time.Minute
	tr := GenerateC(cs, 1)
	sorted(t, tr)
	lim := limitedKeys(t, tr, DefaultCapacity, RefillFraction*DefaultCapacity)
	if want := int(math.Round(cs.LimitedShare * float64(cs.Users))); len(lim) != want {
		t.Errorf("C: %d users limited, want %d (1%%)", len(lim), want)
	}
	d := GenerateD()
	if len(d.Requests) != 112 || d.Requests[1].Arrival != 900*time.Millisecond {
		t.Errorf("D: %d requests, second at %v; want 112 every 0.9 s", len(d.Requests), d.Requests[1].Arrival)
	}
	if lim := limitedKeys(t, d, DCapacity, DRefill); len(lim) != 1 {
		t.Error("D: the user is never limited by a central bucket (capacity 5, refill 1/s)")
	}
}

func TestQuickRun(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	e := Experiment()
	if e.Name != "thesis" || e.Source != "002 §4.3, ch. 5" {
		t.Fatalf("experiment %q from %q", e.Name, e.Source)
	}
	if err := e.Run(experiment.Context{Out: dir, Seeds: 10, Quick: true, Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"95.7%", "96.9%", "99.7%", "96.4%", "98.6%", "10.0%", "80.0%", "7.98", "8.83", "31% more", "243% more", "86% less", "data set D", "Quick run"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	js, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Comparison []CmpRow `json:"thesis_vs_ours"`
		Aims       []Aim    `json:"aim"`
	}
	if err := json.Unmarshal(js, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Comparison) < 19 {
		t.Errorf("report.json has %d thesis rows, want at least 19", len(rep.Comparison))
	}
	got := map[float64]bool{}
	for _, r := range rep.Comparison {
		got[r.Thesis] = true
	}
	for _, v := range []float64{0.957, 0.969, 0.997, 0.964, 0.986, 0.10, 0.80, 7.98, 8.83, 0.14} {
		if !got[v] {
			t.Errorf("report.json lacks the thesis' %v", v)
		}
	}
	for _, name := range []string{"fig5_3_a_rejection_difference.png", "fig5_5_b_extreme.png", "fig5_7_b_substantial.png", "fig5_9_b_barely.png", "fig5_11_b_not_limited.png", "fig5_15_d_precision.png", "memory_bandwidth.png"} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.Size() < 1000 {
			t.Errorf("plot %s missing or empty: %v", name, err)
		}
	}
	if n := strings.Count(out.String(), "\n"); n < 10 || n > 30 {
		t.Errorf("summary has %d lines, want 10-30:\n%s", n, out.String())
	}
}
