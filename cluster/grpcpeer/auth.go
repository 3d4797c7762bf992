package grpcpeer

// Frame authentication (ours; the standard primitives are RFC 2104's HMAC
// and RFC 5869's HKDF, from the Go standard library).
//
// With Config.SecretKey set, every frame a transport sends carries
// (incarnation, seq, mac): incarnation names the sending process (its start
// time in Unix nanoseconds, so that a restart has a larger one), seq numbers
// the frames that incarnation sends to one receiver (1, 2, ...), and mac is
// HMAC-SHA256 over FrameMAC's layout, keyed with DeriveFrameKey(secret). The
// receiver refuses (and counts) a frame whose MAC does not verify (bad_mac:
// it also ends the stream), and a frame it has seen or that is too old
// (replay): per sender it keeps the newest incarnation it accepted and a
// window of the last ReplayWindow sequence numbers. A newer incarnation
// replaces the old one; an older one is refused as a replay.
//
// A receiver that restarts forgets its windows. Wire version 2 (see
// "Wire versions" in the package docs) closes that: a v2 frame also names
// the receiver's incarnation (to_incarnation, learned from the receiver's
// Hello answer) under its MAC, and a receiver refuses a v2 frame naming
// any incarnation but its own (stale_incarnation), so frames recorded
// before the receiver restarted are worthless after it. Version 1 frames
// (no to_incarnation) are accepted only from a sender the membership
// reports as speaking version 1 only (a node of the previous build,
// during a rolling upgrade): such a sender's frames recorded before the
// receiver's restart can still be replayed to it until the sender's next
// frames raise the window past them (strategies treat a replayed frame as
// a duplicate, which every one of them tolerates from the network anyway).
// A sender whose clock stepped back across a restart is refused as stale
// until the receivers restart; peers run NTP for the cluster epoch anyway.

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"
	"log/slog"
	"sync"
	"time"

	"github.com/tokenmesh/tokenmesh/internal/logthrottle"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// FrameKeyInfo is HKDF's info string for the frame MAC key: a key derived
// for frames is never the gossip key itself.
const FrameKeyInfo = "tokenmesh peer frame MAC v1"

// MACSize is the length of a frame's MAC, in bytes (HMAC-SHA256).
const MACSize = sha256.Size

// ReplayWindow is how many sequence numbers below the newest one a
// receiver still accepts (once each) from a sender incarnation: frames of
// one stream arrive in order, and this leaves room for a redialled stream
// overtaking the tail of the old one.
const ReplayWindow = 1024

// Reasons a frame or stream is refused; the label values of the refused
// frames metric (see Stats.Refusals).
const (
	ReasonBadMAC         = "bad_mac"         // missing or wrong MAC (wrong key, forged, altered)
	ReasonReplay         = "replay"          // a sequence number seen or below the window, or an old incarnation
	ReasonUnknownSender  = "unknown_sender"  // a stream naming no sender or one not in the peer book
	ReasonBadCertificate = "bad_certificate" // mTLS: no verified client certificate, or one naming someone else
	ReasonOversize       = "oversize"        // a stream message above the gRPC receive limit (MaxRecvMsgSize, 4 MiB): the stream ends
	// ReasonNotMember is not an attack: a frame whose MAC verifies (its
	// sender holds the secret key) from a node not in the peer book yet,
	// or no longer: it is dropped and its stream kept. It ticks while
	// views converge, at a restart or a heal (the sender learned of this
	// node before this node learned of it). Only with a secret key: without
	// one nothing proves the sender's name, and the stream is refused as
	// unknown_sender.
	ReasonNotMember = "not_member"
	// ReasonUnknownVersion: a frame of a wire version this node does not
	// speak (above WireVersionMax): refused without decoding its payload;
	// the stream goes on.
	ReasonUnknownVersion = "unknown_version"
	// ReasonOldVersion: a version 1 frame from a sender the membership
	// reports as speaking version 2 or later (or does not report at all):
	// such a sender sends this node v2 frames, so a v1 frame claiming it
	// is a recorded one replayed (or its sender's record is stale).
	ReasonOldVersion = "old_version"
	// ReasonStaleIncarnation: a v2 frame addressed to another incarnation
	// of this node (recorded before its restart and replayed, or sent by a
	// peer that asked Hello of the previous process): the stream ends, so
	// an honest sender redials and asks Hello again.
	ReasonStaleIncarnation = "stale_incarnation"
)

