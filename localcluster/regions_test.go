package localcluster

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/config"
	"github.com/tokenmesh/tokenmesh/internal/lockedbuf"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
)

func TestCheckRegionsAndNodeName(t *testing.T) {
	cases := []struct {
		regions []string
		n       int
		want    string // "" = valid
	}{
		{nil, 3, ""},
		{[]string{"eu", "eu", "us"}, 3, ""},
		{[]string{"eu-west_1"}, 1, ""},
		{[]string{"eu", "us"}, 3, "Config.Regions has 2 entries for 3 nodes"},
		{[]string{"eu", "", "us"}, 3, "Config.Regions[1]: region name is empty"},
		{[]string{"eu", "us.east"}, 2, `Config.Regions[1]: region name "us.east" has '.'`},
		{[]string{strings.Repeat("x", 40)}, 1, "longer than 32 bytes"},
	}
	for _, tc := range cases {
		err := checkRegions(tc.regions, tc.n)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("checkRegions(%q, %d): %v, want %q", tc.regions, tc.n, err, tc.want)
		}
	}
	if _, err := Start(context.Background(), Config{Binary: "x", Nodes: 2, Regions: []string{"eu"},
		Rules: []rule.Rule{{Name: "api", Rate: rule.MustRate("1/s")}}}); err == nil || !strings.Contains(err.Error(), "Config.Regions") {
		t.Errorf("Start with 1 region for 2 nodes: %v, want an error naming Config.Regions", err)
	}
	for _, tc := range []struct {
		regions []string
		i       int
		want    string
	}{{nil, 2, "n2"}, {[]string{"eu", "us"}, 1, "us.n1"}, {[]string{"eu", "us"}, 0, "eu.n0"}} {
		if got := NodeName(tc.regions, tc.i); got != tc.want {
			t.Errorf("NodeName(%q, %d) = %q, want %q", tc.regions, tc.i, got, tc.want)
		}
	}
}

// debugFaults is node i's GET /debug/faults.
func debugFaults(t *testing.T, c *Cluster, i int) (f NodeFaults, wanDelayed int64) {
	t.Helper()
	resp, err := c.http.Get("http://" + c.node(i).API + "/debug/faults")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		NodeFaults
		Stats struct{ WANDelayed int64 }
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: GET /debug/faults: %s, %v", c.name(i), resp.Status, err)
	}
	return got.NodeFaults, got.Stats.WANDelayed
}

