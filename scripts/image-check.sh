#!/usr/bin/env bash
# The CPU image built and run here (issue 26), from nothing but the Debian and PyPI registries:
#
#   1. base: Debian bookworm's Python 3.11 by debootstrap (minbase + python3, python3-venv,
#      python-is-python3, ca-certificates), committed from `buildah from scratch` as
#      localhost/orpheus-base:bookworm-py3.11 (kept and reused; REBUILD_BASE=1 redoes it);
#   2. the two wheels, `python -m build --wheel`, and a build context holding exactly what
#      deploy/docker/Dockerfile.cpu copies (scripts/release/docker_context.py);
#   3. `buildah bud --layers` of Dockerfile.cpu with PYTHON_IMAGE=the base and torch from PyPI
#      (TORCH_INDEX_URL=https://pypi.org/simple: the CPU wheel index is not reachable here);
#      its stage "deps" (torch and the pins) tagged localhost/orpheus-svc-deps:cpu and kept,
#      so a later build adds only the wheels' layers (REBUILD_DEPS=1 builds it afresh);
#   4. `podman run` with a read-only root filesystem (a tmpfs on /tmp, as the Kubernetes pod
#      has): health SERVING, the container's user not root, its root filesystem refusing a
#      write, one Synthesize from the Python client outside it, a clean stop on SIGTERM;
#   5. the GPU Dockerfile, whose NVIDIA base cannot be had here: its build context assembled
#      the same way (every COPY source exists; it installs the wheels just built);
#   6. the result (times, size, versions) written between the image-check markers of
#      docs/deploy.md, and the image removed (KEEP_IMAGE=1 keeps it).
#
# Run by scripts/test.sh when ORPHEUS_IMAGE_CHECK=1. Needs root with buildah, podman, runc
# and debootstrap (apt-get install buildah podman runc debootstrap).
# Env: DEV_PYTHON (default .venv/bin/python, with build), DEBIAN_MIRROR, TORCH_INDEX_URL,
#      PODMAN_RUNTIME (default runc: crun refuses this sandbox's hybrid cgroups).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
DEV_PY="${DEV_PYTHON:-${ROOT}/.venv/bin/python}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
TORCH_INDEX_URL="${TORCH_INDEX_URL:-https://pypi.org/simple}"
BASE="localhost/orpheus-base:bookworm-py3.11"
VERSION="$(sed -n 's/^__version__ = "\(.*\)"/\1/p' orpheus_svc/__init__.py)"
TAG="localhost/orpheus-svc:${VERSION}-cpu"
DEPS="localhost/orpheus-svc-deps:cpu"  # the image's dependency layers, kept between builds
NAME="orpheus-image-check-$$"
WORK="$(mktemp -d /var/tmp/orpheus-image-XXXX)"
# This sandbox: crun cannot run in hybrid cgroup mode, and the runtime may not raise
# RLIMIT_NPROC/NOFILE to podman's defaults; runc with cgroupfs and explicit limits can.
PODMAN=(podman --runtime "${PODMAN_RUNTIME:-runc}" --cgroup-manager cgroupfs)
LIMITS=(--ulimit nofile=20000:20000 --ulimit nproc=4096:4096)
cleanup() {
  "${PODMAN[@]}" rm -f "${NAME}" >/dev/null 2>&1 || true
  [[ "${KEEP_IMAGE:-}" == 1 ]] || podman rmi -f "${TAG}" >/dev/null 2>&1 || true
  podman image prune -f >/dev/null 2>&1 || true
  rm -rf "${WORK}"
}
trap cleanup EXIT
say() { printf 'image-check: %s\n' "$*"; }

