package cluster

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// FrameFaults.Validate names the field out of range, WAN fields included.
func TestFrameFaultsValidate(t *testing.T) {
	cases := []struct {
		name string
		f    FrameFaults
		want string // "" = valid
	}{
		{"zero", FrameFaults{}, ""},
		{"wan", FrameFaults{WANDelay: 30 * time.Millisecond, WANJitter: 10 * time.Millisecond}, ""},
		{"wan at the bound", FrameFaults{WANDelay: MaxFaultDelay, WANJitter: MaxFaultDelay}, ""},
		{"all", FrameFaults{Drop: 0.1, Duplicate: 0.1, Delay: time.Millisecond, Jitter: time.Millisecond, WANDelay: time.Second}, ""},
		{"drop", FrameFaults{Drop: -0.1}, "Drop"},
		{"duplicate", FrameFaults{Duplicate: 2}, "Duplicate"},
		{"negative delay", FrameFaults{Delay: -1}, "Delay -1ns is negative"},
		{"negative jitter", FrameFaults{Jitter: -time.Millisecond}, "Jitter -1ms is negative"},
		{"negative wan delay", FrameFaults{WANDelay: -time.Millisecond}, "WANDelay -1ms is negative"},
		{"negative wan jitter", FrameFaults{WANJitter: -time.Millisecond}, "WANJitter -1ms is negative"},
		{"wan delay too long", FrameFaults{WANDelay: MaxFaultDelay + 1}, "WANDelay 1h0m0.000000001s is more than 1h0m0s"},
		{"wan jitter too long", FrameFaults{WANJitter: 2 * MaxFaultDelay}, "WANJitter 2h0m0s is more than"},
		{"delay too long", FrameFaults{Delay: 2 * MaxFaultDelay}, "Delay 2h0m0s is more than"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.f.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate: %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate: %v, want an error containing %q", err, tc.want)
			}
			// SetFaults refuses the same and keeps the faults in force.
			ft := NewFaultyNode(nil, "eu.n0", 1)
			if err := ft.SetFaults(tc.f); (err != nil) != (tc.want != "") {
				t.Fatalf("SetFaults: %v", err)
			}
		})
	}
}

// WANDelay delays the frames to peers of another region only (regions
// from the node names, topology.Of); a Faulty without a name is in the
// region "". The bounds asserted are lower bounds (a timer never fires
// early) and "delivered in Send" for frames without any delay (MemNetwork
// delivers in the sender's goroutine): nothing depends on the machine's
// speed.
func TestFaultyWANDelay(t *testing.T) {
	const wan, jitter = 80 * time.Millisecond, 20 * time.Millisecond
	cases := []struct {
		name    string
		self    strategy.NodeID // "" = NewFaulty
		to      strategy.NodeID
		wantWAN bool
	}{
		{"same region", "eu.n0", "eu.n1", false},
		{"other region", "eu.n0", "us.n2", true},
		{"regioned to unregioned", "eu.n0", "n3", true},
		{"unregioned to unregioned", "", "n3", false},
		{"unregioned to regioned", "", "us.n2", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			net := NewMemNetwork()
			from := tc.self
			if from == "" {
				from = "n9"
			}
			src, err := net.Endpoint(from)
			if err != nil {
				t.Fatal(err)
			}
			dst, err := net.Endpoint(tc.to)
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var arrived []time.Time
			got := make(chan struct{}, 8)
			dst.Listen(func(Frame) {
				mu.Lock()
				arrived = append(arrived, time.Now())
				mu.Unlock()
				got <- struct{}{}
			})
			var ft *Faulty
			if tc.self == "" {
				ft = NewFaulty(src, 7)
			} else {
				ft = NewFaultyNode(src, tc.self, 7)
			}
			defer ft.Close()
			if err := ft.SetFaults(FrameFaults{WANDelay: wan, WANJitter: jitter}); err != nil {
				t.Fatal(err)
			}
			const frames = 4
			sent := time.Now()
			for range frames {
				if err := ft.Send(tc.to, Frame{Rule: "r", Payload: []byte("x")}); err != nil {
					t.Fatal(err)
				}
			}
			mu.Lock()
			inSend := len(arrived)
			mu.Unlock()
			if !tc.wantWAN && inSend != frames {
				t.Fatalf("%d of %d frames delivered within Send, want all (no WAN delay in a region)", inSend, frames)
			}
			for i := range frames {
				select {
				case <-got:
				case <-time.After(10 * time.Second):
					t.Fatalf("%d of %d frames arrived within 10s", i, frames)
				}
			}
			st := ft.Stats()
			if tc.wantWAN {
				mu.Lock()
				for _, at := range arrived {
					if d := at.Sub(sent); d < wan {
						t.Errorf("a cross-region frame arrived %v after Send, before the WAN delay %v", d, wan)
					}
				}
				mu.Unlock()
				if st.WANDelayed != frames || st.Delayed != frames {
					t.Errorf("stats %+v: want WANDelayed and Delayed %d", st, frames)
				}
			} else if st.WANDelayed != 0 || st.Delayed != 0 {
				t.Errorf("stats %+v: want nothing delayed inside a region", st)
			}
		})
	}
}

// The WAN delay adds to Delay, and Partition keeps it (it replaces the
// blocked peers only).
func TestFaultyWANDelayAddsAndSurvivesPartition(t *testing.T) {
	net := NewMemNetwork()
	src, _ := net.Endpoint("eu.n0")
	dst, _ := net.Endpoint("us.n1")
	arrived := make(chan time.Time, 1)
	dst.Listen(func(Frame) { arrived <- time.Now() })
	ft := NewFaultyNode(src, "eu.n0", 1)
	other := NewFaultyNode(dst, "us.n1", 2)
	defer ft.Close()
	defer other.Close()
	if err := ft.SetFaults(FrameFaults{Delay: 40 * time.Millisecond, WANDelay: 60 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	ts := map[strategy.NodeID]*Faulty{"eu.n0": ft, "us.n1": other}
	Partition(ts, []strategy.NodeID{"eu.n0"}, []strategy.NodeID{"us.n1"})
	if err := ft.Send("us.n1", Frame{Rule: "r"}); err != nil {
		t.Fatal(err)
	}
	if st := ft.Stats(); st.Blocked != 1 {
		t.Fatalf("stats %+v after a send across the partition, want Blocked 1", st)
	}
	Partition(ts) // heal
	sent := time.Now()
	if err := ft.Send("us.n1", Frame{Rule: "r"}); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-arrived:
		if d := at.Sub(sent); d < 100*time.Millisecond {
			t.Errorf("frame arrived after %v, want at least Delay + WANDelay = 100ms", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no frame within 10s after the heal")
	}
}
