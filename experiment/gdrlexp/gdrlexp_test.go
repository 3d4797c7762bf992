package gdrlexp

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokenmesh/tokenmesh/experiment"
)

func runQuick(t *testing.T, e experiment.Experiment, wantPlots ...string) (string, []byte) {
	t.Helper()
	dir := t.TempDir()
	var out bytes.Buffer
	if err := e.Run(experiment.Context{Out: dir, Seeds: 1, Quick: true, Stdout: &out}); err != nil {
		t.Fatalf("%s: %v", e.Name, err)
	}
	for _, f := range append([]string{"report.md", "report.json"}, wantPlots...) {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || st.Size() == 0 {
			t.Errorf("%s: %s missing or empty (%v)", e.Name, f, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), e.Name) {
		t.Errorf("%s: summary does not name the experiment:\n%s", e.Name, out.String())
	}
	t.Logf("%s summary:\n%s", e.Name, out.String())
	return dir, b
}

func TestRingQuick(t *testing.T) {
	_, b := runQuick(t, Ring(), "q.png", "q_true.png", "jfi.png")
	var rep struct {
		Runs []struct {
			NoiseBand float64 `json:"noise_band"`
			Est       int     `json:"jfi_est_ge_099_interval"`
			Tail      float64 `json:"jfi_est_mean_last_10pct"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != len(noiseBands) {
		t.Fatalf("runs = %d, want %d", len(rep.Runs), len(noiseBands))
	}
	for _, r := range rep.Runs {
		// The paper's claim: JFI(q(t)) reaches 0.99 and stays close to 1.
		if r.Est < 0 || r.Tail < 0.95 {
			t.Errorf("ring, noise_band %g: JFI of the indicators: first >= 0.99 at %d, last-10%% mean %.4f", r.NoiseBand, r.Est, r.Tail)
		}
	}
}

func TestDynamicQuick(t *testing.T) {
	_, b := runQuick(t, Dynamic(), "lambda.png", "q.png", "jfi.png")
	var rep struct {
		Phases []struct {
			EstTail float64 `json:"jfi_est_mean_last_10pct"`
		} `json:"phases"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Phases) != 4 {
		t.Fatalf("phases = %d, want 4", len(rep.Phases))
	}
}

func TestScaleQuick(t *testing.T) {
	_, b := runQuick(t, Scale(), "jfi.png", "intervals.png")
	var rep struct {
		Cases []struct {
			N, D      int
			Intervals int `json:"gdrl_intervals_to_jfi_099"`
			Model     struct {
				Steps int `json:"steps_to_jfi_099"`
			} `json:"model_eq7"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Cases) != 6 {
		t.Fatalf("cases = %d, want 6 (N = 10, 100 x d = 2, 4, 8)", len(rep.Cases))
	}
	for _, c := range rep.Cases {
		if c.N == 10 && (c.Intervals < 0 || c.Model.Steps < 0) {
			t.Errorf("N=10 d=%d: did not reach JFI 0.99 (gdrl %d, model %d)", c.D, c.Intervals, c.Model.Steps)
		}
	}
}

func TestDynLambda(t *testing.T) {
	const n, tau = 10, 100
	for _, c := range []struct {
		i, t int
		want float64
	}{{1, 0, 1.0 / 11}, {1, tau, 10.0 / 11}, {1, 2 * tau, 10.0 / 11}, {1, 2*tau + tau/2, 0.5}, {1, 3*tau - 1, 1.0/11 + 9.0/11/tau}, {1, 3 * tau, 1.0 / 11}, {5, 4*tau - 1, 5.0 / 11}} {
		if got := dynLambda(c.i, n, c.t, tau); got < c.want-1e-12 || got > c.want+1e-12 {
			t.Errorf("dynLambda(%d, %d) = %v, want %v", c.i, c.t, got, c.want)
		}
	}
}
