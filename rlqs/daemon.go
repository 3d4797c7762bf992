package rlqs

import (
	"context"
	"time"

	"google.golang.org/grpc"

	"github.com/tokenmesh/tokenmesh/daemon"
)

// DrainFlush is how long Service's Shutdown lets the streams carry the
// drain's expiries (TTL 0) before it ends them.
const DrainFlush = 200 * time.Millisecond

// Service serves RLQS on a daemon's gRPC server (daemon.Config.Services)
// when the daemon has an Envoy config (the limits; without one it serves
// nothing), reported in its gRPC health service under ServiceName
// (SERVING while the daemon is ready): the node's quota sink pushes
// assignments on the streams, a reload hands the server the config in
// force (the Envoy files read again), and Shutdown sends every
// assigned bucket TTL 0 (its Envoy falls back instead of holding a share
// no node renews; but a stream with a client id, whose share its next
// stream takes over: Server.Drain), then ends the streams so that their
// Envoys reconnect elsewhere, before the node drains.
func Service() daemon.Service {
	var srv *Server
	return daemon.ServiceFuncs{
		ServiceName: "rlqs",
		RegisterFunc: func(g *grpc.Server, d *daemon.Daemon) error {
			rs := d.Rules()
			if rs.Envoy == nil {
				return nil
			}
			node := d.Node().Cluster()
			var err error
			if srv, err = New(node, rs.Envoy, d.Logger(), d.Registry()); err != nil {
				return err
			}
			node.SetQuotaSink(srv.Assigned)
			srv.Register(g)
			d.API().AddHealthService(ServiceName)
			return nil
		},
		ReloadedFunc: func(_ context.Context, rs daemon.RuleSet) error {
			if srv != nil {
				srv.SetConfig(rs.Envoy)
			}
			return nil
		},
		ShutdownFunc: func(ctx context.Context) error {
			if srv == nil {
				return nil
			}
			if n := srv.Drain(); n > 0 {
				srv.log.Info("rlqs: expired the assignments of the open streams before the drain", "buckets", n)
				select {
				case <-time.After(DrainFlush):
				case <-ctx.Done():
				}
			}
			srv.Close()
			return nil
		},
	}
}
