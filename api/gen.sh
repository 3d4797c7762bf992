#!/usr/bin/env bash
# Generates the Go code of api/**/*.proto (the committed *.pb.go and
# *.pb.gw.go files beside them) with protoc and the plugins pinned below.
#
#   api/gen.sh          regenerate the files in place (after editing a .proto);
#                       then `buf lint` (buf.yaml) when buf is installed
#   api/gen.sh --check  regenerate into a temporary directory and fail, with
#                       the diff, when a committed file differs from what the
#                       .proto files generate, or one is missing or extra
#                       (make test runs this, so CI fails on stale code)
#
# Building and testing tokenmesh never needs these tools: the generated code
# is committed. protoc is Debian's protobuf-compiler, installed here when
# missing (as root, like the Makefile's redis-server); the plugins are built
# with `go install` at the pinned versions into $TOKENMESH_TOOLS (default
# ~/.cache/tokenmesh/protoc-plugins), once per version. The check ignores
# the one line that names protoc's version in each file's header (buf, which
# generated these files before, wrote "(unknown)" there), so a developer
# with another protoc is not failed for it alone.
#
# Time of --check, measured on the 2-core machine CI runs on: 1.6 s with
# the tools installed; 2 min 28 s on a fresh machine (apt-get update and
# install of protoc, the three plugins downloaded and built from empty Go
# caches), while other builds shared the two cores (load 5 to 8). Building
# buf from the module proxy took 10 min 20 s there, which is why the
# generation is protoc's, not buf's.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly MODULE=github.com/tokenmesh/tokenmesh
readonly PLUGINS=(
	google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.5
	google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
	github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@v2.24.0
)
readonly BUF=github.com/bufbuild/buf/cmd/buf@v1.47.2 # for `buf lint` only
TOOLS=${TOKENMESH_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/tokenmesh/protoc-plugins}

check=false
case "${1:-}" in
--check) check=true ;;
"") ;;
*)
	echo "usage: api/gen.sh [--check]" >&2
	exit 2
	;;
esac

# protoc, from Debian's packages when missing.
if ! command -v protoc >/dev/null; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "api/gen.sh: installing protoc (Debian's protobuf-compiler)" >&2
		apt-get update -qq && apt-get install -y -qq protobuf-compiler >/dev/null
	else
		echo "api/gen.sh: protoc not found: install Debian's protobuf-compiler (apt-get install protobuf-compiler)" >&2
		exit 1
	fi
fi

# install_plugin PKG@VERSION builds the plugin into $TOOLS unless the binary
# there is already of that module version.
install_plugin() {
	local bin
	bin="$TOOLS/$(basename "${1%@*}")"
	if [ -x "$bin" ] && [ "$(go version -m "$bin" | awk '$1 == "mod" { print $3 }')" = "${1#*@}" ]; then
		return
	fi
	GOFLAGS= GOBIN="$TOOLS" go install "$1"
}
mkdir -p "$TOOLS"
# One after the other: on two cores, parallel builds from an empty Go
# cache compiled the shared dependencies twice (twice the CPU, slower).
for p in "${PLUGINS[@]}"; do
	install_plugin "$p"
done

# generate OUT writes the generated files under OUT (OUT/api/...).
generate() {
	local out protos
	out=$(cd "$1" && pwd)
	protos=$(cd api && find . -name '*.proto' | sed 's|^\./||' | sort)
	(
		cd api
		# shellcheck disable=SC2086 # one argument per file
		protoc -I . \
			--plugin=protoc-gen-go="$TOOLS/protoc-gen-go" --go_out="$out" --go_opt=module="$MODULE" \
			--plugin=protoc-gen-go-grpc="$TOOLS/protoc-gen-go-grpc" --go-grpc_out="$out" --go-grpc_opt=module="$MODULE" \
			$protos
		# The HTTP/JSON gateway of the public API, its routes in gateway.yaml.
		protoc -I . \
			--plugin=protoc-gen-grpc-gateway="$TOOLS/protoc-gen-grpc-gateway" --grpc-gateway_out="$out" \
			--grpc-gateway_opt=module="$MODULE",grpc_api_configuration=tokenmesh/v1/gateway.yaml \
			tokenmesh/v1/*.proto
	)
}

# generated lists the generated files under DIR/api, relative to DIR.
generated() {
	(cd "$1" && find api -name '*.pb.go' -o -name '*.pb.gw.go' | sort)
}

if ! $check; then
	generate .
	if command -v buf >/dev/null; then
		buf lint
	else
		echo "api/gen.sh: buf not installed: buf lint skipped (GOFLAGS= go install $BUF; about 10 min the first time)" >&2
	fi
	exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
generate "$tmp"
# normalize drops the version of protoc from the header ("// \tprotoc  v3.21.12",
# "// - protoc  v3.21.12").
normalize() { sed -E 's#^(//[[:space:]]+(- )?protoc[[:space:]]+).*#\1(version)#' "$1"; }
stale=0
while read -r f; do
	if [ ! -f "$f" ]; then
		echo "api/gen.sh --check: $f is missing: the .proto files generate it" >&2
		stale=1
	elif ! diff -u --label "$f (committed)" --label "$f (generated)" <(normalize "$f") <(normalize "$tmp/$f") >"$tmp/diff"; then
		echo "api/gen.sh --check: $f is stale: it differs from what the .proto files generate (first 40 lines of the diff):" >&2
		head -40 "$tmp/diff" >&2
		stale=1
	fi
done < <(generated "$tmp")
while read -r f; do
	if [ ! -f "$tmp/$f" ]; then
		echo "api/gen.sh --check: $f is committed but no .proto generates it (remove it)" >&2
		stale=1
	fi
done < <(generated .)
if [ "$stale" != 0 ]; then
	echo "api/gen.sh --check: generated protobuf code is stale: run api/gen.sh and commit the result (pinned: protoc-gen-go, protoc-gen-go-grpc, protoc-gen-grpc-gateway in api/gen.sh)" >&2
	exit 1
fi
echo "api/gen.sh --check: the generated protobuf code is up to date ($(generated . | wc -l) files)"