// Wire versions this build speaks (package docs, "Wire versions").
const (
	// WireV1 is the frame of the build before versions: MAC over FrameMAC's
	// layout, no receiver incarnation. Read for one release more, for
	// rolling upgrades from it.
	WireV1 = 1
	// WireV2 adds the receiver's incarnation under the MAC (FrameMACV2).
	WireV2 = 2
	// WireVersionMin and WireVersionMax bound the versions this build
	// reads and sends.
	WireVersionMin = WireV1
	WireVersionMax = WireV2
)

// DeriveFrameKey derives the frame MAC key from the cluster secret with
// HKDF-SHA256 (RFC 5869; no salt, info FrameKeyInfo), 32 bytes. Errors: an
// empty secret.
func DeriveFrameKey(secret []byte) ([]byte, error) {
	if len(secret) == 0 {
		return nil, errors.New("grpcpeer: the secret key is empty")
	}
	return hkdf.Key(sha256.New, secret, nil, FrameKeyInfo, 32)
}

// macDomain separates these MACs from any other use of the key, and
// version 2's from version 1's.
const (
	macDomain   = "tokenmesh-frame-v1\x00"
	macDomainV2 = "tokenmesh-frame-v2\x00"
)

// FrameMAC appends to dst the HMAC-SHA256 of one frame under h (an
// hmac.New(sha256.New, frameKey), reset here). The MAC covers, in order:
// the domain string "tokenmesh-frame-v1\x00", the sender id, the receiver
// id and the rule (each as a 4-byte big-endian length and its bytes), the
// incarnation and seq (8 bytes big-endian each) and the payload. The
// receiver id makes a frame recorded on one link worthless on another.
func FrameMAC(dst []byte, h hash.Hash, from, to strategy.NodeID, rule string, incarnation, seq uint64, payload []byte) []byte {
	m := framer{h: h}
	return m.sum(dst, from, to, rule, incarnation, seq, payload)
}

// FrameMACV2 is FrameMAC for a wire version 2 frame: the domain string
// "tokenmesh-frame-v2\x00", the sender id, the receiver id and the rule
// (each as a 4-byte big-endian length and its bytes), the version (4 bytes
// big-endian, 2), the incarnation, seq and toIncarnation (the receiver's
// incarnation; 8 bytes big-endian each) and the payload. The domain string
// keeps a v2 MAC from ever verifying as a v1 one (stripping version and
// to_incarnation does not make a v1 frame of it).
func FrameMACV2(dst []byte, h hash.Hash, from, to strategy.NodeID, rule string, incarnation, seq, toIncarnation uint64, payload []byte) []byte {
	m := framer{h: h}
	return m.sumV2(dst, from, to, rule, incarnation, seq, toIncarnation, payload)
}

// framer computes FrameMACs with one keyed hash, reusing its header
// buffer (FrameMAC would allocate one per frame). Not safe for concurrent
// use: each sender and each inbound stream has its own.
type framer struct {
	h   hash.Hash
	hdr []byte
}

func newFramer(key []byte) *framer { return &framer{h: newMAC(key)} }

// sum appends the MAC of one frame to dst (see FrameMAC).
func (m *framer) sum(dst []byte, from, to strategy.NodeID, rule string, incarnation, seq uint64, payload []byte) []byte {
	m.h.Reset()
	hdr := append(m.hdr[:0], macDomain...)
	for _, s := range [...]string{string(from), string(to), rule} {
		hdr = binary.BigEndian.AppendUint32(hdr, uint32(len(s)))
		hdr = append(hdr, s...)
	}
	hdr = binary.BigEndian.AppendUint64(hdr, incarnation)
	hdr = binary.BigEndian.AppendUint64(hdr, seq)
	m.hdr = hdr
	m.h.Write(hdr)
	m.h.Write(payload)
	return m.h.Sum(dst)
}

