package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sim --regions: usage errors name the flag; a run reports the topology
// and each strategy's region costs, and a scenario cuts a region.
func TestSimRegions(t *testing.T) {
	dir := t.TempDir()
	cut := filepath.Join(dir, "cut.yaml")
	if err := os.WriteFile(cut, []byte("events:\n  - at: 1s\n    cut: [ap]\n  - at: 2s\n    heal: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mars := filepath.Join(dir, "mars.yaml")
	if err := os.WriteFile(mars, []byte("events:\n  - at: 1s\n    cut: [mars]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	small := []string{"sim", "--workload", "tenants:users=3,rate=50,duration=3s", "--rate", "20", "--burst", "20", "--strategies", "central,owner", "--recommend=false"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--regions", "eu:2,us:0"}, "--regions: regions \"eu:2,us:0\": region us has 0 nodes"},
		{[]string{"--regions", "eu:2,eu:3"}, "region eu is given twice"},
		{[]string{"--regions", "eu"}, `"eu" has no node count`},
		{[]string{"--regions", "eu:2,us:2", "--nodes", "5"}, "--nodes 5 and --regions eu:2,us:2 (4 nodes) disagree"},
		{[]string{"--wan-latency", "50ms"}, "--wan-latency 50ms needs --regions"},
		{[]string{"--wan-loss", "0.1"}, "--wan-loss 0.1 needs --regions"},
		{[]string{"--regions", "eu:2,us:2", "--wan-latency", "soon"}, "--wan-latency: latency \"soon\""},
		{[]string{"--regions", "eu:2,us:2", "--wan-loss", "2"}, "wan loss 2 is not a probability"},
		{[]string{"--regions", "eu:2,us:2", "--proxies", "2"}, "--regions with --proxies"},
		{[]string{"--regions", "eu:2,us:2", "--scenario", mars}, `unknown region "mars" (the regions are eu, us)`},
		{[]string{"--scenario", cut}, "cut ap names regions, but the cluster has none (--regions)"},
		{[]string{"--workload", "tenants:users=3,rate=50,duration=3s,follow=1s"}, "follows the sun from region to region; give --regions"},
	} {
		args := append(append([]string{}, small...), c.args...)
		_, errOut, code := tokenmesh(t, args...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", c.args, code, errOut, c.want)
		}
	}
	out, errOut, code := tokenmesh(t, append(small, "--regions", "eu:2,us:2,ap:2", "--nodes", "6", "--wan-latency", "exp:30ms+5ms",
		"--loss", "0.01", "--scenario", cut, "--json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep struct {
		Setup struct {
			Nodes    int `json:"nodes"`
			Topology struct {
				Regions    string  `json:"regions"`
				WANLatency string  `json:"wan_latency"`
				WANLoss    float64 `json:"wan_loss"`
			} `json:"topology"`
			Faults []struct {
				Event string `json:"event"`
			} `json:"faults"`
		} `json:"setup"`
		Results []struct {
			Strategy string `json:"strategy"`
			Regions  *struct {
				NodePct, RegionPct, WANPct float64
				WANBytes                   int64 `json:"wan_bytes"`
			} `json:"regions"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	s := rep.Setup
	if s.Nodes != 6 || s.Topology.Regions != "eu:2,us:2,ap:2" || s.Topology.WANLatency != "exp:30ms+5ms" || s.Topology.WANLoss != 0.01 ||
		len(s.Faults) != 2 || s.Faults[0].Event != "cut ap" {
		t.Fatalf("setup %+v", s)
	}
	if len(rep.Results) != 2 || rep.Results[1].Regions == nil || rep.Results[1].Regions.WANBytes == 0 {
		t.Fatalf("results %+v", rep.Results)
	}
	// The recommendation's next sim keeps the regions and their links.
	out, _, code = tokenmesh(t, "sim", "--workload", "tenants:users=3,rate=50,duration=3s", "--rate", "20", "--burst", "20",
		"--strategies", "central,owner", "--regions", "eu:2,us:2", "--wan-latency", "30ms", "--wide")
	if want := "tokenmesh sim --trace examples/access.log --regions eu:2,us:2 --latency 1ms --rate 20 --burst 20 --wan-latency 30ms"; code != 0 || !strings.Contains(out, want) {
		t.Errorf("exit %d; the next step lacks %q:\n%s", code, want, out)
	}
	help, _, _ := tokenmesh(t, "sim", "--help")
	for _, w := range []string{"--regions", "--wan-latency", "--wan-loss", "follow=D", "cut: [ap]"} {
		if !strings.Contains(help, w) {
			t.Errorf("sim --help lacks %q", w)
		}
	}
}