// A cluster with regions: nodes named <region>.n<i> with node.region
// set; SetWANDelay reaches every node and delays only cross-region frames
// (an owner check forwarded across regions takes at least two WAN
// delays: a lower bound, safe on a loaded machine); Partition and Heal
// keep the WAN delay; bad delays are refused naming the argument.
func TestClusterRegions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	var log lockedbuf.Buffer
	regions := []string{"eu", "eu", "us"}
	// The latency hint covers the WAN (owner's forward timeout is
	// 3*hint + 100ms): a forward waits for its verdict.
	c, err := Start(context.Background(), Config{Binary: binary, Nodes: 3, Regions: regions, FaultInjection: true, Log: &log,
		ServeArgs: []string{"--latency-hint", "30ms"},
		Rules:     []rule.Rule{{Name: "api", Rate: rule.MustRate("1000/s"), Burst: 1000, Strategy: "owner"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Stop()
		if t.Failed() {
			t.Logf("node output:\n%s", log.String())
		}
	})
	ids := make([]strategy.NodeID, 3)
	for i, n := range c.Nodes {
		if want := NodeName(regions, i); n.Name != want {
			t.Fatalf("node %d named %q, want %q", i, n.Name, want)
		}
		ids[i] = strategy.NodeID(n.Name)
		f, err := config.Load(filepath.Join(c.Dir(), n.Name+".yaml"))
		if err != nil || f.Node.Region != regions[i] {
			t.Fatalf("%s's config: %v, node.region %q; want %q", n.Name, err, f.Node.Region, regions[i])
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, bad := range []struct {
		d, j time.Duration
		want string
	}{
		{-time.Millisecond, 0, "delay -1ms is not between 0 and 1h0m0s"},
		{0, 2 * time.Hour, "jitter 2h0m0s is not between"},
		{1500 * time.Microsecond, 0, "delay 1.5ms is not a whole number of milliseconds"},
	} {
		if err := c.SetWANDelay(ctx, bad.d, bad.j); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("SetWANDelay(%v, %v): %v, want %q", bad.d, bad.j, err, bad.want)
		}
	}
	const wan = 20 * time.Millisecond
	if err := c.SetWANDelay(ctx, wan, 5*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d, j := c.WANDelay(); d != wan || j != 5*time.Millisecond {
		t.Errorf("WANDelay() = %v, %v", d, j)
	}
	for i := range c.Nodes {
		if f, _ := debugFaults(t, c, i); f.WANDelayMS != 20 || f.WANJitterMS != 5 {
			t.Errorf("%s: faults %+v after SetWANDelay(20ms, 5ms)", c.Nodes[i].Name, f)
		}
	}
	cl, err := c.Client(0) // eu.n0
	if err != nil {
		t.Fatal(err)
	}
	check := func(key string) time.Duration {
		start := time.Now()
		r, err := cl.Check(ctx, &tokenmeshv1.CheckRequest{Checks: []*tokenmeshv1.CheckItem{{Rule: "api", Key: key, Hits: 1}}})
		if err != nil || r.GetResults()[0].GetError() != "" {
			t.Fatalf("check %s: %v %v", key, err, r)
		}
		return time.Since(start)
	}
	var far string // a key owned by us.n2: eu.n0 forwards it across the WAN
	for k := 0; far == ""; k++ {
		if key := "k" + string(rune('a'+k%26)) + strings.Repeat("x", k/26); rendezvous.Owner(key, ids) == ids[2] {
			far = key
		}
	}
	if d := check(far); d < 2*wan {
		t.Errorf("a check forwarded eu.n0 -> us.n2 -> eu.n0 took %v, less than two WAN delays (%v)", d, 2*wan)
	}
	if _, n := debugFaults(t, c, 0); n < 1 {
		t.Errorf("eu.n0 counts %d frames delayed by the WAN after a forward to us.n2", n)
	}
	// Partition (without namespaces: blocked peers) keeps the WAN delay.
	if err := c.Partition([]int{0, 1}, []int{2}); err != nil {
		t.Fatal(err)
	}
	if f, _ := debugFaults(t, c, 0); f.WANDelayMS != 20 || len(f.Blocked) != 1 || f.Blocked[0] != "us.n2" {
		t.Errorf("eu.n0's faults under the partition: %+v, want us.n2 blocked and the WAN delay kept", f)
	}
	if err := c.Heal(); err != nil {
		t.Fatal(err)
	}
	for i := range c.Nodes {
		if f, _ := debugFaults(t, c, i); f.WANDelayMS != 20 || len(f.Blocked) != 0 {
			t.Errorf("%s: faults %+v after the heal, want none blocked and the WAN delay kept", c.Nodes[i].Name, f)
		}
	}
	if err := c.SetWANDelay(ctx, 0, 0); err != nil {
		t.Fatal(err)
	}
	if f, _ := debugFaults(t, c, 2); f.WANDelayMS != 0 || f.WANJitterMS != 0 {
		t.Errorf("us.n2: faults %+v after SetWANDelay(0, 0)", f)
	}
	// Without fault injection there is no WAN delay to set.
	nf := &Cluster{cfg: Config{}}
	if err := nf.SetWANDelay(ctx, wan, 0); err == nil || !strings.Contains(err.Error(), "FaultInjection") {
		t.Errorf("SetWANDelay without FaultInjection: %v", err)
	}
}
