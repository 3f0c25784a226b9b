#!/usr/bin/env bash
# Kubernetes binaries for scripts/k8s-check.sh, built once from the Go module proxy and cached
# outside the repository (K8S_CACHE, default /var/cache/orpheus-k8s/<version>):
#   bin/{kube-apiserver,kube-controller-manager,kube-scheduler,kubelet,kubectl}, bin/pause.
# `go install k8s.io/kubernetes/cmd/...` cannot work: k8s.io/kubernetes's go.mod replaces its
# 31 staging modules (k8s.io/api, client-go, ...) with ./staging paths. A wrapper module
# requires k8s.io/kubernetes, copies its require block and replaces each staging module with
# its published v0.<minor>.<patch> release instead. The version variables are set with
# -ldflags (without them the binaries say v0.0.0-master and the version-skew checks object).
# The Go build cache of this build (about 4.5 GB) is removed afterwards: only the binaries
# (about 500 MB) stay. Modules go to the ordinary GOMODCACHE.
set -euo pipefail
K8S_VERSION="${K8S_VERSION:-v1.34.4}"
CACHE="${K8S_CACHE:-/var/cache/orpheus-k8s}/${K8S_VERSION}"
BIN="${CACHE}/bin"
CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
have_all() { for c in "${CMDS[@]}" pause; do [[ -x "${BIN}/${c}" ]] || return 1; done; }
if have_all; then echo "${BIN}"; exit 0; fi
# one build at a time (two k8s checks at once: the second waits, then finds the binaries)
mkdir -p "${CACHE}"
exec 8>"${CACHE}/build.lock"
flock 8
if have_all; then echo "${BIN}"; exit 0; fi

export GOTOOLCHAIN=local GOFLAGS=-mod=mod GOCACHE="${CACHE}/gocache"
WRAP="${CACHE}/wrapper"
rm -rf "${WRAP}" && mkdir -p "${WRAP}" "${BIN}"
trap 'rm -rf "${WRAP}" "${GOCACHE}" "${BIN}.new"' EXIT
STAGING_VERSION="v0.${K8S_VERSION#v1.}"
MOD="$(cd "${WRAP}" && go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" \
  | sed -n 's/^\s*"GoMod": "\(.*\)",$/\1/p')"
{
  echo "module orpheus.local/k8s-binaries"
  echo
  sed -n 's/^go \(.*\)$/go \1/p' "${MOD}"
  echo
  echo "require k8s.io/kubernetes ${K8S_VERSION}"
  echo
  # the require blocks as they are (staging modules at v0.0.0, replaced below)
  awk '/^require \(/{p=1} p{print} p&&/^\)/{p=0}' "${MOD}"
  echo "replace ("
  sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*$#\t\1 => \1 '"${STAGING_VERSION}"'#p' "${MOD}"
  echo ")"
} >"${WRAP}/go.mod"
n="$(grep -c "=> k8s.io/.* ${STAGING_VERSION}" "${WRAP}/go.mod")"
echo "k8s build: wrapper module with ${n} staging replaces" >&2
{
  echo "package main"
  echo
  echo "import ("
  for c in "${CMDS[@]}"; do echo "	_ \"k8s.io/kubernetes/cmd/${c}\""; done
  echo ")"
  echo
  echo "func main() {}"
} >"${WRAP}/tools.go"
# The pause container: waits for a signal (registry.k8s.io is not reachable here).
mkdir -p "${WRAP}/pause"
cat >"${WRAP}/pause/main.go" <<'GO'
// pause: the sandbox container's process. It reaps nothing and waits for SIGTERM/SIGINT.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
	os.Exit(0)
}
GO
cd "${WRAP}"
go mod tidy >&2
V="k8s.io/component-base/version"
CV="k8s.io/client-go/pkg/version"
MINOR="${K8S_VERSION#v1.}"; MINOR="${MINOR%%.*}"
LD=""
for p in "${V}" "${CV}"; do
  LD+=" -X ${p}.gitVersion=${K8S_VERSION} -X ${p}.gitMajor=1 -X ${p}.gitMinor=${MINOR}"
  LD+=" -X ${p}.gitTreeState=clean -X ${p}.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
done
t0=${SECONDS}
# One `go build` for all five: the packages they share compile once, and the compiles and the
# five links overlap on every core (one build per command ran each link, the longest step of a
# big binary, with the other core idle). Into a new directory, moved into place one by one.
PKGS=()
for c in "${CMDS[@]}"; do PKGS+=("k8s.io/kubernetes/cmd/${c}"); done
rm -rf "${BIN}.new" && mkdir -p "${BIN}.new"
nice -n 10 go build -trimpath -ldflags "-s -w${LD}" -o "${BIN}.new/" "${PKGS[@]}" >&2
for c in "${CMDS[@]}"; do mv "${BIN}.new/${c}" "${BIN}/${c}"; done
rmdir "${BIN}.new"
echo "k8s build: ${CMDS[*]} in $((SECONDS - t0)) s" >&2
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${BIN}/pause" ./pause >&2
echo "${BIN}"
