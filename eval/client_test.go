package eval

import (
	"slices"
	"testing"

	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// A zero client delay changes nothing: the same decisions, byte for byte,
// as a run without the option (but for the setup's client_latency).
func TestClientLatencyZeroIsNone(t *testing.T) {
	opts := smallRun(t, "heavy:users=10,rate=20,duration=20s", "central,owner,gcounter,static", "roundrobin")
	plain, err := Run(opts)
	if err != nil {
		t.Fatal(err)
	}
	opts.ClientLatency = &sim.Latency{Kind: "fixed"}
	zero, err := Run(opts)
	if err != nil {
		t.Fatal(err)
	}
	if zero.Setup.ClientLatency == "" {
		t.Fatal("setup does not name the client latency")
	}
	zero.Setup.ClientLatency = ""
	if a, b := jsonText(t, plain), jsonText(t, zero); a != b {
		t.Fatalf("zero client latency changed the report:\n%s\n%s", a, b)
	}
}

// The delayed trace is a permutation of the original, in arrival order,
// every request at least its original time, central never delayed; owner
// (exact with arrival-stamped forwards) now differs from central request
// by request, as it does live, and a larger delay makes it differ more.
func TestClientLatencyReorders(t *testing.T) {
	opts := smallRun(t, "heavy:users=10,rate=20,duration=20s", "central,owner", "roundrobin")
	lat, err := sim.ParseLatency("exp:5ms")
	if err != nil {
		t.Fatal(err)
	}
	d := delayTrace(opts.Trace, lat, 1)
	seen := make([]bool, len(d.Orig))
	for j, r := range d.Trace.Requests {
		i := d.Orig[j]
		if seen[i] {
			t.Fatalf("request %d twice", i)
		}
		seen[i] = true
		o := opts.Trace.Requests[i]
		if r.Key != o.Key || r.Arrival < o.Arrival {
			t.Fatalf("delayed request %d: %+v from %+v", j, r, o)
		}
		if j > 0 && r.Arrival < d.Trace.Requests[j-1].Arrival {
			t.Fatalf("delayed trace out of order at %d", j)
		}
	}
	if slices.Contains(seen, false) {
		t.Fatal("a request was lost")
	}
	falseRej := func(l string) int {
		o := opts
		if l != "" {
			cl, err := sim.ParseLatency(l)
			if err != nil {
				t.Fatal(err)
			}
			o.ClientLatency = &cl
		}
		rep, err := Run(o)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Results[0].FalseRejections != 0 {
			t.Fatalf("central, the reference, has %d false rejections", rep.Results[0].FalseRejections)
		}
		return rep.Results[1].FalseRejections
	}
	none, small, large := falseRej(""), falseRej("exp:1ms"), falseRej("exp:20ms")
	t.Logf("owner false rejections: none %d, exp:1ms %d, exp:20ms %d", none, small, large)
	if none != 0 || small <= none || large <= small {
		t.Fatalf("owner false rejections none %d, exp:1ms %d, exp:20ms %d: want 0 < growing", none, small, large)
	}
}

// Edge times (Options.EdgeTimes) behind the same client path: owner orders
// a key's requests by the time they reached the edge, so with a hold that
// covers the path it decides as central does, which it does not without
// them. Edge times without a client path are an error.
func TestEdgeTimesUndoTheClientPath(t *testing.T) {
	opts := smallRun(t, "heavy:users=10,rate=20,duration=20s", "central,owner", "roundrobin")
	cl, err := sim.ParseLatency("uniform:0ms-40ms")
	if err != nil {
		t.Fatal(err)
	}
	falseRej := func(edge bool, hold string) int {
		o := opts
		o.ClientLatency, o.EdgeTimes = &cl, edge
		p, err := strategy.ParseParams([]string{"owner.hold=" + hold})
		if err != nil {
			t.Fatal(err)
		}
		o.Params = p
		rep, err := Run(o)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Setup.EdgeTimes != edge {
			t.Fatalf("setup edge_times %v, want %v", rep.Setup.EdgeTimes, edge)
		}
		return rep.Results[1].FalseRejections
	}
	without, covered := falseRej(false, "60ms"), falseRej(true, "60ms")
	t.Logf("owner false rejections behind uniform:0ms-40ms, hold 60ms: without edge times %d, with %d", without, covered)
	if without == 0 || covered != 0 {
		t.Errorf("owner false rejections: without edge times %d, with edge times and a hold above the path's delays %d; want > 0 and 0", without, covered)
	}
	o := opts
	o.EdgeTimes = true
	if _, err := Run(o); err == nil {
		t.Error("edge times without a client latency: no error")
	}
}
