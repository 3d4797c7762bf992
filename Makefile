# The test command CI runs (.ci/run calls `make test`, nothing else).
.PHONY: test race bench bench-peers build fuzz soak chaos-soak image-binary chart-test manifests

GO ?= go

# bench/peers is a module of its own (go-redis stays out of the main one):
# vetted and tested here too, so that a change of the main module that
# breaks it (its go.mod needing a tidy, an API it uses) fails CI. Its
# redis_rate server's test starts a redis-server of its own (installed from
# the OS packages when missing, as bench-peers does); no other peer runs.
# api/gen.sh --check regenerates the protobuf code into a temporary
# directory with the pinned generators and fails when the committed code
# is stale (protoc from the OS packages when missing; about 2 s with the
# tools installed, 2-3 minutes on a fresh machine).
test:
	$(GO) vet ./...
	bash api/gen.sh --check
	$(GO) test -count=1 -timeout 14m ./...
	@command -v redis-server >/dev/null || (apt-get update -qq && apt-get install -y -qq redis-server >/dev/null)
	cd bench/peers && $(GO) vet ./... && $(GO) test -count=1 ./...

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
	$(GO) test -run '^$$' -bench 'Allow' -benchmem -cpu 1,2 ./limiter

# tokenmesh and its peers on one harness (issue 14; not part of `make test`,
# about 5 minutes): installs Gubernator and envoyproxy/ratelimit at pinned
# versions into bench/peers/bin, redis-server from the OS packages when
# missing, builds the redis_rate server of bench/peers, then runs them all
# on loopback (1 and 3 nodes), A-B-A-B, and prints one table. Arguments of
# the harness: PEERS_ARGS (e.g. PEERS_ARGS="--nodes 1 --duration 4s"; on
# realistic keys with a real limit and the excess admitted per key:
# PEERS_ARGS="--keys-dist tenants:20 --limit 100/s --gubernator exact,global").
GUBERNATOR_VERSION ?= v2.13.0
RATELIMIT_VERSION ?= v1.4.1-0.20260122083618-3fb702589d36
PEERS_BIN := $(CURDIR)/bench/peers/bin
PEERS_ARGS ?=
bench-peers: build
	@test -x $(PEERS_BIN)/gubernator || GOBIN=$(PEERS_BIN) $(GO) install github.com/gubernator-io/gubernator/v2/cmd/gubernator@$(GUBERNATOR_VERSION)
	@test -x $(PEERS_BIN)/service_cmd || GOBIN=$(PEERS_BIN) $(GO) install github.com/envoyproxy/ratelimit/src/service_cmd@$(RATELIMIT_VERSION)
	@command -v redis-server >/dev/null || (apt-get update && apt-get install -y redis-server)
	cd bench/peers && $(GO) build -o bin/redisrate ./redisrate && $(GO) build -o bin/floor ./floor && $(GO) build -o bin/peers .
	$(PEERS_BIN)/peers --tokenmesh bin/tokenmesh --bin $(PEERS_BIN) $(PEERS_ARGS)

# A short coverage-guided run of every fuzz target (not part of `make test`,
# whose run replays the seed corpora only).
FUZZTIME ?= 20s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 5s $$pkg || exit 1; \
	  done; \
	done

# Every property test of the module (the tests that call rapid.Check, or a
# function of their test files that does: scripts/rapid-tests.awk; the one
# before it missed quota's three, which call it through a helper), with
# ten times the checks `make test` runs (it passes no -rapid.checks: rapid's
# default, 100), one package at a time, each failure reported and the
# target failing at the end; not part of `make test` or CI. rapid shrinks a
# failure and prints the command that replays it (its seed, or the .fail
# file written under the package's testdata/rapid). strategy/gdrl starts
# from a fixed seed unless one is given: SOAK_FLAGS=-rapid.seed=0 draws a
# random one for every package. Each package runs under an address-space
# limit (SOAK_MEM_KB, 8 GB), so that a test that allocates without bound
# fails instead of taking the shared machine's memory (the OOM killer took
# statestore's TestDamagedPages at 24 GB in the first soak).
#
# Then the randomized fault runs (chaos-soak, also a target of its own):
# `tokenmesh chaos --random` for SOAK_CHAOS_DURATION (30 minutes) at each
# of the seeds SOAK_CHAOS_SEEDS (1 2 3), one after the other, owner, lease
# and gdrl in parallel on three clusters of 3 nodes (in network namespaces
# when run as root), each failing on a key beyond b + r*T + 1 in a quiet
# window, a fault not applied, or (--check-flat) a node whose goroutines
# (+20) or RSS (1.5x + 32 MiB) 10 s after the load exceed their level under
# the load before the first fault. Reports go to SOAK_CHAOS_OUT/seed-N
# (report.md, schedule.txt, every check in history-<strategy>.csv, the
# nodes' logs). About 100 minutes.
SOAK_CHECKS ?= 1000
SOAK_TIMEOUT ?= 2h
SOAK_MEM_KB ?= 8000000
SOAK_FLAGS ?=
SOAK_CHAOS_DURATION ?= 30m
SOAK_CHAOS_SEEDS ?= 1 2 3
SOAK_CHAOS_OUT ?= soak-chaos
soak:
	@fail=0; for d in $$($(GO) list -f '{{.Dir}}' ./...); do \
	  tests=$$(awk -f scripts/rapid-tests.awk $$d/*_test.go 2>/dev/null | sort -u | paste -sd'|' -); \
	  [ -n "$$tests" ] || continue; \
	  echo "== $$d: $$tests"; \
	  (ulimit -v $(SOAK_MEM_KB) && $(GO) test -count=1 -timeout $(SOAK_TIMEOUT) -run "^($$tests)$$" $$d -rapid.checks=$(SOAK_CHECKS) $(SOAK_FLAGS)) || fail=1; \
	done; $(MAKE) chaos-soak || fail=1; exit $$fail

chaos-soak: build
	@fail=0; ns=$$([ "$$(id -u)" = 0 ] && command -v ip >/dev/null && echo --netns); for seed in $(SOAK_CHAOS_SEEDS); do \
	  echo "== tokenmesh chaos --random --seed $$seed --duration $(SOAK_CHAOS_DURATION) $$ns"; \
	  bin/tokenmesh chaos --random --seed $$seed --duration $(SOAK_CHAOS_DURATION) --strategy owner,lease,gdrl --check-flat $$ns \
	    --out $(SOAK_CHAOS_OUT)/seed-$$seed || fail=1; \
	done; exit $$fail

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
