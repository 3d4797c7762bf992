package fixedwindow

import (
	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy/internal/wire"
)

func mustMarshalForward(key string, tokens int64) []byte {
	return wire.MustMarshal(&peerv1.OwnerMessage{Body: &peerv1.OwnerMessage_Forward{Forward: &peerv1.OwnerForward{RequestId: 1, Key: key, Tokens: tokens}}})
}
