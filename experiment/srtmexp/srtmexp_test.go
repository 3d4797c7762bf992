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
