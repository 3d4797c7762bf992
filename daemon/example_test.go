package daemon_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/tokenmesh/tokenmesh/config"
	"github.com/tokenmesh/tokenmesh/daemon"
)

func ExampleStart() {
	// The built-in default configuration (rule "default": 10/s, burst 20)
	// on ports the system picks; a program would config.Load its file.
	f := config.Default()
	f.Node.APIAddr, f.Node.GRPCAddr = "127.0.0.1:0", "127.0.0.1:0"
	ctx := context.Background()
	d, err := daemon.Start(ctx, daemon.Config{File: f})
	if err != nil {
		log.Fatal(err)
	}
	// The node's limiter decides in-process; clients reach the same node
	// at d.Addrs().API (HTTP/JSON) and d.Addrs().GRPC.
	l, err := d.Node().Limiter("default")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("ready:", d.Ready(), "allowed:", l.Allow("tenant-1"))
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	fmt.Println("shutdown:", d.Shutdown(sctx))
	// Output:
	// ready: true allowed: true
	// shutdown: <nil>
}