# 1. the base image from Debian packages
t0=${SECONDS}
if [[ "${REBUILD_BASE:-}" == 1 ]] || ! podman image exists "${BASE}"; then
  debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
    bookworm "${WORK}/rootfs" "${MIRROR}" >"${WORK}/debootstrap.log" 2>&1 \
    || { tail -20 "${WORK}/debootstrap.log"; exit 1; }
  rm -rf "${WORK}/rootfs/var/cache/apt/archives/"*.deb "${WORK}/rootfs/var/lib/apt/lists/"*
  # A build machine whose egress re-signs TLS (a proxy CA in HOST_CA_DIR) passes that trust
  # on: pip in the build stages would refuse PyPI's certificate otherwise. Local to this
  # base image; docs/deploy.md says so.
  shopt -s nullglob
  cas=("${HOST_CA_DIR:-/usr/local/share/ca-certificates}"/*.crt)
  shopt -u nullglob
  if (( ${#cas[@]} )); then
    cp "${cas[@]}" "${WORK}/rootfs/usr/local/share/ca-certificates/"
    chroot "${WORK}/rootfs" update-ca-certificates >/dev/null
    printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"${WORK}/rootfs/etc/pip.conf"
    say "base trusts ${#cas[@]} CA(s) of this machine: ${cas[*]##*/}"
  fi
  ctr="$(buildah from scratch)"
  cp -a "${WORK}/rootfs/." "$(buildah mount "${ctr}")/"
  buildah umount "${ctr}" >/dev/null
  buildah config --env LANG=C.UTF-8 --cmd python3 "${ctr}"
  buildah commit -q "${ctr}" "${BASE}" >/dev/null
  buildah rm "${ctr}" >/dev/null
  rm -rf "${WORK}/rootfs"
fi
BASE_S=$((SECONDS - t0))
say "base ${BASE}: $(podman run --rm "${LIMITS[@]}" --runtime "${PODMAN_RUNTIME:-runc}" \
  --cgroup-manager cgroupfs "${BASE}" python --version 2>&1) (${BASE_S} s)"

# 2. wheels and build contexts
"${DEV_PY}" scripts/release/source_tree.py "${WORK}/src"  # no earlier build's leftovers
"${DEV_PY}" -m build --wheel --outdir "${WORK}/dist" "${WORK}/src" >"${WORK}/build.log" 2>&1
"${DEV_PY}" -m build --wheel --outdir "${WORK}/dist" "${WORK}/src/clients/python" >>"${WORK}/build.log" 2>&1
"${DEV_PY}" scripts/release/docker_context.py deploy/docker/Dockerfile.cpu "${WORK}/dist" "${WORK}/ctx-cpu"
"${DEV_PY}" scripts/release/docker_context.py deploy/docker/Dockerfile "${WORK}/dist" "${WORK}/ctx-gpu"

# 3. the CPU image, in layers (Dockerfile.cpu): its stage "deps" (torch and the pinned
# dependencies, 5.9 of the image's 6.1 GB) tagged DEPS and kept, as the base is, so that the
# next build reuses it from the layer cache and builds only our wheels' layers; it is built
# again when its inputs change (the base, requirements-cpu.txt, the torch arguments) or with
# REBUILD_DEPS=1 (or REBUILD_BASE=1). Then the image must stand on that stage's layers.
t0=${SECONDS}
BUD=(buildah bud --isolation chroot --network host --pull=never --layers
  -f "${ROOT}/deploy/docker/Dockerfile.cpu" --build-arg "PYTHON_IMAGE=${BASE}"
  --build-arg "TORCH_INDEX_URL=${TORCH_INDEX_URL}")
NO_CACHE=()
if [[ "${REBUILD_DEPS:-}" == 1 ]]; then
  # The old deps stage goes first, with the image on it: `--no-cache` alone rebuilds the
  # stage, but the final build's layer cache may still pick the old stage's layers (seen: the
  # check below failed). REBUILD_BASE=1 needs none of this: a new base misses the cache.
  podman rmi -f "${TAG}" "${DEPS}" >/dev/null 2>&1 || true
  podman image prune -f >/dev/null 2>&1 || true  # (its intermediate images, now dangling)
  NO_CACHE=(--no-cache)
fi
DEPS_BEFORE="$(podman image inspect "${DEPS}" --format '{{.Id}}' 2>/dev/null || true)"
"${BUD[@]}" "${NO_CACHE[@]}" --target deps -t "${DEPS}" "${WORK}/ctx-cpu" >"${WORK}/bud.log" 2>&1 \
  || { tail -40 "${WORK}/bud.log"; exit 1; }
