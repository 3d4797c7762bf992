// Package grpcpeer is a cluster.Transport over gRPC streams: every node
// serves the PeerTransport service (api/peer/v1/transport.proto), and sends
// to each peer over one long-lived client stream, dialled lazily by a
// per-peer sender goroutine and redialled with backoff when it fails.
//
// The sender names itself in the stream's metadata; the receiver delivers
// frames only from senders in its peer book (Config.Peers, SetPeers), and,
// with TLS, only when the client certificate names the sender (its DNS SAN
// or common name equals the node id). A refused stream ends with
// PERMISSION_DENIED before any of its frames reaches the node. With
// Config.SecretKey, every frame also carries an HMAC and a sequence number
// (auth.go): a frame whose MAC does not verify, or a replayed one, is
// refused and counted, so a process that reaches the port without the key
// cannot speak for a member even without TLS. With the key a stream from a
// node not in the peer book is kept, since its MACs prove its name: its
// frames are dropped (counted as not_member) until the node is in the
// book, as happens while views converge after a restart or a heal.
//
// The sender coalesces: when several frames are queued for a peer, it sends
// those already queued (up to MaxBatchFrames frames and about
// MaxBatchBytes) as one PeerBatch message on the Batch stream; it never
// waits to fill a batch (when a single frame is queued it yields once to
// the goroutines ready to run, no timer, so that frames sent in the same
// moment share the message). The connections use fixed flow-control
// windows (PeerWindow). The receiver delivers a batch's frames in order,
// checking each as a frame of its own. A peer that does not serve Batch
// (UNIMPLEMENTED, a node from before it) is sent one frame per message on
// the Stream stream instead.
//
// Wire versions. Every frame carries its wire version (PeerFrame.version;
// 0 from a node of the build before versions, read as 1). Before it opens
// a stream the sender asks the callee Hello, which answers with the
// versions it speaks and its incarnation; a callee that answers
// UNIMPLEMENTED is of the build before versions and speaks version 1
// only. The link then uses the highest version both ends speak
// (Stats.Links counts the links by version). A Hello answer is bounded
// (versions 1 to 255, min <= max, one version in common, or no link). A
// receiver refuses, counts and does not decode a frame of a version above
// the highest it speaks (unknown_version). What each version adds:
//
//   - 1: the frame authentication of auth.go (MAC over FrameMAC's layout).
//   - 2: to_incarnation, the callee's incarnation from its Hello answer,
//     covered with the version by a MAC of its own layout (FrameMACV2); a
//     receiver refuses a v2 frame naming another incarnation of itself
//     (stale_incarnation, the stream ends), so frames recorded before it
//     restarted cannot be replayed to it.
//
// The versions each member speaks are also gossiped (package membership,
// "Wire versions") and handed to SetPeerVersions: from then on a version 1
// frame is accepted only from a member gossip (or its own Hello answer)
// reports as speaking version 1 only, i.e. a node of the previous build
// during a rolling upgrade (old_version otherwise). The cluster as a whole
// speaks the highest version all live members share
// (membership.ClusterWireVersion); each link speaks the highest its two
// ends share, which is at least that, so new nodes protect their links to
// each other from the first upgraded pair on. Residual risk during an
// upgrade: the version 1 frames of a node of the previous build recorded
// before a receiver restarted can be replayed to the restarted receiver
// until that node is upgraded or its next frames pass them (as before
// versions); a node restarted under another build before it was declared
// dead keeps its old gossip entry until its next join, corrected by the
// receiver's own Hello to it when their link is redialled.
//
// The next change of an encoding takes version 3: the sender chooses it
// only for a callee whose Hello names it, and the build that introduces it
// keeps reading (and sending to older callees) version 2, for at least one
// release. A change of a strategy's payload that every node must read the
// same way can key on the version all members share.
package grpcpeer

