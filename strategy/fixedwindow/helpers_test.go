package fixedwindow

import peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"

func mustMarshalForward(key string, tokens int64) []byte {
	return mustMarshal(&peerv1.OwnerMessage{Body: &peerv1.OwnerMessage_Forward{Forward: &peerv1.OwnerForward{RequestId: 1, Key: key, Tokens: tokens}}})
}
