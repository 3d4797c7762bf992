#!/usr/bin/env bash
# Regenerates the Go code for api/**/*.proto. The generated code is committed,
# so building and testing tokenmesh never needs protoc; run this after
# editing a .proto file. Needs protoc (Debian: protobuf-compiler) and
# protoc-gen-go and protoc-gen-go-grpc at the versions pinned below.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v protoc >/dev/null || { echo "gen.sh: protoc not found (apt-get install protobuf-compiler)" >&2; exit 1; }
GOFLAGS= go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.5
GOFLAGS= go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
PATH="$(go env GOPATH)/bin:$PATH"
for dir in $(find api -name '*.proto' -exec dirname {} \; | sort -u); do
  protoc -I api --go_out=. --go_opt=module=github.com/tokenmesh/tokenmesh \
    --go-grpc_out=. --go-grpc_opt=module=github.com/tokenmesh/tokenmesh "$dir"/*.proto
done
