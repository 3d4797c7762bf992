package proxy

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/tokenmesh/tokenmesh/rlqs/quotamsg"
)

// stream is one open StreamRateLimitQuotas call.
type stream struct {
	gen    uint64 // the proxy's count of opened streams
	addr   string
	call   grpc.BidiStreamingClient[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]
	cancel context.CancelFunc
	broken atomic.Bool // set by its receiver when the call ended
}

// send is the proxy's send goroutine: it owns the stream and sends the
// reports the loop built, in order, as Envoy's global client does
// (global_client_impl.cc):
//
//   - the first report (the first bucket's initial report) opens the stream
//     (createBucketImpl's startStreamImpl);
//   - a periodic report opens a new stream when the last one broke or could
//     not be opened (onSendReportsTimer restarts it); this is the only
//     reconnection, so the backoff between attempts is the report interval;
//   - an initial report with no stream is dropped (sendUsageReportImpl);
//   - a report that cannot be sent is dropped.
//
// A new stream goes to the address after the one that failed (wrapping
// around). Every report is recorded, with the address it went to or "" when
// dropped.
func (p *emulated) send(ctx context.Context) {
	defer p.f.running.Done()
	var st *stream
	tried := false
	defer func() {
		if st != nil {
			st.cancel()
		}
	}()
	for {
		var o outgoing
		select {
		case <-ctx.Done():
			return
		case o = <-p.out:
		}
		if st != nil && st.broken.Load() {
			st = p.failover(st)
		}
		if st == nil && (!o.initial || !tried) {
			tried = true
			st = p.open(ctx)
		}
		addr := ""
		if st != nil {
			if err := st.call.Send(o.usage); err == nil {
				addr = st.addr
			} else {
				st = p.failover(st) // its receiver reports why it ended
			}
		}
		size := proto.Size(o.usage)
		p.f.rec.add(func(r *Record) {
			r.Reports = append(r.Reports, Report{At: o.at, Proxy: p.idx, Initial: o.initial, Usage: o.usage, Addr: addr, Bytes: size})
		})
	}
}

// open opens a stream to the current address, within ConnectTimeout for the
// connection to be ready; on failure it tells the loop and moves to the
// next address.
func (p *emulated) open(ctx context.Context) *stream {
	addr, conn := p.f.cfg.Addrs[p.addr], p.conns[p.addr]
	err := ready(ctx, conn, p.f.cfg.ConnectTimeout)
	if err == nil {
		sctx, cancel := context.WithCancel(ctx)
		if p.f.cfg.ClientIDs {
			// Envoy's grpc_service.initial_metadata: on every stream
			sctx = metadata.AppendToOutgoingContext(sctx, quotamsg.ClientIDHeader, ClientID(p.idx))
		}
		var call grpc.BidiStreamingClient[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]
		call, err = rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(sctx)
		if err == nil {
			p.opened++
			st := &stream{gen: p.opened, addr: addr, call: call, cancel: cancel}
			p.post(ctx, event{gen: st.gen, addr: addr, kind: Opened})
			p.f.running.Add(1)
			go p.receive(ctx, st)
			return st
		}
		cancel()
	}
	p.post(ctx, event{addr: addr, kind: OpenFailed, err: err})
	p.next()
	return nil
}

// failover ends st (broken) and moves to the next address.
func (p *emulated) failover(st *stream) *stream {
	st.cancel()
	p.next()
	return nil
}

func (p *emulated) next() { p.addr = (p.addr + 1) % len(p.f.cfg.Addrs) }

// receive passes st's responses to the loop until the call ends, then
// marks it broken and tells the loop why.
func (p *emulated) receive(ctx context.Context, st *stream) {
	defer p.f.running.Done()
	for {
		resp, err := st.call.Recv()
		if err != nil {
			st.broken.Store(true)
			p.post(ctx, event{gen: st.gen, addr: st.addr, kind: Broken, err: err})
			return
		}
		p.post(ctx, event{gen: st.gen, addr: st.addr, resp: resp})
	}
}

func (p *emulated) post(ctx context.Context, ev event) {
	select {
	case p.events <- ev:
	case <-ctx.Done():
	}
}

// ready waits up to timeout for conn to be ready, asking it to connect.
func ready(ctx context.Context, conn *grpc.ClientConn, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		s := conn.GetState()
		switch s {
		case connectivity.Ready:
			return nil
		case connectivity.Idle:
			conn.Connect()
		case connectivity.Shutdown:
			return errors.New("connection shut down")
		}
		if !conn.WaitForStateChange(ctx, s) {
			return fmt.Errorf("connection not ready within %v (%v)", timeout, s)
		}
	}
}
