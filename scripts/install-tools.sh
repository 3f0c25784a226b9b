#!/usr/bin/env bash
# Install the pinned code-generation, debugging, load-testing and deployment tools into a
# project-local GOBIN (.tools/bin, gitignored). Idempotent: a tool whose binary already
# reports the pinned version is skipped, so re-running is cheap and CI can cache .tools/.
#
#   scripts/install-tools.sh          # install what is missing or at the wrong version
#   FORCE=1 scripts/install-tools.sh  # reinstall everything
#
# Needs Go (>= 1.24) and access to the Go module proxy. Nothing comes from buf.build:
# buf runs the locally installed protoc-gen-go / protoc-gen-go-grpc (see buf.gen.yaml).
set -euo pipefail

# Pinned versions. Bump them here only; regenerate (scripts/gen-proto.sh) after bumping a
# protoc plugin, because its version is written into the generated file headers.
BUF_VERSION="v1.75.0"
PROTOC_GEN_GO_VERSION="v1.36.12"       # google.golang.org/protobuf
PROTOC_GEN_GO_GRPC_VERSION="v1.6.2"    # google.golang.org/grpc/cmd/protoc-gen-go-grpc
GRPCURL_VERSION="v1.9.4"
KUSTOMIZE_VERSION="v5.8.2"            # deploy/k8s overlays (v5.8.3 needs Go 1.27)
GHZ_VERSION="v0.120.0"                # gRPC load tool; scripts/ghz-smoke.sh

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export GOBIN="${ROOT}/.tools/bin"
# Build with whatever Go is installed, never fetch a toolchain, never stamp VCS info.
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
mkdir -p "${GOBIN}"

command -v go >/dev/null 2>&1 || { echo "install-tools: 'go' not found on PATH" >&2; exit 1; }

# installed_version BIN: the module version `go version -m` records in the binary ("" if none).
installed_version() {
  local bin="${GOBIN}/$1"
  [[ -x "${bin}" ]] || { echo ""; return; }
  go version -m "${bin}" 2>/dev/null | awk '$1 == "mod" { print $3; exit }'
}

# install NAME PACKAGE VERSION
install() {
  local name="$1" pkg="$2" version="$3"
  local have
  have="$(installed_version "${name}")"
  if [[ -z "${FORCE:-}" && "${have}" == "${version}" ]]; then
    echo "install-tools: ${name} ${version} already installed"
    return
  fi
  echo "install-tools: installing ${name} ${version} (${pkg}) into ${GOBIN}"
  go install "${pkg}@${version}"
  have="$(installed_version "${name}")"
  if [[ "${have}" != "${version}" ]]; then
    echo "install-tools: ${name} reports version '${have}', expected ${version}" >&2
    exit 1
  fi
}

install buf                github.com/bufbuild/buf/cmd/buf                     "${BUF_VERSION}"
install protoc-gen-go      google.golang.org/protobuf/cmd/protoc-gen-go        "${PROTOC_GEN_GO_VERSION}"
install protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc       "${PROTOC_GEN_GO_GRPC_VERSION}"
install grpcurl            github.com/fullstorydev/grpcurl/cmd/grpcurl         "${GRPCURL_VERSION}"
install kustomize          sigs.k8s.io/kustomize/kustomize/v5                  "${KUSTOMIZE_VERSION}"
install ghz                github.com/bojand/ghz/cmd/ghz                       "${GHZ_VERSION}"

# Debian packages the tests use as independent references (never needed for serving):
# ffmpeg decodes every audio encoding we emit; chromium runs the playground page test;
# openssl makes the certificates of scripts/tls-smoke.sh; prometheus brings promtool (the
# alert rules' own tests) and the Prometheus server that scrapes a live server to check
# every dashboard query (tests/deploy/test_observability.py, tests/telemetry).
apt_install() {
  local missing=()
  for pair in "$@"; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair##*:}")
  done
  ((${#missing[@]})) || { echo "install-tools: ${*%%:*} already installed"; return; }
  if ! command -v apt-get >/dev/null 2>&1 || [[ "$(id -u)" != 0 ]]; then
    echo "install-tools: please install ${missing[*]} (needed by the tests)" >&2
    return
  fi
  echo "install-tools: apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
}
apt_install ffmpeg:ffmpeg chromium:chromium openssl:openssl promtool:prometheus

echo "install-tools: done; tools are in ${GOBIN} (add it to PATH or use the scripts)"