// sumV2 appends the MAC of one version 2 frame to dst (see FrameMACV2).
func (m *framer) sumV2(dst []byte, from, to strategy.NodeID, rule string, incarnation, seq, toIncarnation uint64, payload []byte) []byte {
	m.h.Reset()
	hdr := append(m.hdr[:0], macDomainV2...)
	for _, s := range [...]string{string(from), string(to), rule} {
		hdr = binary.BigEndian.AppendUint32(hdr, uint32(len(s)))
		hdr = append(hdr, s...)
	}
	hdr = binary.BigEndian.AppendUint32(hdr, WireV2)
	hdr = binary.BigEndian.AppendUint64(hdr, incarnation)
	hdr = binary.BigEndian.AppendUint64(hdr, seq)
	hdr = binary.BigEndian.AppendUint64(hdr, toIncarnation)
	m.hdr = hdr
	m.h.Write(hdr)
	m.h.Write(payload)
	return m.h.Sum(dst)
}

// newMAC returns a keyed HMAC-SHA256.
func newMAC(key []byte) hash.Hash { return hmac.New(sha256.New, key) }

// replayWindow is one sender incarnation's accepted sequence numbers: the
// newest (top) and a bitmap of the ReplayWindow numbers up to it.
type replayWindow struct {
	inc  uint64
	top  uint64
	seen [ReplayWindow / 64]uint64
}

func (w *replayWindow) bit(seq uint64) (word int, mask uint64) {
	i := seq % ReplayWindow
	return int(i / 64), 1 << (i % 64)
}

// admit records seq and reports whether it is new (above the window's
// floor and not seen).
func (w *replayWindow) admit(seq uint64) bool {
	switch {
	case seq == 0:
		return false
	case seq > w.top:
		if seq-w.top >= ReplayWindow {
			w.seen = [ReplayWindow / 64]uint64{}
		} else {
			for s := w.top + 1; s < seq; s++ {
				i, m := w.bit(s)
				w.seen[i] &^= m
			}
		}
		w.top = seq
		i, m := w.bit(seq)
		w.seen[i] |= m
		return true
	case w.top-seq >= ReplayWindow:
		return false
	}
	i, m := w.bit(seq)
	if w.seen[i]&m != 0 {
		return false
	}
	w.seen[i] |= m
	return true
}

// replayGuard holds a replay window per sender.
type replayGuard struct {
	mu sync.Mutex
	by map[strategy.NodeID]*replayWindow
}

// admit reports whether (inc, seq) from sender is fresh, and records it.
// A newer incarnation replaces the sender's window; an older one is
// refused.
func (g *replayGuard) admit(from strategy.NodeID, inc, seq uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	w := g.by[from]
	switch {
	case w == nil || inc > w.inc:
		w = &replayWindow{inc: inc}
		if g.by == nil {
			g.by = map[strategy.NodeID]*replayWindow{}
		}
		g.by[from] = w
	case inc < w.inc:
		return false
	}
	return w.admit(seq)
}

// RefusalLogEvery is the least time between two log lines about refused
// frames of one reason; the refusals in between are counted (Stats) and
// summed up in the next line.
const RefusalLogEvery = 10 * time.Second

// refusalLog logs refusals, at most one line per reason per RefusalLogEvery.
type refusalLog struct {
	log      *slog.Logger
	throttle logthrottle.Throttle // keyed by reason
}

func (l *refusalLog) refused(reason string, from strategy.NodeID, detail string) {
	suppressed, ok := l.throttle.Allow(reason)
	if !ok {
		return
	}
	l.log.Warn("grpcpeer: refused a peer frame", "reason", reason, "from", string(from), "detail", detail,
		"suppressed_since_last_line", suppressed)
}
