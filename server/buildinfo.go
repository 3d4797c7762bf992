package server

import (
	"github.com/prometheus/client_golang/prometheus"
)

// BuildInfo is what the tokenmesh_build_info gauge carries: the binary's
// version (e.g. "v1.2.3" or "dev"), its VCS revision (a commit hash, ""
// when unknown) and the Go version it was built with ("go1.24.1").
type BuildInfo struct {
	Version, Revision, GoVersion string
}

// SetBuildInfo registers, on the server's registry, the gauge
//
//	tokenmesh_build_info{version,revision,goversion} 1
//
// (the Prometheus convention for build labels: join on it to label other
// series with the version). An empty Revision is exported as "unknown".
// Call it once per server: it fails when the same gauge is already
// registered.
func (s *Server) SetBuildInfo(b BuildInfo) error {
	rev := b.Revision
	if rev == "" {
		rev = "unknown"
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "tokenmesh_build_info",
		Help:        "Always 1; the labels say which tokenmesh binary this node runs: version, VCS revision, Go version.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": rev, "goversion": b.GoVersion},
	})
	g.Set(1)
	return s.metrics.reg.Register(g)
}
