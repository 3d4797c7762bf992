package eval

import (
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// Waiting mode (000 §5.2): on a fixed-latency network without loss, owner
// and lease reserve in arrival order exactly as central does, so they
// admit what central in waiting mode admits, with the same waits; static
// reserves in its sub-token buckets within the envelope, with SRTM's
// M/D/1 prediction beside its mean wait; a strategy without waiting mode
// (gcounter) reports so and never delays; a run without MaxWait has no
// waiting fields in its JSON.
func TestWaitingModeMatchesCentral(t *testing.T) {
	params, err := strategy.ParseParams([]string{"lease.max_wait=500ms"})
	if err != nil {
		t.Fatal(err)
	}
	opts := smallRun(t, "poisson:users=3,rate=5,duration=20s", "owner,lease,static,gcounter", "roundrobin")
	opts.Params = params
	plain, err := Run(opts)
	if err != nil {
		t.Fatal(err)
	}
	opts.MaxWait = 500 * time.Millisecond
	waiting, err := Run(opts)
	if err != nil {
		t.Fatal(err)
	}
	central := waiting.Results[0]
	if central.Wait == nil || !central.Wait.WaitingMode || central.Wait.Waited == 0 {
		t.Fatalf("central in waiting mode: wait %+v, want some requests delayed", central.Wait)
	}
	if central.Admitted <= plain.Results[0].Admitted {
		t.Fatalf("central admits %d in waiting mode, %d without: waiting should admit more", central.Admitted, plain.Results[0].Admitted)
	}
	if central.Wait.MaxMs > 500 || central.EnvelopeViolationTokens != 0 {
		t.Fatalf("central: max wait %v ms (limit 500), envelope %v", central.Wait.MaxMs, central.EnvelopeViolationTokens)
	}
	for _, r := range waiting.Results[1:] {
		switch r.Strategy {
		case "owner", "lease":
			if r.Admitted != central.Admitted || r.ExcessAdmitted != 0 || r.EnvelopeViolationTokens != 0 {
				t.Errorf("%s: admitted %d (central %d), excess %d, envelope %v", r.Strategy, r.Admitted, central.Admitted, r.ExcessAdmitted, r.EnvelopeViolationTokens)
			}
			if r.Wait == nil || !r.Wait.WaitingMode || r.Wait.Waited != central.Wait.Waited || r.Wait.MaxMs > 500 {
				t.Errorf("%s: wait %+v, central's %+v", r.Strategy, r.Wait, central.Wait)
			}
		case "static":
			if r.Wait == nil || !r.Wait.WaitingMode || r.Wait.Waited == 0 || r.Wait.MaxMs > 500 || r.EnvelopeViolationTokens != 0 || r.ExcessAdmitted != 0 {
				t.Errorf("static in waiting mode: wait %+v, envelope %v, excess %d", r.Wait, r.EnvelopeViolationTokens, r.ExcessAdmitted)
			}
			// The 3 keys are offered above r (5/s): no finite M/D/1 mean
			// (TestMD1 tests the prediction itself).
			if m := r.Wait.MD1; m == nil || m.Buckets != "(r/N, b_i)" || m.Keys+m.UnstableKeys != 3 || m.UnstableKeys != 3 {
				t.Errorf("static: M/D/1 comparison %+v, want (r/N, b_i) with the 3 keys unstable", m)
			}
		case "gcounter":
			if r.Wait == nil || r.Wait.WaitingMode || r.Wait.Waited != 0 {
				t.Errorf("gcounter has no waiting mode: wait %+v", r.Wait)
			}
		}
	}
	if waiting.Setup.MaxWaitMs != 500 {
		t.Errorf("setup max wait %v ms, want 500", waiting.Setup.MaxWaitMs)
	}
	if s := jsonText(t, plain); strings.Contains(s, `"wait"`) || strings.Contains(s, "max_wait_ms") {
		t.Errorf("JSON without waiting mode has waiting fields:\n%s", s)
	}
	if s := jsonText(t, waiting); !strings.Contains(s, `"waiting_mode": true`) || !strings.Contains(s, `"max_wait_ms": 500`) {
		t.Errorf("JSON in waiting mode lacks its fields:\n%s", s)
	}
	if out := table(t, waiting); !strings.Contains(out, "waiting time") {
		t.Errorf("table in waiting mode has no waiting time section:\n%s", out)
	}
}