import (
	"context"
	"crypto/hmac"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/tokenmesh/tokenmesh/api/peer/v1/transportpb"
	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/internal/logthrottle"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// FromKey is the stream metadata key naming the sending node.
const FromKey = "tokenmesh-from"

// Defaults of Config's zero fields.
const (
	// DefaultQueue is the per-peer send queue length, in frames.
	DefaultQueue = 1024
	// DefaultMinBackoff is the first wait before redialling a failed peer.
	DefaultMinBackoff = 50 * time.Millisecond
	// DefaultMaxBackoff caps the redial wait (it doubles per failure).
	DefaultMaxBackoff = 2 * time.Second
)

// Limits of one PeerBatch, well below gRPC's default 4 MiB receive limit.
const (
	// MaxBatchFrames caps the frames of one batch.
	MaxBatchFrames = 256
	// MaxBatchBytes caps a batch's encoded size, estimated from above: a
	// queued frame that would take the batch past it waits for the next
	// one, and a frame larger than it travels alone.
	MaxBatchBytes = 1 << 20
)

// PeerWindow is the HTTP/2 flow-control window of the peer connections
// and of each peer stream, in bytes, on both sides. Setting it turns off
// grpc-go's dynamic window (its BDP estimator), which pings the other side
// about once per round trip while data flows: at 3 nodes under owner that
// was about 0.4 writes and 0.7 reads (syscalls) per check on top of the
// frames' own (docs/PERFORMANCE.md, "Owner at 3 nodes"). 1 MiB is the
// size of one PeerBatch (MaxBatchBytes) and above what the estimator
// grows to on loopback; a stream is long-lived, so the window is set up
// once per connection. Ours (grpc-go's options).
const PeerWindow = 1 << 20

// Keepalive of the peer connections.
const (
	keepaliveTime    = 10 * time.Second
	keepaliveTimeout = 5 * time.Second
)

// Config is one node's transport.
type Config struct {
	// Self is this node's id, sent in every outbound stream's metadata
	// (FromKey); required.
	Self strategy.NodeID
	// ListenAddr is the TCP "host:port" to serve on, e.g. "127.0.0.1:0"
	// (port 0 picks one; Addr reports the bound address).
	ListenAddr string
	// Peers is the address book: every other member's node id and its
	// ListenAddr. Frames are sent only to, and accepted only from, these
	// (an entry for Self is ignored).
	Peers map[strategy.NodeID]string
	// TLS, when set, is used for both the server and the clients (mTLS:
	// give it Certificates, RootCAs, ClientCAs and ClientAuth:
	// tls.RequireAndVerifyClientCert). A client verifies the server's
	// certificate against the peer's node id unless ServerName is set; the
	// server requires the client certificate to name the sender. Nil:
	// plaintext, and the sender's id is taken on its word (unless
	// SecretKey is set).
	TLS *tls.Config
	// SecretKey, when set, authenticates every frame: the sender MACs it
	// with a key derived from SecretKey (DeriveFrameKey), and the receiver
	// refuses frames whose MAC does not verify or that replay an earlier
	// frame (see auth.go). Every node of a cluster needs the same key. Nil:
	// frames carry no MAC and none is checked.
	SecretKey []byte
	// Incarnation names this process in its frames' MACs (replay
	// protection); it must grow across restarts of a node. Zero: the
	// current time in Unix nanoseconds.
	Incarnation uint64
	// Logger receives the refusal log lines (at most one per reason per
	// RefusalLogEvery). Nil: slog.Default().
	Logger *slog.Logger
	// Queue is the per-peer send queue length in frames (default
	// DefaultQueue); a frame that finds it full is dropped and counted.
	Queue int
	// MinBackoff and MaxBackoff bound the wait before redialling a peer
	// whose stream failed: it starts at MinBackoff and doubles per failure
	// up to MaxBackoff (defaults DefaultMinBackoff, DefaultMaxBackoff; a
	// MaxBackoff below MinBackoff is replaced by the larger of
	// DefaultMaxBackoff and MinBackoff).
	MinBackoff, MaxBackoff time.Duration
}

// Stats counts the transport's frames.
type Stats struct {
	Sent     int64 // frames written to a peer stream
	Batches  int64 // stream messages carrying them (Sent/Batches frames per message)
	Dropped  int64 // frames dropped because the peer's queue was full
	Lost     int64 // frames whose stream write failed
	Received int64 // frames handed to the Listen callback
	Refused  int64 // streams refused (unknown sender, bad certificate, bad MAC)
	Dials    int64 // streams opened
	// Refusals counts refused streams and frames by reason (ReasonBadMAC,
	// ReasonReplay, ReasonUnknownSender, ReasonBadCertificate,
	// ReasonOversize, ReasonNotMember, ReasonUnknownVersion,
	// ReasonOldVersion, ReasonStaleIncarnation); every reason is present,
	// zero included.
	Refusals map[string]int64
	// Links counts the peer links dialled, by the wire version chosen for
	// them (the highest both ends speak, from Hello).
	Links map[int]int64
}

// Transport is a cluster.Transport over gRPC. Its methods are safe for
// concurrent use.
type Transport struct {
	cfg Config
	lis net.Listener
	srv *grpc.Server

	recv atomic.Pointer[func(cluster.Frame)]
	book atomic.Pointer[map[strategy.NodeID]string]

	mu     sync.Mutex
	peers  map[strategy.NodeID]*sender
	closed bool
	wg     sync.WaitGroup

	sent, batches, dropped, lost, received, refused, dials atomic.Int64

	frameKey    []byte // nil: frames are not authenticated
	incarnation uint64
	// seq is the sequence number of the last frame signed, over every
	// peer: a sender made again for a peer (it left the membership and came
	// back, as after a partition heals) goes on above the numbers that
	// peer's replay window has seen; a per-sender count restarting at 1
	// would have every frame refused as a replay until it caught up.
	seq                                      atomic.Uint64
	replay                                   replayGuard
	rlog                                     refusalLog
	badMAC, replayed, unknownSender, badCert atomic.Int64
	oversize, notMember                      atomic.Int64
	unknownVersion, oldVersion, staleInc     atomic.Int64
	linksV1, linksV2                         atomic.Int64

	// Peers' wire versions (the highest each speaks), for the acceptance
	// of version 1 frames (acceptV1): from the membership (SetPeerVersions)
	// and from Hello answers, the newest change winning.
	vmu         sync.Mutex
	versionsSet bool                       // SetPeerVersions was called
	peerVer     map[strategy.NodeID]uint32 // the newest known
	msVer       map[strategy.NodeID]uint32 // the membership's last report
}

var _ cluster.Transport = (*Transport)(nil)

// New listens on cfg.ListenAddr and starts serving; senders to peers are
// started lazily by Send. Close releases the listener and every goroutine.
// Errors: an empty Self, a listen failure (wrapped).
func New(cfg Config) (*Transport, error) {
	if cfg.Self == "" {
		return nil, errors.New("grpcpeer: Self is empty")
	}
	if cfg.Queue <= 0 {
		cfg.Queue = DefaultQueue
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(DefaultMaxBackoff, cfg.MinBackoff)
	}
	var frameKey []byte
	if len(cfg.SecretKey) > 0 {
		var err error
		if frameKey, err = DeriveFrameKey(cfg.SecretKey); err != nil {
			return nil, err
		}
	}
	if cfg.Incarnation == 0 {
		cfg.Incarnation = uint64(time.Now().UnixNano())
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	lis, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("grpcpeer: %w", err)
	}
	t := &Transport{cfg: cfg, lis: lis, peers: map[strategy.NodeID]*sender{}, frameKey: frameKey,
		incarnation: cfg.Incarnation, rlog: refusalLog{log: cfg.Logger, throttle: logthrottle.Throttle{Every: RefusalLogEvery}}}
	opts := []grpc.ServerOption{
		// Clients ping idle streams (see dial); allow it.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveTime / 2, PermitWithoutStream: true}),
		// Fixed flow-control windows (see PeerWindow).
		grpc.InitialWindowSize(PeerWindow), grpc.InitialConnWindowSize(PeerWindow),
	}
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	t.srv = grpc.NewServer(opts...)
	transportpb.RegisterPeerTransportServer(t.srv, &server{t: t})
	t.SetPeers(cfg.Peers)
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		_ = t.srv.Serve(lis)
	}()
	return t, nil
}

