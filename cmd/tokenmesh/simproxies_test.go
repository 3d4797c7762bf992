package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// The proxy flags' bad values, and proxy settings without --proxies, are
// refused naming the flag.
func TestSimProxiesBadInput(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"sim", "--proxies", "-2"}, "--proxies -2"},
		{[]string{"sim", "--proxies", "2", "--report-interval", "1500ms"}, "--report-interval 1.5s"},
		{[]string{"sim", "--proxies", "2", "--proxy-hop", "-1ms"}, "--proxy-hop -1ms"},
		{[]string{"sim", "--proxies", "2", "--no-assignment-behavior", "maybe"}, `--no-assignment-behavior "maybe"`},
		{[]string{"sim", "--proxies", "2", "--expired-assignment-behavior", "REUSE"}, `--expired-assignment-behavior "REUSE"`},
		{[]string{"sim", "--report-interval", "1s"}, "need --proxies N"},
		{[]string{"sim", "--strategies", "proxystatic"}, "--strategies proxystatic"},
		{[]string{"sim", "--proxies", "2", "--client-latency", "2ms"}, "--client-latency with --proxies"},
	} {
		_, errOut, code := tokenmesh(t, c.args...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want it to name %q", c.args, code, errOut, c.want)
		}
	}
}

// sim --proxies: the JSON has the tier and each strategy's proxy costs
// (not central's), and proxystatic is a strategy there.
func TestSimProxies(t *testing.T) {
	out, errOut, code := tokenmesh(t, "sim", "--workload", "tenants:users=2,rate=200,duration=5s", "--rate", "100", "--burst", "100",
		"--nodes", "3", "--proxies", "4", "--report-interval", "1s", "--no-assignment-behavior", "deny_all",
		"--strategies", "quota,owner,proxystatic", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep struct {
		Setup struct {
			Proxies struct {
				Proxies      int     `json:"proxies"`
				Report       float64 `json:"report_interval_s"`
				NoAssignment string  `json:"no_assignment"`
			} `json:"proxies"`
		} `json:"setup"`
		Results []struct {
			Strategy string `json:"strategy"`
			Proxy    *struct {
				Messages int64 `json:"messages"`
			} `json:"proxy"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if p := rep.Setup.Proxies; p.Proxies != 4 || p.Report != 1 || p.NoAssignment != "DENY_ALL" {
		t.Fatalf("setup proxies %+v", p)
	}
	var names []string
	for _, r := range rep.Results {
		names = append(names, r.Strategy)
		if (r.Proxy == nil) != (r.Strategy == "central") {
			t.Errorf("%s: proxy costs %v", r.Strategy, r.Proxy)
		}
	}
	if strings.Join(names, ",") != "central,quota,owner,proxystatic" {
		t.Fatalf("strategies %v", names)
	}
}
