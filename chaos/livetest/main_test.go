// Package livetest runs faults on clusters of real `tokenmesh serve`
// processes: the chaos scenarios (partitions, kill -9, restarts; each node
// in its own network namespace), the partition-and-heal tests, and the
// kill -9 of a key's owner under owner, concurrency and RLQS (Envoy's quota
// service with emulated Envoys), and regions (a WAN emulated between them,
// and a cut). It has only tests. They run beside
// cmd/tokenmesh's end-to-end tests in `make test` (go test runs packages
// side by side, and both are mostly waiting on wall time), which is why
// they are a package of their own: one package took 10 minutes.
package livetest

import (
	"os"
	"testing"
	"time"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
	"github.com/tokenmesh/tokenmesh/internal/e2e"
	"github.com/tokenmesh/tokenmesh/localcluster"
)

// binary is the tokenmesh command built for this package's tests.
var binary string

func TestMain(m *testing.M) { os.Exit(e2e.Main(m, &binary)) }

// startCluster starts a local cluster of the test binary, stopped at the
// end of the test; the nodes' output is logged when the test fails.
func startCluster(t *testing.T, cfg localcluster.Config) *localcluster.Cluster {
	t.Helper()
	return e2e.StartCluster(t, binary, cfg)
}

// checkAt asks node i for hits of (rule, key) over gRPC.
func checkAt(c *localcluster.Cluster, i int, timeout time.Duration, rule, key string, hits int64) (*tokenmeshv1.CheckResult, error) {
	return e2e.CheckAt(c, i, timeout, rule, key, hits)
}

// metricValue is the value of an unlabelled metric in Prometheus text.
func metricValue(text, name string) (float64, bool) { return e2e.MetricValue(text, name) }