// Addr is the bound listen address, "host:port".
func (t *Transport) Addr() string { return t.lis.Addr().String() }

// Stats returns the counts so far.
func (t *Transport) Stats() Stats {
	return Stats{Sent: t.sent.Load(), Batches: t.batches.Load(), Dropped: t.dropped.Load(), Lost: t.lost.Load(),
		Received: t.received.Load(), Refused: t.refused.Load(), Dials: t.dials.Load(),
		Refusals: map[string]int64{ReasonBadMAC: t.badMAC.Load(), ReasonReplay: t.replayed.Load(),
			ReasonUnknownSender: t.unknownSender.Load(), ReasonBadCertificate: t.badCert.Load(),
			ReasonOversize: t.oversize.Load(), ReasonNotMember: t.notMember.Load(),
			ReasonUnknownVersion: t.unknownVersion.Load(), ReasonOldVersion: t.oldVersion.Load(),
			ReasonStaleIncarnation: t.staleInc.Load()},
		Links: map[int]int64{WireV1: t.linksV1.Load(), WireV2: t.linksV2.Load()}}
}

// Incarnation is this transport's incarnation (Config.Incarnation or its
// default): v2 frames to this node must name it.
func (t *Transport) Incarnation() uint64 { return t.incarnation }

// SetPeerVersions records the highest wire version each member speaks, as
// the membership reports it (membership.Membership.WireVersions: 1 for a
// node of the build before versions). From the first call on, a version 1
// frame is accepted only from a sender recorded at version 1; before it
// (no membership, as in tests with a fixed peer book), from any sender, as
// before versions. A member's entry replaces what a Hello answer taught
// only when the membership's report of it changed (a report repeated with
// the other members' changes does not undo a newer Hello). Versions are
// bounded: 0 or above 255 is recorded as unknown (v1 refused).
func (t *Transport) SetPeerVersions(versions map[strategy.NodeID]uint32) {
	t.vmu.Lock()
	defer t.vmu.Unlock()
	if t.peerVer == nil {
		t.peerVer = map[strategy.NodeID]uint32{}
	}
	ms := make(map[strategy.NodeID]uint32, len(versions))
	for id, v := range versions {
		if v > 255 {
			v = 0
		}
		ms[id] = v
		if old, ok := t.msVer[id]; !ok || old != v {
			t.peerVer[id] = v
		}
	}
	t.msVer = ms
	t.versionsSet = true
}

