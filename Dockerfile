# syntax=docker/dockerfile:1
#
# Leasehold's production image: the two stateless binaries, cmd/api and
# cmd/worker, in /usr/local/bin of a distroless, non-root base.
#
#   docker build -t leasehold:dev .
#
# The image sets no ENTRYPOINT or CMD on purpose: one image serves both
# roles, and deploy/compose.yaml and deploy/k8s/*.yaml choose the binary
# (command: ["/usr/local/bin/api"] or ["/usr/local/bin/worker"]). Both are
# configured through LEASEHOLD_* environment variables (README.md).

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w" -o /out/ ./cmd/api ./cmd/worker

# static-debian12 carries CA certificates (llm.chat calls HTTPS upstreams)
# and tzdata, and no shell: there is no curl or wget for health checks.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/api /out/worker /usr/local/bin/
# nonroot is uid/gid 65532; repeated here so that the intent survives a
# change of base image.
USER 65532:65532
EXPOSE 8080
