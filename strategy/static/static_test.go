package static

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// The sub-token buckets of all members sum to (r, b) exactly (SRTM §1.2),
// before and after a membership change: a fresh key admits exactly b tokens
// across the cluster at one instant.
func TestSharesSumToBurst(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 12).Draw(t, "n")
		burst := rapid.Int64Range(1, 50).Draw(t, "burst")
		var ms []strategy.NodeID
		for i := 0; i < n; i++ {
			ms = append(ms, strategy.NodeID(fmt.Sprintf("n%02d", i)))
		}
		keep := rapid.IntRange(1, n).Draw(t, "keep")
		admitted := 0
		for _, self := range ms[:keep] {
			s, err := New(strategy.Config{Self: self, Members: ms, Rate: bucket.Rate{Tokens: 3, Per: time.Second}, Burst: burst, Rand: rand.New(rand.NewPCG(1, 1))})
			if err != nil {
				t.Fatal(err)
			}
			fx := &strategy.Effects{}
			s.SetMembers(0, ms[:keep], fx) // the others left: re-split over keep
			for i := 0; i < 100; i++ {
				if d, _ := s.Request(0, strategy.Request{ID: uint64(i), Key: "k", Tokens: 1}, fx); d.Allowed {
					admitted++
				}
			}
		}
		if int64(admitted) != burst {
			t.Fatalf("%d of %d members admitted %d tokens at once, want the burst %d", keep, n, admitted, burst)
		}
	})
}

func TestSelfNotMember(t *testing.T) {
	_, err := New(strategy.Config{Self: "x", Members: []strategy.NodeID{"a"}, Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 1, Rand: rand.New(rand.NewPCG(1, 1))})
	if err == nil {
		t.Fatal("a node outside the membership was built")
	}
}

// static sends no messages: one received is refused with
// strategy.ErrUnexpectedMessage, naming the strategy and the sender.
func TestReceiveUnexpected(t *testing.T) {
	s, err := New(strategy.Config{Self: "n0", Members: []strategy.NodeID{"n0", "n1"}, Rate: bucket.Rate{Tokens: 1, Per: time.Second}, Burst: 4, Rand: rand.New(rand.NewPCG(1, 1))})
	if err != nil {
		t.Fatal(err)
	}
	var fx strategy.Effects
	err = s.Receive(0, "n1", []byte{1, 2, 3}, &fx)
	if !errors.Is(err, strategy.ErrUnexpectedMessage) {
		t.Fatalf("Receive: %v; want strategy.ErrUnexpectedMessage", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "static") || !strings.Contains(msg, "n1") {
		t.Fatalf("error %q does not name the strategy and the sender", msg)
	}
}
