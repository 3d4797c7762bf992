package grpcpeer

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tokenmesh/tokenmesh/api/peer/v1/transportpb"
	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// seqPayload is frame number i of a sequence, padded to size bytes.
func seqPayload(i, size int) []byte {
	p := make([]byte, max(size, 8))
	binary.BigEndian.PutUint64(p, uint64(i))
	return p
}

// checkSequence checks that from's frames in box are numbers 0..n-1, each
// once, in order.
func checkSequence(t *testing.T, box *inbox, from strategy.NodeID, n int) {
	t.Helper()
	next := 0
	for _, f := range box.snapshot() {
		if f.From != from {
			continue
		}
		if got := int(binary.BigEndian.Uint64(f.Payload)); got != next {
			t.Fatalf("from %s: frame %d arrived where %d was due", from, got, next)
		}
		next++
	}
	if next != n {
		t.Fatalf("from %s: %d frames delivered, want %d", from, next, n)
	}
}

func countFrom(box *inbox, from strategy.NodeID) int {
	n := 0
	for _, f := range box.snapshot() {
		if f.From == from {
			n++
		}
	}
	return n
}

// TestBatchManyFramesInOrder queues many frames at once from two senders
// to one receiver and one back: each arrives exactly once, in its sender's
// order, and the senders packed several frames per message.
func TestBatchManyFramesInOrder(t *testing.T) {
	const n = 20000
	ids := []strategy.NodeID{"n0", "n1", "n2"}
	trs := map[strategy.NodeID]*Transport{}
	boxes := map[strategy.NodeID]*inbox{}
	book := map[strategy.NodeID]string{}
	for _, id := range ids {
		trs[id] = newTransport(t, Config{Self: id, Queue: 2 * n})
		boxes[id] = &inbox{}
		trs[id].Listen(boxes[id].recv)
		book[id] = trs[id].Addr()
	}
	for _, tr := range trs {
		tr.SetPeers(book)
	}
	var wg sync.WaitGroup
	for _, route := range [][2]strategy.NodeID{{"n1", "n0"}, {"n2", "n0"}, {"n0", "n1"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				if err := trs[route[0]].Send(route[1], cluster.Frame{Rule: "r", Payload: seqPayload(i, 16)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	eventually(t, "every frame", func() bool {
		return countFrom(boxes["n0"], "n1") >= n && countFrom(boxes["n0"], "n2") >= n && countFrom(boxes["n1"], "n0") >= n
	})
	time.Sleep(20 * time.Millisecond) // a duplicate would have arrived by now
	checkSequence(t, boxes["n0"], "n1", n)
	checkSequence(t, boxes["n0"], "n2", n)
	checkSequence(t, boxes["n1"], "n0", n)
	for _, id := range []strategy.NodeID{"n1", "n2"} {
		st := trs[id].Stats()
		if st.Sent != n || st.Dropped != 0 || st.Lost != 0 {
			t.Fatalf("%s stats %+v, want %d sent, none dropped or lost", id, st, n)
		}
		if st.Batches >= st.Sent || st.Batches < n/MaxBatchFrames {
			t.Fatalf("%s stats %+v: want several frames per message, at most %d", id, st, MaxBatchFrames)
		}
		t.Logf("%s: %d frames in %d messages", id, st.Sent, st.Batches)
	}
	if st := trs["n0"].Stats(); st.Received != 2*n {
		t.Fatalf("n0 stats %+v, want %d received", st, 2*n)
	}
}

func frames(n, size int) chan *transportpb.PeerFrame {
	q := make(chan *transportpb.PeerFrame, n)
	for i := range n {
		q <- &transportpb.PeerFrame{Rule: "r", Payload: seqPayload(i, size)}
	}
	return q
}

// TestFillCaps: a batch takes what is queued, up to MaxBatchFrames frames
// and MaxBatchBytes, and never waits.
func TestFillCaps(t *testing.T) {
	first := &transportpb.PeerFrame{Rule: "r", Payload: []byte("first")}
	encoded := func(batch []*transportpb.PeerFrame) int {
		return proto.Size(&transportpb.PeerBatch{Frames: batch})
	}

	// Nothing queued: the first frame alone, at once.
	start := time.Now()
	batch, carry := fill(make(chan *transportpb.PeerFrame), []*transportpb.PeerFrame{first})
	if len(batch) != 1 || carry != nil || time.Since(start) > 100*time.Millisecond {
		t.Fatalf("empty queue: batch of %d, carry %v, after %v", len(batch), carry, time.Since(start))
	}

	// Many small frames: MaxBatchFrames, the rest stays queued.
	q := frames(300, 16)
	batch, carry = fill(q, []*transportpb.PeerFrame{first})
	if len(batch) != MaxBatchFrames || carry != nil || len(q) != 300-(MaxBatchFrames-1) {
		t.Fatalf("300 queued: batch of %d, carry %v, %d left", len(batch), carry, len(q))
	}
	for i, fr := range batch[1:] {
		if got := int(binary.BigEndian.Uint64(fr.Payload)); got != i {
			t.Fatalf("batch[%d] is frame %d", i+1, got)
		}
	}

	// Large frames: split by size; the one that does not fit is carried.
	const big = 300 << 10
	q = frames(10, big)
	var all []*transportpb.PeerFrame
	carry = <-q
	for carry != nil {
		batch, carry = fill(q, []*transportpb.PeerFrame{carry})
		if size := encoded(batch); size > MaxBatchBytes {
			t.Fatalf("batch of %d frames is %d bytes, over %d", len(batch), size, MaxBatchBytes)
		}
		if len(batch) != 3 && carry != nil {
			t.Fatalf("batch of %d frames of %d bytes, want 3", len(batch), big)
		}
		all = append(all, batch...)
		if carry == nil && len(q) > 0 {
			carry = <-q
		}
	}
	if len(all) != 10 {
		t.Fatalf("%d frames batched, want 10", len(all))
	}
	for i, fr := range all {
		if got := int(binary.BigEndian.Uint64(fr.Payload)); got != i {
			t.Fatalf("frame %d batched where %d was due", got, i)
		}
	}

	// A frame over MaxBatchBytes travels alone, before and after.
	huge := &transportpb.PeerFrame{Rule: "r", Payload: make([]byte, MaxBatchBytes+1)}
	q = frames(1, 16)
	batch, carry = fill(q, []*transportpb.PeerFrame{huge})
	if len(batch) != 1 || carry == nil {
		t.Fatalf("huge first: batch of %d, carry %v", len(batch), carry != nil)
	}
	q = make(chan *transportpb.PeerFrame, 1)
	q <- huge
	batch, carry = fill(q, []*transportpb.PeerFrame{first})
	if len(batch) != 1 || carry != huge {
		t.Fatalf("huge queued: batch of %d, carry %v", len(batch), carry != nil)
	}
}

// TestBatchOversizedSplit sends more than the receiver's 4 MiB message
// limit at once: the sender splits it, and every frame arrives.
func TestBatchOversizedSplit(t *testing.T) {
	for _, tc := range []struct {
		n, size int
		batches int64 // at least
	}{
		{12, 900 << 10, 12}, // two do not fit one batch
		{2000, 4 << 10, 8},  // 8 MB
	} {
		t.Run(fmt.Sprintf("%dx%d", tc.n, tc.size), func(t *testing.T) {
			bBox := &inbox{}
			b := newTransport(t, Config{Self: "b", Peers: map[strategy.NodeID]string{"a": "127.0.0.1:1"}})
			b.Listen(bBox.recv)
			a := newTransport(t, Config{Self: "a", Queue: tc.n, Peers: map[strategy.NodeID]string{"b": b.Addr()}})
			for i := range tc.n {
				if err := a.Send("b", cluster.Frame{Rule: "r", Payload: seqPayload(i, tc.size)}); err != nil {
					t.Fatal(err)
				}
			}
			eventually(t, "every frame", func() bool { return countFrom(bBox, "a") >= tc.n })
			checkSequence(t, bBox, "a", tc.n)
			st := a.Stats()
			if st.Sent != int64(tc.n) || st.Lost != 0 || st.Dials != 1 || st.Batches < tc.batches {
				t.Fatalf("stats %+v, want %d frames sent in at least %d messages on one stream", st, tc.n, tc.batches)
			}
		})
	}
}

// batchStream opens a raw Batch stream to tr claiming the senders from.
func batchStream(t *testing.T, tr *Transport, from ...string) grpc.BidiStreamingClient[transportpb.PeerBatch, transportpb.PeerAck] {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+tr.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	for _, f := range from {
		ctx = metadata.AppendToOutgoingContext(ctx, FromKey, f)
	}
	stream, err := transportpb.NewPeerTransportClient(cc).Batch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

// endOf sends batch on stream (unless nil), half-closes it and returns
// the code it ended with.
func endOf(t *testing.T, stream grpc.BidiStreamingClient[transportpb.PeerBatch, transportpb.PeerAck], batch *transportpb.PeerBatch) codes.Code {
	t.Helper()
	if batch != nil {
		if err := stream.Send(batch); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
	}
	_ = stream.CloseSend()
	for {
		if _, err := stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return codes.OK
			}
			return status.Code(err)
		}
	}
}

func batchOf(payloads ...string) *transportpb.PeerBatch {
	b := &transportpb.PeerBatch{}
	for _, p := range payloads {
		b.Frames = append(b.Frames, &transportpb.PeerFrame{Rule: "r", Payload: []byte(p)})
	}
	return b
}

// TestBatchRefused: a batch on a stream whose sender is not authenticated
// or not a member delivers none of its frames, as a frame on Stream.
func TestBatchRefused(t *testing.T) {
	box := &inbox{}
	a := newTransport(t, Config{Self: "a", Peers: map[strategy.NodeID]string{"b": "127.0.0.1:1", "c": "127.0.0.1:1"}})
	a.Listen(box.recv)
	for _, tc := range []struct {
		from []string
		want codes.Code
	}{
		{nil, codes.Unauthenticated},
		{[]string{""}, codes.Unauthenticated},
		{[]string{"b", "c"}, codes.Unauthenticated},
		{[]string{"x"}, codes.PermissionDenied},
		{[]string{"a"}, codes.PermissionDenied}, // itself: not in its book
	} {
		before := a.Stats().Refused
		if got := endOf(t, batchStream(t, a, tc.from...), batchOf("one", "two", "three")); got != tc.want {
			t.Fatalf("from %q: stream ended with %v, want %v", tc.from, got, tc.want)
		}
		if a.Stats().Refused != before+1 {
			t.Fatalf("from %q: refusal not counted: %+v", tc.from, a.Stats())
		}
	}
	if got := box.snapshot(); len(got) > 0 {
		t.Fatalf("frames of refused streams were delivered: %+v", got)
	}

	// A member's batches are delivered in order; an empty one is nothing.
	stream := batchStream(t, a, "b")
	for _, batch := range []*transportpb.PeerBatch{batchOf("one", "two"), {}, batchOf("three")} {
		if err := stream.Send(batch); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "b's batches", func() bool { return len(box.snapshot()) == 3 })
	for i, f := range box.snapshot() {
		if want := []string{"one", "two", "three"}[i]; f.From != "b" || string(f.Payload) != want {
			t.Fatalf("frame %d: %+v, want %q from b", i, f, want)
		}
	}
	// Once b leaves the book, its next batch on the open stream ends the
	// stream and delivers nothing.
	a.SetPeers(map[strategy.NodeID]string{"c": "127.0.0.1:1"})
	before := a.Stats().Refused
	if got := endOf(t, stream, batchOf("late", "later")); got != codes.PermissionDenied {
		t.Fatalf("removed member's stream ended with %v, want PermissionDenied", got)
	}
	if got := len(box.snapshot()); got != 3 || a.Stats().Refused != before+1 {
		t.Fatalf("after removal: %d frames delivered (want 3), stats %+v", got, a.Stats())
	}
}

// TestBatchUnknownToPeer: a peer that serves only Stream (a node from
// before Batch) answers UNIMPLEMENTED; the sender falls back to one frame
// per message, in order.
func TestBatchUnknownToPeer(t *testing.T) {
	box := &inbox{}
	b := newTransport(t, Config{Self: "b", Peers: map[strategy.NodeID]string{"a": "127.0.0.1:1"}})
	b.Listen(box.recv)
	desc := transportpb.PeerTransport_ServiceDesc
	desc.Streams = nil
	for _, sd := range transportpb.PeerTransport_ServiceDesc.Streams {
		if sd.StreamName == "Stream" {
			desc.Streams = append(desc.Streams, sd)
		}
	}
	old := grpc.NewServer()
	old.RegisterService(&desc, &server{t: b})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go old.Serve(lis)
	t.Cleanup(old.Stop)

	a := newTransport(t, Config{Self: "a", Peers: map[strategy.NodeID]string{"b": lis.Addr().String()}})
	eventually(t, "a frame through the fallback", func() bool {
		_ = a.Send("b", cluster.Frame{Rule: "probe", Payload: []byte("probe")})
		time.Sleep(5 * time.Millisecond)
		return box.has("a", "probe", "probe")
	})
	const n = 500
	for i := range n {
		_ = a.Send("b", cluster.Frame{Rule: "r", Payload: seqPayload(i, 8)})
	}
	eventually(t, "every frame", func() bool {
		k := 0
		for _, f := range box.snapshot() {
			if f.Rule == "r" {
				k++
			}
		}
		return k >= n
	})
	var got []cluster.Frame
	for _, f := range box.snapshot() {
		if f.Rule == "r" {
			got = append(got, f)
		}
	}
	for i, f := range got {
		if !bytes.Equal(f.Payload, seqPayload(i, 8)) {
			t.Fatalf("frame %d: %x", i, f.Payload)
		}
	}
	if len(got) != n {
		t.Fatalf("%d frames, want %d", len(got), n)
	}
	if st := a.Stats(); st.Dials < 2 {
		t.Fatalf("stats %+v, want the Batch stream and a Stream one", st)
	}
}

// BenchmarkSend sends frames from one transport to another on loopback
// with at most window frames in flight (sent, not yet delivered), and
// reports frames/s and frames per stream message; with mac, every frame is
// authenticated (Config.SecretKey).
func BenchmarkSend(b *testing.B) {
	for _, mac := range []bool{false, true} {
		for _, window := range []int{1, 64, 1024} {
			benchSend(b, mac, window)
		}
	}
}

func benchSend(b *testing.B, mac bool, window int) {
	var secret []byte
	if mac {
		secret = testSecret
	}
	{
		b.Run(fmt.Sprintf("mac=%v/window=%d", mac, window), func(b *testing.B) {
			sem := make(chan struct{}, window)
			recv := func(cluster.Frame) { <-sem }
			rx, err := New(Config{Self: "rx", ListenAddr: "127.0.0.1:0", SecretKey: secret, Peers: map[strategy.NodeID]string{"tx": "127.0.0.1:1"}})
			if err != nil {
				b.Fatal(err)
			}
			defer rx.Close()
			rx.Listen(recv)
			tx, err := New(Config{Self: "tx", ListenAddr: "127.0.0.1:0", SecretKey: secret, Queue: 2 * window, Peers: map[strategy.NodeID]string{"rx": rx.Addr()}})
			if err != nil {
				b.Fatal(err)
			}
			defer tx.Close()
			payload := []byte(strings.Repeat("x", 48)) // about an owner forward
			// Warm up: the stream is dialled.
			sem <- struct{}{}
			_ = tx.Send("rx", cluster.Frame{Rule: "api", Payload: payload})
			for rx.Stats().Received == 0 {
				time.Sleep(time.Millisecond)
			}
			start, st0 := time.Now(), tx.Stats()
			b.ResetTimer()
			for range b.N {
				sem <- struct{}{}
				if err := tx.Send("rx", cluster.Frame{Rule: "api", Payload: payload}); err != nil {
					b.Fatal(err)
				}
			}
			for range window { // every frame delivered
				sem <- struct{}{}
			}
			b.StopTimer()
			st := tx.Stats()
			if st.Dropped != 0 || st.Lost != 0 {
				b.Fatalf("stats %+v", st)
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "frames/s")
			b.ReportMetric(float64(st.Sent-st0.Sent)/float64(max(1, st.Batches-st0.Batches)), "frames/msg")
		})
	}
}
