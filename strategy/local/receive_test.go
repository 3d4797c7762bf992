package local_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/remtest"
	"github.com/tokenmesh/tokenmesh/strategy/local"
)

// local and central send no messages: one received is refused with
// strategy.ErrUnexpectedMessage, naming the strategy and the sender.
func TestReceiveUnexpected(t *testing.T) {
	for _, name := range []string{"local", "central"} {
		s, err := local.New(name, remtest.Config(1, 5, []strategy.NodeID{"n0", "n7"}))
		if err != nil {
			t.Fatal(err)
		}
		var fx strategy.Effects
		err = s.Receive(0, "n7", []byte("hello"), &fx)
		if !errors.Is(err, strategy.ErrUnexpectedMessage) {
			t.Fatalf("%s: Receive: %v; want strategy.ErrUnexpectedMessage", name, err)
		}
		if msg := err.Error(); !strings.HasPrefix(msg, name+":") || !strings.Contains(msg, "n7") {
			t.Fatalf("%s: error %q does not name the strategy and the sender", name, msg)
		}
	}
}
