#!/usr/bin/env bash
# Regenerates the Go code for api/**/*.proto with buf (buf.yaml,
# buf.gen.yaml and buf.gateway.gen.yaml at the repository root). The
# generated code is committed, so building and testing tokenmesh never
# needs buf or the plugins; run this after editing a .proto file. It
# installs buf and the plugins with `go install` at the versions pinned
# below (the module proxy is enough; no Buf Schema Registry access).
set -euo pipefail
cd "$(dirname "$0")/.."
GOFLAGS= go install github.com/bufbuild/buf/cmd/buf@v1.47.2
GOFLAGS= go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.5
GOFLAGS= go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
GOFLAGS= go install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@v2.24.0
PATH="$(go env GOPATH)/bin:$PATH"
buf lint
buf generate
buf generate --template buf.gateway.gen.yaml --path api/tokenmesh