// learned records the highest version peer id answered Hello with.
func (t *Transport) learned(id strategy.NodeID, v uint32) {
	t.vmu.Lock()
	defer t.vmu.Unlock()
	if t.peerVer == nil {
		t.peerVer = map[strategy.NodeID]uint32{}
	}
	t.peerVer[id] = v
}

// acceptV1 reports whether a version 1 frame from id may be delivered: id
// speaks version 1 only, or no membership reports versions.
func (t *Transport) acceptV1(id strategy.NodeID) bool {
	t.vmu.Lock()
	defer t.vmu.Unlock()
	return !t.versionsSet || t.peerVer[id] == WireV1
}

// SetPeers replaces the address book. Senders to removed peers stop (their
// queued frames are lost), peers whose address changed are redialled, and
// frames from removed peers are refused from now on.
func (t *Transport) SetPeers(peers map[strategy.NodeID]string) {
	book := make(map[strategy.NodeID]string, len(peers))
	for id, addr := range peers {
		if id != t.cfg.Self && id != "" {
			book[id] = addr
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	t.book.Store(&book)
	// Replay windows are kept for removed peers too: forgetting one would
	// let its recorded frames be replayed once it is a member again. One
	// window per sender name ever seen is small.
	for id, s := range t.peers {
		addr, ok := book[id]
		if !ok {
			s.stop()
			delete(t.peers, id)
		} else if addr != s.getAddr() {
			s.setAddr(addr)
		}
	}
}

// Send queues f for peer to and returns at once. Errors: to is not in the
// peer book, the transport is closed. A frame that finds the peer's queue
// full is dropped (counted, nil error).
func (t *Transport) Send(to strategy.NodeID, f cluster.Frame) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return cluster.ErrTransportClosed
	}
	s := t.peers[to]
	if s == nil {
		addr, ok := (*t.book.Load())[to]
		if !ok {
			t.mu.Unlock()
			return fmt.Errorf("grpcpeer: peer %q is not in the peer book", to)
		}
		s = t.newSender(to, addr)
		t.peers[to] = s
	}
	t.mu.Unlock()
	fr := &transportpb.PeerFrame{Rule: f.Rule, Payload: append([]byte(nil), f.Payload...)}
	select {
	case s.q <- fr:
	default:
		t.dropped.Add(1)
	}
	return nil
}

// Listen registers the receive callback; frames received before are dropped.
func (t *Transport) Listen(recv func(cluster.Frame)) { t.recv.Store(&recv) }

// Close stops the server and every sender; queued frames are lost. It is
// idempotent.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	for id, s := range t.peers {
		s.stop()
		delete(t.peers, id)
	}
	t.mu.Unlock()
	t.srv.Stop() // closes the listener and every inbound stream
	t.wg.Wait()
	return nil
}

// known reports whether id is in the peer book.
func (t *Transport) known(id strategy.NodeID) bool {
	_, ok := (*t.book.Load())[id]
	return ok
}

// server receives the inbound streams.
type server struct {
	transportpb.UnimplementedPeerTransportServer
	t *Transport
}

