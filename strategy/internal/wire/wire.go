// Package wire holds what the strategies' peer encodings share (ours).
package wire

import (
	"fmt"

	"google.golang.org/protobuf/proto"
)

// MustMarshal encodes m, one of the strategy's own api/peer/v1 messages.
// It panics if encoding fails, which it cannot for those messages (no
// required fields, valid UTF-8 only from validated keys): the panic names
// the message type.
func MustMarshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("marshal %T: %v", m, err))
	}
	return b
}
