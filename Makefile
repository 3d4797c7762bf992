# The test command CI runs (.ci/run calls `make test`, nothing else).
.PHONY: test race bench build fuzz image-binary chart-test manifests

GO ?= go

test:
	$(GO) vet ./...
	$(GO) test -count=1 ./...

# The tests under the race detector (about 3 minutes; not part of CI's
# `make test`).
race:
	$(GO) test -race -count=1 ./...

build:
	$(GO) build -o bin/tokenmesh ./cmd/tokenmesh

# Speed and memory targets: see docs/PERFORMANCE.md.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./bucket ./rendezvous ./sim ./workload ./cluster/grpcpeer
	$(GO) test -run '^$$' -bench 'Server' -benchtime 100000x ./loadgen

# A short coverage-guided run of every fuzz target (not part of `make test`,
# whose run replays the seed corpora only).
FUZZTIME ?= 20s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 5s $$pkg || exit 1; \
	  done; \
	done

# The container image's binary, built as Dockerfile's build stage builds it
# (static, trimmed), for Dockerfile.scratch where no registry is reachable.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
image-binary:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o bin/tokenmesh-static ./cmd/tokenmesh

# Renders the Helm chart (deploy/helm/tokenmesh) offline with helm's Go
# library, pinned in deploy/charttest/go.mod (its own module: the main
# module does not depend on helm), validates every object strictly against
# the k8s.io/api types and the chart's invariants, and checks that
# deploy/manifests/ is the chart's current render, and that every metric
# the Grafana dashboard (deploy/grafana/tokenmesh.json) queries exists. The first run downloads
# helm's and Kubernetes' modules through the Go proxy and builds them (about
# 2 minutes here); not part of `make test`.
chart-test:
	cd deploy/charttest && $(GO) vet . && $(GO) run . -chart ../helm/tokenmesh -check ../manifests/tokenmesh.yaml -dashboard ../grafana/tokenmesh.json

# Renders deploy/manifests/tokenmesh.yaml from the chart again.
manifests:
	cd deploy/charttest && $(GO) run . -chart ../helm/tokenmesh -write ../manifests/tokenmesh.yaml
