#!/usr/bin/env bash
# A Go module's commands for scripts/k8s-check.sh's scale step (KEDA's operator and metrics
# server, Prometheus), built once from the Go module proxy and cached outside the repository:
#
#   build-module.sh NAME MODULE VERSION LDFLAGS KEEP PKG=BIN...
#
# into K8S_CACHE (default /var/cache/orpheus-k8s)/NAME-VERSION: bin/BIN for each package PKG
# of the module (./cmd/...), and, unless KEEP is "-", the module's directory KEEP copied beside
# it (KEDA's config/: its release manifests). These modules build as they are (no `replace`
# pointing into the module, unlike Kubernetes'), so a writable copy of the module directory is
# the build's main module. CGO off: the binaries run on the host or in images FROM scratch.
# LDFLAGS sets the version variables as the projects' own Makefiles do. The Go build cache
# (GBs) is removed afterwards; the modules stay in GOMODCACHE. Prints the cache directory
# as its last line.
set -euo pipefail
NAME="$1" MODULE="$2" VERSION="$3" LDFLAGS="$4" KEEP="$5"
shift 5
CACHE="${K8S_CACHE:-/var/cache/orpheus-k8s}/${NAME}-${VERSION}"
BIN="${CACHE}/bin"
have_all() {
  local p
  for p in "$@"; do [[ -x "${BIN}/${p#*=}" ]] || return 1; done
  [[ "${KEEP}" == - || -d "${CACHE}/${KEEP}" ]]
}
if have_all "$@"; then echo "${CACHE}"; exit 0; fi
mkdir -p "${CACHE}"
exec 8>"${CACHE}/build.lock"
flock 8
if have_all "$@"; then echo "${CACHE}"; exit 0; fi

# GOWORK off: a module zip may carry a go.work naming directories it lacks (Prometheus)
export GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=mod GOCACHE="${CACHE}/gocache"
SRC="${CACHE}/src"
trap 'rm -rf "${SRC}" "${GOCACHE}" "${BIN}.new"' EXIT
DIR="$(cd "${CACHE}" && go mod download -json "${MODULE}@${VERSION}" \
  | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')"
[[ -f "${DIR}/go.mod" ]] || { echo "${NAME} build: no module directory for ${MODULE}@${VERSION}" >&2; exit 1; }
rm -rf "${SRC}" && cp -r "${DIR}" "${SRC}" && chmod -R u+w "${SRC}"
cd "${SRC}"
t0=${SECONDS}
go mod download >&2
echo "${NAME} build: modules in $((SECONDS - t0)) s" >&2
t0=${SECONDS}
PKGS=()
for p in "$@"; do PKGS+=("${p%%=*}"); done
rm -rf "${BIN}.new" && mkdir -p "${BIN}.new" "${BIN}"
# one go build: shared packages compile once, the links overlap
CGO_ENABLED=0 nice -n 10 go build -trimpath -ldflags "-s -w ${LDFLAGS}" -o "${BIN}.new/" "${PKGS[@]}" >&2
for p in "$@"; do mv "${BIN}.new/$(basename "${p%%=*}")" "${BIN}/${p#*=}"; done
rmdir "${BIN}.new"
if [[ "${KEEP}" != - ]]; then rm -rf "${CACHE:?}/${KEEP}" && cp -r "${SRC}/${KEEP}" "${CACHE}/${KEEP}"; fi
echo "${NAME} build: $* in $((SECONDS - t0)) s" >&2
echo "${CACHE}"