// Stream receives one frame per message (senders from before Batch).
func (s *server) Stream(stream grpc.BidiStreamingServer[transportpb.PeerFrame, transportpb.PeerAck]) error {
	return receive(s.t, stream, func(fr *transportpb.PeerFrame) []*transportpb.PeerFrame {
		return []*transportpb.PeerFrame{fr}
	})
}

// Hello answers with the versions this node speaks and its incarnation.
// The request is not read beyond its decoding (its max_version is for the
// logs of a later version).
func (s *server) Hello(ctx context.Context, _ *transportpb.PeerHello) (*transportpb.PeerHelloReply, error) {
	return &transportpb.PeerHelloReply{MinVersion: WireVersionMin, MaxVersion: WireVersionMax, Incarnation: s.t.incarnation}, nil
}

// Batch receives batches of frames, delivered in order, each checked as a
// frame of Stream is.
func (s *server) Batch(stream grpc.BidiStreamingServer[transportpb.PeerBatch, transportpb.PeerAck]) error {
	return receive(s.t, stream, (*transportpb.PeerBatch).GetFrames)
}

// receive authenticates a peer stream's sender and delivers the frames of
// every message it sends (frames says which), until it ends or a frame is
// refused.
func receive[M any](t *Transport, stream grpc.BidiStreamingServer[M, transportpb.PeerAck], frames func(*M) []*transportpb.PeerFrame) error {
	from, reason, err := t.authenticate(stream.Context())
	if err != nil {
		t.refused.Add(1)
		t.refuse(reason, from, err.Error())
		return err
	}
	var mac *framer
	var sum []byte
	if t.frameKey != nil {
		mac, sum = newFramer(t.frameKey), make([]byte, 0, MACSize)
	}
	for {
		m, err := stream.Recv()
		if err != nil {
			if err == io.EOF {
				return nil
			}
			if status.Code(err) == codes.ResourceExhausted { // above MaxRecvMsgSize
				t.refused.Add(1)
				t.oversize.Add(1)
				t.refuse(ReasonOversize, from, err.Error())
			}
			return err
		}
		for _, fr := range frames(m) {
			ok, err := t.verify(mac, sum, from, fr)
			if err != nil {
				t.refused.Add(1)
				return err
			}
			if !ok {
				continue
			}
			if err := t.deliver(from, fr, mac != nil); err != nil {
				return err
			}
		}
	}
}

// verify checks fr's wire version, its MAC and sequence number (auth.go;
// mac nil: no secret key, the version checks only). A frame of a version
// this node does not speak, a version 1 frame from a sender that speaks a
// later one, and a replayed frame are refused (false; counted and logged)
// and the stream goes on; a frame whose MAC does not verify ends the
// stream with PERMISSION_DENIED (the error): its sender does not hold the
// key, or the stream was altered; a v2 frame addressed to another
// incarnation of this node ends it with FAILED_PRECONDITION (an honest
// sender redials and asks Hello again).
func (t *Transport) verify(mac *framer, sum []byte, from strategy.NodeID, fr *transportpb.PeerFrame) (bool, error) {
	version := fr.GetVersion()
	switch {
	case version > WireVersionMax:
		t.unknownVersion.Add(1)
		t.refuse(ReasonUnknownVersion, from, fmt.Sprintf("rule %q: wire version %d; this node speaks %d to %d", fr.GetRule(), version, WireVersionMin, WireVersionMax))
		return false, nil
	case version == 0: // a node from before versions
		version = WireV1
	}
	var want []byte
	if mac != nil {
		if version == WireV1 {
			want = mac.sum(sum[:0], from, t.cfg.Self, fr.GetRule(), fr.GetIncarnation(), fr.GetSeq(), fr.GetPayload())
		} else {
			want = mac.sumV2(sum[:0], from, t.cfg.Self, fr.GetRule(), fr.GetIncarnation(), fr.GetSeq(), fr.GetToIncarnation(), fr.GetPayload())
		}
	}
	if mac != nil && (len(fr.GetMac()) != MACSize || !hmac.Equal(want, fr.GetMac())) {
		t.badMAC.Add(1)
		detail := fmt.Sprintf("rule %q: the frame's MAC does not verify (missing, forged, or another secret key)", fr.GetRule())
		t.refuse(ReasonBadMAC, from, detail)
		return false, status.Errorf(codes.PermissionDenied, "grpcpeer: frame from %q refused: %s", from, detail)
	}
	if version >= WireV2 && fr.GetToIncarnation() != t.incarnation {
		t.staleInc.Add(1)
		detail := fmt.Sprintf("rule %q: addressed to incarnation %d of this node, which is %d (recorded before a restart, or a Hello of the previous process)",
			fr.GetRule(), fr.GetToIncarnation(), t.incarnation)
		t.refuse(ReasonStaleIncarnation, from, detail)
		return false, status.Errorf(codes.FailedPrecondition, "grpcpeer: frame from %q refused: %s", from, detail)
	}
	if version == WireV1 && t.known(from) && !t.acceptV1(from) {
		// (A sender not in the book is deliver's: not_member.)
		t.oldVersion.Add(1)
		t.refuse(ReasonOldVersion, from, fmt.Sprintf("rule %q: a version 1 frame from a member that speaks a later version (a replay, or its record is stale)", fr.GetRule()))
		return false, nil
	}
	if mac == nil {
		return true, nil
	}
	if !t.replay.admit(from, fr.GetIncarnation(), fr.GetSeq()) {
		t.replayed.Add(1)
		t.refuse(ReasonReplay, from, fmt.Sprintf("rule %q: incarnation %d seq %d was seen or is older than the window", fr.GetRule(), fr.GetIncarnation(), fr.GetSeq()))
		return false, nil
	}
	return true, nil
}

