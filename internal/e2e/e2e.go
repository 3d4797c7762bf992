// Package e2e holds what the end-to-end tests of several packages share:
// building the tokenmesh binary once per test binary, starting a cluster of
// real `tokenmesh serve` processes for a test (stopped at its end, the
// nodes' output logged on failure), one check at one node, and a metric's
// value in a /metrics text. Only tests import it.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
	"github.com/tokenmesh/tokenmesh/internal/lockedbuf"
	"github.com/tokenmesh/tokenmesh/localcluster"
)

// mainPackage is the import path of the tokenmesh command.
const mainPackage = "github.com/tokenmesh/tokenmesh/cmd/tokenmesh"

// Build builds the tokenmesh command into a new temporary directory and
// returns the binary's path and a function that removes the directory.
// Errors: the directory cannot be made, or `go build` fails (its output in
// the error).
func Build() (binary string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "tokenmesh-e2e")
	if err != nil {
		return "", nil, err
	}
	binary = filepath.Join(dir, "tokenmesh")
	if out, err := exec.Command("go", "build", "-o", binary, mainPackage).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("go build %s: %v\n%s", mainPackage, err, out)
	}
	return binary, func() { os.RemoveAll(dir) }, nil
}

// StartCluster starts cfg.Nodes serve processes of binary (localcluster;
// cfg.Binary and cfg.Log are set here) within 30 s, and stops them when t
// ends, logging their output if t failed. It skips t under -short and
// fails it when the cluster does not start.
func StartCluster(t testing.TB, binary string, cfg localcluster.Config) *localcluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a cluster of real processes")
	}
	logs := &lockedbuf.Buffer{}
	cfg.Binary, cfg.Log = binary, logs
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	c, err := localcluster.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("starting %d nodes: %v", cfg.Nodes, err)
	}
	t.Logf("%d nodes ready in %v", cfg.Nodes, time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stopping the cluster: %v", err)
		}
		if t.Failed() {
			t.Logf("node output:\n%s", logs.String())
		}
	})
	return c
}

// CheckAt sends one check of hits tokens of rule and key to node i of c,
// waiting at most timeout, and returns its result. Errors: the node's
// client cannot be had, or the call fails.
func CheckAt(c *localcluster.Cluster, i int, timeout time.Duration, rule, key string, hits int64) (*tokenmeshv1.CheckResult, error) {
	cl, err := c.Client(i)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	resp, err := cl.Check(ctx, &tokenmeshv1.CheckRequest{Checks: []*tokenmeshv1.CheckItem{{Rule: rule, Key: key, Hits: hits}}})
	if err != nil {
		return nil, err
	}
	return resp.GetResults()[0], nil
}

// MetricValue is the value of the first sample named exactly name (no
// labels) in a Prometheus text exposition; false when there is none or it
// does not parse.
func MetricValue(text, name string) (float64, bool) {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}

// Main is a test package's TestMain body: it builds the tokenmesh binary
// into *binary (Build; a failed build panics with go build's output), runs
// m's tests, removes the binary and returns m.Run's code for os.Exit.
func Main(m *testing.M, binary *string) int {
	b, cleanup, err := Build()
	if err != nil {
		panic(err)
	}
	defer cleanup()
	*binary = b
	return m.Run()
}
