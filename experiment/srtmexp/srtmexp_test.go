package srtmexp

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tokenmesh/tokenmesh/experiment"
)

func runQuick(t *testing.T, e experiment.Experiment, files ...string) {
	t.Helper()
	dir := t.TempDir()
	if out := os.Getenv("SRTMEXP_OUT"); out != "" {
		dir = filepath.Join(out, e.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var sb strings.Builder
	n, _ := strconv.Atoi(os.Getenv("SRTMEXP_SEEDS"))
	if err := e.Run(experiment.Context{Out: dir, Seeds: max(1, n), Quick: os.Getenv("SRTMEXP_FULL") == "", Stdout: &sb}); err != nil {
		t.Fatal(err)
	}
	t.Log(sb.String())
	for _, f := range append([]string{"report.md", "report.json"}, files...) {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: missing or empty (%v)", f, err)
		}
	}
	if !strings.Contains(sb.String(), "paper") {
		t.Errorf("summary does not cite the paper's numbers:\n%s", sb.String())
	}
}

func TestPenaltyQuick(t *testing.T) {
	runQuick(t, Penalty(), "fig6_1000.png", "fig6_6000.png")
}

func TestConcentrationQuick(t *testing.T) {
	runQuick(t, Concentration(), "fig7_poisson_b10.png", "fig8_poisson_b10.png")
}

func TestCorrelationQuick(t *testing.T) {
	runQuick(t, Correlation(), "fig9_poisson_p99.png", "fig11_poisson_brokers.png")
}

func TestTable1Quick(t *testing.T) {
	runQuick(t, Table1())
}

// The committed Table 1 report is what the code produces (it has no wall
// time): regenerate it with the command its header gives.
func TestTable1Committed(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the full experiment (about 10 s of CPU)")
	}
	dir := t.TempDir()
	if err := Table1().Run(experiment.Context{Out: dir, Seeds: 5}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"report.md", "report.json"} {
		got, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join("..", "..", "docs", "results", "srtm-table1", f))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("docs/results/srtm-table1/%s differs from what the code produces: regenerate it with `tokenmesh experiment srtm-table1 --seeds 5 --out docs/results/srtm-table1`", f)
		}
	}
}
