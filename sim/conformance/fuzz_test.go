package conformance_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/sim/conformance"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/registry"
)

// framesTo records the first frames node n0 receives in a simulated run of
// info on 3 nodes: well-formed frames, the fuzzer's starting points.
func framesTo(t testing.TB, info registry.Info, most int) [][]byte {
	var got [][]byte
	newS := func(cfg strategy.Config) (strategy.Strategy, error) {
		s, err := info.New(cfg)
		if err != nil || cfg.Self != "n0" {
			return s, err
		}
		return &capture{Strategy: s, frames: &got, most: most}, nil
	}
	tr := conformance.Workload(9, 3, 20, 5*time.Second)
	if _, err := run(t, info, tr, 3, nil, 9, newS); err != nil {
		t.Fatal(err)
	}
	return got
}

type capture struct {
	strategy.Strategy
	frames *[][]byte
	most   int
}

func (c *capture) Receive(now time.Duration, from strategy.NodeID, payload []byte, fx *strategy.Effects) error {
	if len(*c.frames) < c.most {
		*c.frames = append(*c.frames, bytes.Clone(payload))
	}
	return c.Strategy.Receive(now, from, payload, fx)
}

func (c *capture) SetExpected(now time.Duration, expected []strategy.NodeID, fx *strategy.Effects) {
	if s, ok := c.Strategy.(strategy.Conserver); ok {
		s.SetExpected(now, expected, fx)
	}
}

// FuzzReceive gives node n0 of any registered strategy (which: the first
// byte) an arbitrary frame from n1 between requests, as a Twin: a frame it
// refuses must change nothing (the twin that never got it decides the same
// afterwards), one it accepts must be accepted alike by the twin, and no
// frame may panic. Seeds: frames n0 received in a simulated run.
func FuzzReceive(f *testing.F) {
	list := registry.List()
	for i, info := range list {
		for _, fr := range framesTo(f, info, 3) {
			f.Add(uint8(i), fr)
		}
		f.Add(uint8(i), []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	}
	f.Fuzz(func(t *testing.T, which uint8, payload []byte) {
		info := list[int(which)%len(list)]
		members := []strategy.NodeID{"n0", "n1", "n2"}
		tw, err := conformance.NewTwin(info.New, strategy.Config{Self: "n0", Members: members, Rate: rate, Burst: burst,
			LatencyHint: 2 * time.Millisecond}, 1)
		if err != nil {
			t.Fatal(err)
		}
		var fx strategy.Effects
		tw.Start(0, &fx)
		now := time.Duration(0)
		for k := range 40 {
			now += 30 * time.Millisecond
			fx.Reset()
			tw.Tick(now, &fx)
			if k == 10 || k == 20 {
				tw.Inject(now, "n1", payload)
			}
			fx.Reset()
			tw.Request(now, strategy.Request{ID: uint64(k), Key: []string{"a", "b"}[k%2], Tokens: 1, Arrival: now}, &fx)
		}
		if tw.Err != nil {
			t.Fatalf("%s: %v", info.Name, tw.Err)
		}
	})
}
