package daemon

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// faultsHandler is withFaults over a Faulty transport of the node named
// self on a MemNetwork with the peers given (attached, not listening).
func faultsHandler(t *testing.T, self string, peers ...string) (http.Handler, *cluster.Faulty) {
	t.Helper()
	net := cluster.NewMemNetwork()
	ep, err := net.Endpoint(strategyID(self))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range peers {
		if _, err := net.Endpoint(strategyID(p)); err != nil {
			t.Fatal(err)
		}
	}
	h := &faultHook{name: self, seed: faultSeed(self)}
	h.wrap(ep)
	t.Cleanup(func() { _ = h.faulty.Close() })
	return withFaults(http.NotFoundHandler(), h.faulty), h.faulty
}

func doFaults(t *testing.T, h http.Handler, method, body string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, "/debug/faults", strings.NewReader(body)))
	var got map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("%s /debug/faults %s: %d, body %q: %v", method, body, rec.Code, rec.Body.String(), err)
	}
	return rec.Code, got
}

// POST /debug/faults takes wan_delay_ms and wan_jitter_ms (bounded like
// delay_ms), refuses bad values naming the field and keeping the faults in
// force, and GET reads them back.
func TestFaultsWANDelayHTTP(t *testing.T) {
	h, _ := faultsHandler(t, "eu.n0")
	cases := []struct {
		name, body string
		status     int
		wantErr    string // in the 400's error
	}{
		{"wan", `{"wan_delay_ms":30,"wan_jitter_ms":10}`, 200, ""},
		{"wan with the rest", `{"blocked":["us.n1"],"drop":0.1,"delay_ms":2,"wan_delay_ms":70,"wan_jitter_ms":0}`, 200, ""},
		{"at the bound", `{"wan_delay_ms":3600000,"wan_jitter_ms":3600000}`, 200, ""},
		{"negative wan delay", `{"wan_delay_ms":-1}`, 400, "wan_delay_ms: -1 is not between 0 and 3600000"},
		{"wan delay too long", `{"wan_delay_ms":3600001}`, 400, "wan_delay_ms: 3600001 is not between 0 and 3600000"},
		{"negative wan jitter", `{"wan_delay_ms":30,"wan_jitter_ms":-5}`, 400, "wan_jitter_ms: -5 is not between 0 and 3600000"},
		{"wan jitter too long", `{"wan_jitter_ms":99999999999}`, 400, "wan_jitter_ms: 99999999999 is not between"},
		{"wan delay a string", `{"wan_delay_ms":"30ms"}`, 400, "wan_delay_ms: want int64, got JSON string"},
		{"wan jitter a fraction", `{"wan_jitter_ms":1.5}`, 400, "wan_jitter_ms: want int64"},
		{"misspelt", `{"wan_delay":30}`, 400, `unknown field "wan_delay"`},
		{"delay still checked", `{"delay_ms":-2,"wan_delay_ms":30}`, 400, "delay_ms: -2"},
	}
	// The faults in force after the last accepted POST, as GET shows them.
	var wantDelay, wantJitter float64
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, got := doFaults(t, h, http.MethodPost, tc.body)
			if code != tc.status {
				t.Fatalf("POST %s: %d %v, want %d", tc.body, code, got, tc.status)
			}
			if tc.status == 200 {
				var req faultsRequest
				_ = json.Unmarshal([]byte(tc.body), &req)
				wantDelay, wantJitter = float64(req.WANDelayMS), float64(req.WANJitterMS)
			} else if msg, _ := got["error"].(string); !strings.Contains(msg, tc.wantErr) {
				t.Fatalf("POST %s: error %q, want it to contain %q", tc.body, msg, tc.wantErr)
			}
			_, cur := doFaults(t, h, http.MethodGet, "")
			if cur["wan_delay_ms"] != wantDelay || cur["wan_jitter_ms"] != wantJitter {
				t.Errorf("GET after POST %s: wan_delay_ms %v wan_jitter_ms %v, want %v and %v (the last accepted)",
					tc.body, cur["wan_delay_ms"], cur["wan_jitter_ms"], wantDelay, wantJitter)
			}
		})
	}
}

// The node's Faulty transport knows the node's region from its name: the
// WAN delay set over HTTP applies to frames to other regions only.
func TestFaultsWANDelayByRegion(t *testing.T) {
	h, f := faultsHandler(t, "eu.n0", "eu.n1", "us.n2")
	if code, got := doFaults(t, h, http.MethodPost, `{"wan_delay_ms":3600000}`); code != 200 {
		t.Fatalf("POST: %d %v", code, got)
	}
	for _, to := range []string{"eu.n1", "us.n2", "us.n2"} {
		if err := f.Send(strategyID(to), cluster.Frame{Rule: "r"}); err != nil {
			t.Fatal(err)
		}
	}
	st := f.Stats()
	if st.Sent != 3 || st.WANDelayed != 2 || st.Delayed != 2 {
		t.Errorf("stats %+v: want 3 sent, the 2 to us.n2 delayed by the WAN", st)
	}
	_, got := doFaults(t, h, http.MethodGet, "")
	stats, _ := got["stats"].(map[string]any)
	if stats["WANDelayed"] != float64(2) {
		t.Errorf("GET stats %v: want WANDelayed 2", stats)
	}
}

func strategyID(s string) strategy.NodeID { return strategy.NodeID(s) }
