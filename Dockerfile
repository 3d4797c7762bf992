# tokenmesh container image: a static binary on an empty base, run as a
# non-root user. Build: docker build -t tokenmesh .
#
# The first stage needs a Go toolchain image (registry access); where no
# registry is reachable, `make image-binary` builds the same binary with the
# same flags and Dockerfile.scratch packs it (see docs/OPERATIONS.md).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/tokenmesh ./cmd/tokenmesh

FROM scratch
COPY --from=build /out/tokenmesh /tokenmesh
# 65532: the conventional "nonroot" uid of distroless images.
USER 65532:65532
EXPOSE 8080 8081 7946 7946/udp 7947
ENTRYPOINT ["/tokenmesh"]
CMD ["serve"]
