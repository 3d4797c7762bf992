package grpcpeer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tokenmesh/tokenmesh/api/peer/v1/transportpb"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// sender owns the stream to one peer.
type sender struct {
	t  *Transport
	id strategy.NodeID
	q  chan *transportpb.PeerFrame
	// redial is signalled when the address changes.
	redial chan struct{}

	ctx    context.Context // cancelled by stop; parent of every dialled stream
	cancel context.CancelFunc

	mu   sync.Mutex
	addr string

	// legacy (run's own) makes the next dial use Stream: the last Batch
	// stream was refused as UNIMPLEMENTED.
	legacy bool
	// mac is the keyed HMAC (nil without a secret key).
	mac *framer
}

func (t *Transport) newSender(id strategy.NodeID, addr string) *sender {
	s := &sender{t: t, id: id, addr: addr, q: make(chan *transportpb.PeerFrame, t.cfg.Queue),
		redial: make(chan struct{}, 1)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if t.frameKey != nil {
		s.mac = newFramer(t.frameKey)
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		s.run()
	}()
	return s
}

// stop is called once, under t.mu, when the sender leaves t.peers: it
// ends run (and with it the stream, whose context is s.ctx's child).
func (s *sender) stop() { s.cancel() }

func (s *sender) getAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

func (s *sender) setAddr(addr string) {
	s.mu.Lock()
	s.addr = addr
	s.mu.Unlock()
	select {
	case s.redial <- struct{}{}:
	default:
	}
}

// conn is one dialled stream: a Batch stream, or with legacy a Stream one.
type conn struct {
	cc      *grpc.ClientConn
	batches grpc.BidiStreamingClient[transportpb.PeerBatch, transportpb.PeerAck] // nil with legacy
	frames  grpc.BidiStreamingClient[transportpb.PeerFrame, transportpb.PeerAck] // legacy only
	legacy  bool
	// version is the link's wire version (the highest both ends speak,
	// from Hello) and toInc the callee's incarnation (v2 frames name it).
	version uint32
	toInc   uint64
	cancel  context.CancelFunc
	broken  chan struct{} // closed when the response stream ends
	err     error         // why it ended; set before broken is closed
}

func (c *conn) close() {
	c.cancel()
	_ = c.cc.Close()
}

func (c *conn) isBroken() bool {
	select {
	case <-c.broken:
		return true
	default:
		return false
	}
}

func (s *sender) dial() (*conn, error) {
	t := s.t
	creds := insecure.NewCredentials()
	if t.cfg.TLS != nil {
		tc := t.cfg.TLS.Clone()
		if tc.ServerName == "" {
			tc.ServerName = string(s.id)
		}
		creds = credentials.NewTLS(tc)
	}
	cc, err := grpc.NewClient("passthrough:///"+s.getAddr(), grpc.WithTransportCredentials(creds),
		// A peer that vanishes without closing the connection (host down,
		// partition) is noticed within keepaliveTime+keepaliveTimeout.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout, PermitWithoutStream: true}),
		grpc.WithInitialWindowSize(PeerWindow), grpc.WithInitialConnWindowSize(PeerWindow))
	if err != nil {
		return nil, err
	}
	client := transportpb.NewPeerTransportClient(cc)
	version, toInc, err := s.hello(client)
	if err != nil {
		_ = cc.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(s.ctx)
	ctx = metadata.AppendToOutgoingContext(ctx, FromKey, string(t.cfg.Self))
	c := &conn{cc: cc, legacy: s.legacy, version: version, toInc: toInc, cancel: cancel, broken: make(chan struct{})}
	var stream grpc.ClientStream
	if c.legacy {
		c.frames, err = client.Stream(ctx)
		stream = c.frames
	} else {
		c.batches, err = client.Batch(ctx)
		stream = c.batches
	}
	if err != nil {
		cancel()
		_ = cc.Close()
		return nil, err
	}
	go func() { // the callee sends nothing: Recv returns when the stream ends
		defer close(c.broken)
		for {
			if err := stream.RecvMsg(&transportpb.PeerAck{}); err != nil {
				c.err = err
				return
			}
		}
	}()
	t.dials.Add(1)
	return c, nil
}

// HelloTimeout bounds a Hello call before a stream is opened.
const HelloTimeout = 5 * time.Second

// errNoSharedVersion: the callee speaks no version this node does.
var errNoSharedVersion = errors.New("grpcpeer: the peer speaks no wire version this node speaks")

// hello asks the callee's versions and incarnation and returns the link's
// version (the highest both speak) and the incarnation to name in v2
// frames. A callee that does not serve Hello (UNIMPLEMENTED: a node from
// before versions) speaks version 1 only. The answer is bounded: versions
// outside 1..255, a minimum above the maximum, or no version in common
// fail the dial (counted as unknown_version).
func (s *sender) hello(client transportpb.PeerTransportClient) (version uint32, toInc uint64, _ error) {
	ctx, cancel := context.WithTimeout(s.ctx, HelloTimeout)
	defer cancel()
	rep, err := client.Hello(ctx, &transportpb.PeerHello{MaxVersion: WireVersionMax})
	switch {
	case status.Code(err) == codes.Unimplemented:
		s.t.learned(s.id, WireV1)
		s.t.linksV1.Add(1)
		return WireV1, 0, nil
	case err != nil:
		return 0, 0, err
	}
	lo, hi := rep.GetMinVersion(), rep.GetMaxVersion()
	version, ok := linkVersion(lo, hi)
	if !ok {
		s.t.unknownVersion.Add(1)
		s.t.refuse(ReasonUnknownVersion, s.id, fmt.Sprintf("Hello answered versions %d to %d; this node speaks %d to %d", lo, hi, WireVersionMin, WireVersionMax))
		return 0, 0, errNoSharedVersion
	}
	s.t.learned(s.id, hi)
	if version >= WireV2 {
		s.t.linksV2.Add(1)
	} else {
		s.t.linksV1.Add(1)
	}
	return version, rep.GetIncarnation(), nil
}

// linkVersion is the highest wire version both this build and a peer
// speaking lo to hi speak; false when the answer is out of bounds (0, above
// 255, lo above hi) or shares no version with this build.
func linkVersion(lo, hi uint32) (uint32, bool) {
	v := min(hi, WireVersionMax)
	if lo == 0 || hi > 255 || lo > hi || v < max(lo, WireVersionMin) {
		return 0, false
	}
	return v, true
}

// discard closes a failed stream; a Batch stream the callee does not
// serve makes the next dial use Stream, and a failed Stream stream lets the
// next dial try Batch again (the callee may have been upgraded).
func (s *sender) discard(c *conn) {
	s.legacy = !c.legacy && c.isBroken() && status.Code(c.err) == codes.Unimplemented
	c.close()
}

// run sends the queued frames, dialling when needed and backing off after
// a failure. Each message carries the first frame taken from the queue and
// whatever else is queued by the time the stream is ready (fill), after
// one yield to the other ready goroutines when the queue held one frame.
func (s *sender) run() {
	t := s.t
	var c *conn
	defer func() {
		if c != nil {
			c.close()
		}
	}()
	backoff := time.Duration(0)
	batch := make([]*transportpb.PeerFrame, 0, MaxBatchFrames)
	msg := &transportpb.PeerBatch{}
	var carry *transportpb.PeerFrame // taken from the queue, did not fit the last batch
	for {
		var fr *transportpb.PeerFrame
		if carry != nil {
			fr, carry = carry, nil
		} else {
			select {
			case <-s.ctx.Done():
				return
			case <-s.redial:
				if c != nil {
					c.close()
					c = nil
				}
				backoff = 0
				s.legacy = false // a new address: try Batch there
				continue
			case fr = <-s.q:
			}
		}
		if c != nil && c.isBroken() {
			s.discard(c)
			c = nil
		}
		if c == nil {
			if backoff > 0 && !s.sleep(backoff) {
				return
			}
			var err error
			if c, err = s.dial(); err != nil {
				t.lost.Add(1)
				backoff = s.next(backoff)
				continue
			}
		}
		if len(s.q) == 0 {
			// Nothing else queued yet: let the goroutines that are ready
			// to run (the node's loop among them, finishing its turn) go
			// first, so that what they send to this peer meanwhile leaves
			// in this batch instead of in one message each. No timer, no
			// wait when nothing else is ready: Gosched returns at once.
			runtime.Gosched()
		}
		batch, carry = fill(s.q, append(batch[:0], fr))
		s.sign(c, batch)
		sent, err := s.send(c, msg, batch)
		clear(batch) // let the sent frames go
		t.sent.Add(int64(sent))
		if err != nil {
			t.lost.Add(int64(len(batch) - sent))
			if errors.Is(err, io.EOF) {
				// The callee ended the stream: its status (the reason
				// discard needs) comes with the response stream's end.
				s.waitBroken(c)
			}
			s.discard(c)
			c = nil
			if s.legacy {
				backoff = 0 // not a failure of the peer: redial at once
			} else {
				backoff = s.next(backoff)
			}
			continue
		}
		backoff = 0
	}
}

// sign gives every frame of batch not signed yet c's wire version (and
// with v2 the callee's incarnation), and with a secret key its
// incarnation, next sequence number and MAC of that version's layout.
func (s *sender) sign(c *conn, batch []*transportpb.PeerFrame) {
	for _, fr := range batch {
		if fr.Version != 0 {
			continue
		}
		fr.Version = c.version
		if c.version >= WireV2 {
			fr.ToIncarnation = c.toInc
		}
		if s.mac == nil {
			continue
		}
		fr.Incarnation, fr.Seq = s.t.incarnation, s.t.seq.Add(1)
		if c.version >= WireV2 {
			fr.Mac = s.mac.sumV2(make([]byte, 0, MACSize), s.t.cfg.Self, s.id, fr.Rule, fr.Incarnation, fr.Seq, fr.ToIncarnation, fr.Payload)
		} else {
			fr.Mac = s.mac.sum(make([]byte, 0, MACSize), s.t.cfg.Self, s.id, fr.Rule, fr.Incarnation, fr.Seq, fr.Payload)
		}
	}
}

// fill appends to batch (holding the first frame) the frames already in q,
// without waiting, up to MaxBatchFrames frames and MaxBatchBytes. A frame
// taken that would take the batch past MaxBatchBytes is returned as carry,
// to start the next batch.
func fill(q <-chan *transportpb.PeerFrame, batch []*transportpb.PeerFrame) (_ []*transportpb.PeerFrame, carry *transportpb.PeerFrame) {
	size := 0
	for _, fr := range batch {
		size += frameSize(fr)
	}
	for len(batch) < MaxBatchFrames {
		select {
		case fr := <-q:
			n := frameSize(fr)
			if size+n > MaxBatchBytes {
				return batch, fr
			}
			batch = append(batch, fr)
			size += n
		default:
			return batch, nil
		}
	}
	return batch, nil
}

// frameSize bounds fr's encoded size inside a PeerBatch from above: the
// rule and payload, their tags and lengths, the frame's own tag and length
// (each length at most 5 bytes), and the authentication fields (tags,
// two varints of at most 10 bytes, the MAC and its length).
func frameSize(fr *transportpb.PeerFrame) int {
	return len(fr.Rule) + len(fr.Payload) + 3*(1+5) + authSize
}

// authSize bounds the encoded incarnation, seq and MAC of a frame, and its
// version and to_incarnation.
const authSize = 3 + 10 + 10 + 1 + MACSize + 2 + 5 + 10

// send writes batch to c's stream: as one message (msg, reused), or with
// legacy one message per frame. It returns how many frames were written.
func (s *sender) send(c *conn, msg *transportpb.PeerBatch, batch []*transportpb.PeerFrame) (int, error) {
	if c.legacy {
		for i, fr := range batch {
			if err := c.frames.Send(fr); err != nil {
				return i, err
			}
			s.t.batches.Add(1)
		}
		return len(batch), nil
	}
	msg.Frames = batch
	err := c.batches.Send(msg) // encodes msg before it returns
	msg.Frames = nil
	if err != nil {
		return 0, err
	}
	s.t.batches.Add(1)
	return len(batch), nil
}

// waitBroken waits a little for the response stream of c to end.
func (s *sender) waitBroken(c *conn) {
	tm := time.NewTimer(time.Second)
	defer tm.Stop()
	select {
	case <-c.broken:
	case <-tm.C:
	case <-s.ctx.Done():
	}
}

func (s *sender) next(b time.Duration) time.Duration {
	if b == 0 {
		return s.t.cfg.MinBackoff
	}
	return min(2*b, s.t.cfg.MaxBackoff)
}

// sleep waits d; false when the sender stops first.
func (s *sender) sleep(d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-s.ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}