// refuse logs a refusal (rate-limited per reason).
func (t *Transport) refuse(reason string, from strategy.NodeID, detail string) {
	t.rlog.refused(reason, from, detail)
}

// deliver hands a frame from the authenticated sender from to the Listen
// callback, unless from is not in the peer book: a frame whose MAC
// verified (verified: its sender holds the key) is then dropped and
// counted (ReasonNotMember: not a member yet, or any longer), the stream
// going on; without a key the stream is refused (the error ends it) and
// nothing more of it is delivered.
func (t *Transport) deliver(from strategy.NodeID, fr *transportpb.PeerFrame, verified bool) error {
	if !t.known(from) {
		if verified {
			t.notMember.Add(1)
			t.refuse(ReasonNotMember, from, fmt.Sprintf("rule %q: the sender holds the key but is not in this node's view (yet)", fr.GetRule()))
			return nil
		}
		t.refused.Add(1)
		t.unknownSender.Add(1)
		return status.Errorf(codes.PermissionDenied, "grpcpeer: %q is not a member", from)
	}
	if recv := t.recv.Load(); recv != nil {
		t.received.Add(1)
		(*recv)(cluster.Frame{Rule: fr.GetRule(), From: from, Payload: fr.GetPayload()})
	}
	return nil
}

// authenticate returns the stream's sender: named in the metadata, in the
// peer book, and, with TLS, named by the client certificate.
func (t *Transport) authenticate(ctx context.Context) (_ strategy.NodeID, reason string, _ error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(FromKey)
	if len(vals) != 1 || vals[0] == "" {
		t.unknownSender.Add(1)
		return "", ReasonUnknownSender, status.Error(codes.Unauthenticated, "grpcpeer: the stream does not name its sender")
	}
	from := strategy.NodeID(vals[0])
	// With a secret key a stream from a node not in the book is kept: its
	// frames prove their sender with their MACs and are dropped until it is
	// a member (deliver); a views-converging restart or heal no longer
	// counts as an unknown sender. Without a key nothing proves the name.
	if !t.known(from) && t.frameKey == nil {
		t.unknownSender.Add(1)
		return from, ReasonUnknownSender, status.Errorf(codes.PermissionDenied, "grpcpeer: %q is not a member", from)
	}
	if t.cfg.TLS != nil {
		p, ok := peer.FromContext(ctx)
		if !ok {
			t.badCert.Add(1)
			return from, ReasonBadCertificate, status.Error(codes.Unauthenticated, "grpcpeer: no peer info")
		}
		info, ok := p.AuthInfo.(credentials.TLSInfo)
		// VerifiedChains, not PeerCertificates: a certificate the TLS
		// config asked for but did not verify names nobody.
		if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
			t.badCert.Add(1)
			return from, ReasonBadCertificate, status.Errorf(codes.Unauthenticated, "grpcpeer: %q sent no verified client certificate", from)
		}
		cert := info.State.VerifiedChains[0][0]
		if cert.VerifyHostname(string(from)) != nil && cert.Subject.CommonName != string(from) {
			t.badCert.Add(1)
			return from, ReasonBadCertificate, status.Errorf(codes.PermissionDenied, "grpcpeer: the client certificate does not name %q", from)
		}
	}
	return from, "", nil
}
