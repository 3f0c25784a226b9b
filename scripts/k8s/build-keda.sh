#!/usr/bin/env bash
# KEDA's operator and metrics API server for scripts/k8s-check.sh's scale step, built once from
# the Go module proxy and cached outside the repository (K8S_CACHE, default
# /var/cache/orpheus-k8s/keda-<version>):
#   bin/keda (the operator), bin/keda-adapter (the external metrics API server), config/ (the
#   release's own kustomize tree: CRDs, RBAC, Deployments, Services, APIService).
# The module builds as it is: its go.mod has one `replace` of its own, so a writable copy of
# the module directory is the build's main module (no wrapper, unlike Kubernetes). CGO off: the
# binaries go into images FROM scratch. The version is set with -ldflags as KEDA's Makefile
# does. The Go build cache (a few GB) is removed afterwards; modules go to GOMODCACHE.
# Prints the cache directory as its last line.
set -euo pipefail
KEDA_VERSION="${KEDA_VERSION:-v2.21.0}"
CACHE="${K8S_CACHE:-/var/cache/orpheus-k8s}/keda-${KEDA_VERSION}"
BIN="${CACHE}/bin"
have_all() { [[ -x "${BIN}/keda" && -x "${BIN}/keda-adapter" && -s "${CACHE}/config/crd/kustomization.yaml" ]]; }
if have_all; then echo "${CACHE}"; exit 0; fi
mkdir -p "${CACHE}"
exec 8>"${CACHE}/build.lock"
flock 8
if have_all; then echo "${CACHE}"; exit 0; fi

export GOTOOLCHAIN=local GOFLAGS=-mod=mod GOCACHE="${CACHE}/gocache"
SRC="${CACHE}/src"
trap 'rm -rf "${SRC}" "${GOCACHE}" "${BIN}.new"' EXIT
DIR="$(cd "${CACHE}" && go mod download -json "github.com/kedacore/keda/v2@${KEDA_VERSION}" \
  | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')"
[[ -f "${DIR}/go.mod" ]] || { echo "keda build: no module directory for ${KEDA_VERSION}" >&2; exit 1; }
rm -rf "${SRC}" && cp -r "${DIR}" "${SRC}" && chmod -R u+w "${SRC}"
cd "${SRC}"
t0=${SECONDS}
go mod download >&2
echo "keda build: modules in $((SECONDS - t0)) s" >&2
t0=${SECONDS}
rm -rf "${BIN}.new" && mkdir -p "${BIN}.new"
LD="-s -w -X=github.com/kedacore/keda/v2/version.Version=${KEDA_VERSION#v}"
LD+=" -X=github.com/kedacore/keda/v2/version.GitCommit=${KEDA_VERSION}"
CGO_ENABLED=0 nice -n 10 go build -trimpath -ldflags "${LD}" -o "${BIN}.new/" ./cmd/operator ./cmd/adapter >&2
mkdir -p "${BIN}"
mv "${BIN}.new/operator" "${BIN}/keda"
mv "${BIN}.new/adapter" "${BIN}/keda-adapter"
rmdir "${BIN}.new"
rm -rf "${CACHE}/config" && cp -r "${SRC}/config" "${CACHE}/config"
echo "keda build: keda, keda-adapter in $((SECONDS - t0)) s" >&2
echo "${CACHE}"