DEPS_ID="$(podman image inspect "${DEPS}" --format '{{.Id}}')"
DEPS_S=$((SECONDS - t0))
if [[ "${DEPS_ID}" == "${DEPS_BEFORE}" ]]; then DEPS_NOTE="deps ${DEPS_ID:0:12} reused"
else DEPS_NOTE="deps ${DEPS_ID:0:12} built in ${DEPS_S} s"; fi
"${BUD[@]}" -t "${TAG}" "${WORK}/ctx-cpu" >>"${WORK}/bud.log" 2>&1 || { tail -40 "${WORK}/bud.log"; exit 1; }
# the final image must stand on the deps just tagged (a cache miss would rebuild torch unseen)
"${DEV_PY}" - "$(podman image inspect "${DEPS}" --format '{{json .RootFS.Layers}}')" \
  "$(podman image inspect "${TAG}" --format '{{json .RootFS.Layers}}')" <<'PY' || exit 1
import json, sys
deps, final = (json.loads(a) for a in sys.argv[1:3])
if final[:len(deps)] != deps or len(final) <= len(deps):
    sys.exit(f"image-check: the image's layers do not start with its deps stage's: {deps} {final} "
             "(an older deps stage in the layer cache, held by another image? REBUILD_DEPS=1)")
PY
BUILD_S=$((SECONDS - t0))
SIZE_B="$(podman image inspect "${TAG}" --format '{{.Size}}')"
SIZE="$(numfmt --to=iec --suffix=B "${SIZE_B}")"
STORE="$(du -sh /var/lib/containers/storage 2>/dev/null | cut -f1)"
say "built ${TAG} in ${BUILD_S} s (${DEPS_NOTE}): ${SIZE} in $(podman image inspect "${TAG}" --format '{{len .RootFS.Layers}}') layers (container storage now ${STORE})"

# 4. run it: read-only root, /tmp a tmpfs (HOME and caches there, as in deploy/k8s)
PORT="$("${DEV_PY}" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
t0=${SECONDS}
"${PODMAN[@]}" run -d --name "${NAME}" "${LIMITS[@]}" --read-only --tmpfs /tmp \
  -e HOME=/tmp -e XDG_CACHE_HOME=/tmp/.cache -p "127.0.0.1:${PORT}:50051" "${TAG}" >/dev/null
UIDS="$("${PODMAN[@]}" exec "${NAME}" id -u)"
[[ "${UIDS}" != 0 ]] || { say "the container runs as root"; exit 1; }
if "${PODMAN[@]}" exec "${NAME}" touch /opt/venv/written 2>/dev/null; then
  say "the root filesystem accepted a write"; exit 1
fi
"${DEV_PY}" scripts/release/image_client.py "127.0.0.1:${PORT}" "${VERSION}" \
  || { "${PODMAN[@]}" logs "${NAME}" | tail -30; exit 1; }
SERVING_S=$((SECONDS - t0))
"${PODMAN[@]}" stop -t 30 "${NAME}" >/dev/null
EXIT="$("${PODMAN[@]}" inspect "${NAME}" --format '{{.State.ExitCode}}')"
[[ "${EXIT}" == 0 ]] || { say "exit code ${EXIT} after SIGTERM"; "${PODMAN[@]}" logs "${NAME}" | tail -20; exit 1; }
say "ran as uid ${UIDS}, read-only root, SERVING + Synthesize in ${SERVING_S} s, exit 0 on SIGTERM"

# 6. the result into docs/deploy.md
"${DEV_PY}" scripts/release/record_image_check.py docs/deploy.md \
  "date=$(date -u +%Y-%m-%d)" "version=${VERSION}" "base_s=${BASE_S}" "build_s=${BUILD_S}" \
  "size=${SIZE}" "size_bytes=${SIZE_B}" "uid=${UIDS}" "serving_s=${SERVING_S}" \
  "storage=${STORE}" "torch=from ${TORCH_INDEX_URL}" "deps=${DEPS_NOTE}" \
  "layers=$(podman image inspect "${TAG}" --format '{{len .RootFS.Layers}}')" "tools=$(buildah --version | cut -d' ' -f1-3), $(podman --version)"
say "OK (docs/deploy.md updated)"
