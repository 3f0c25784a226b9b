#!/usr/bin/env bash
# deploy/k8s on a real single-node Kubernetes (issue 37), with no registry and no traffic
# leaving this machine:
#
#   1. cluster: etcd, containerd (own root/state/socket, restrict_oom_score_adj), the API
#      server, controller-manager, scheduler and a kubelet (--node-ip on the pod bridge, cgroupfs,
#      its own cgroup root) with all state under one temporary directory; pods on a bridge
#      (10.244.77.0/24, no default route, no masquerade) that exists only on this machine;
#   2. dryrun: every overlay (`kustomize build`) through `kubectl apply --dry-run=server`, and
#      one broken render that the server must refuse;
#   3. deploy: the image of scripts/image-check.sh in containerd (kept in K8S_CACHE/containerd;
#      a new image imports only the layers containerd lacks: "containerd's copy"), the
#      cpu-demo overlay applied (scripts/k8s/overlay: imagePullPolicy Never): Ready through the
#      gRPC readiness probe, JSON logs, non-root user, read-only root filesystem, one Synthesize;
#   4. wedge: the server process paused 30 s (SIGSTOP, SIGCONT) is not restarted and an open
#      session finishes; paused for good it is restarted by the gRPC liveness probe (timed);
#      meanwhile a slow engine step in a pod of the same spec must not trip its liveness;
#   5. rollout: clients streaming through `kubectl rollout restart` (2 replicas) over a
#      dns:/// target that follows the headless Service (scripts/k8s/headless_dns.py stands
#      in for CoreDNS): every session finished or resumed, none failed; the PDB refuses a
#      second eviction.
#   6. scale: Prometheus (on the host, Kubernetes service discovery) and KEDA (in the
#      cluster, scripts/k8s/keda-install.sh), both built from the Go module proxy
#      (scripts/k8s/build-module.sh), drive the HPA on the sessions metric: streaming clients
#      scale cpu-demo-keda out from 2 pods to 3 and, when most of them stop, back to 2 while
#      the rest stream on; the new pod serves sessions from channels opened before it, the
#      removed one drains, no session is lost (scripts/k8s/scale-step.sh).
#   Everything is torn down on every exit path (processes by cgroup, mounts, network
#   namespaces, the bridge, cgroups, iptables chains the kubelet added) and checked; the
#   cached containerd root is put back as the import left it (its metadata restored, all the
#   run added to it removed) and checked against the listing taken then.
#
# Run by scripts/test.sh when ORPHEUS_K8S_CHECK=1. Needs root and Debian's containerd,
# etcd-server, containernetworking-plugins, conntrack, iptables, openssl, buildah, podman,
# runc, and curl (apt-get install; see docs/deploy.md). The Kubernetes binaries are built once
# (scripts/k8s/build-binaries.sh) into K8S_CACHE (default /var/cache/orpheus-k8s); containerd's
# copy of the image is kept in K8S_CACHE/containerd (one image, about 12 GB: its layers in the
# content store and unpacked); a new image (podman's image ID) brings only its new layers.
# KEDA's and Prometheus's binaries are built once the same way (scripts/k8s/build-module.sh,
# K8S_CACHE/keda-<version>, K8S_CACHE/prometheus-<version>).
# Env: K8S_CHECK_STEPS (default cluster,dryrun,deploy,wedge,rollout,scale; each needs the
#      ones before it except dryrun, wedge and rollout), KEEP_IMAGE=1 (keep the image when
#      this script built it;
#      K8S_REMOVE_IMAGE=1: remove it even if it was there, as scripts/test.sh asks after its
#      image check; containerd's cached copy stays: the next image shares its deps layers),
#      K8S_CHECK_RESULTS (default bench/results/k8s-check.txt), ROLLOUT_CLIENTS (4).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
export PATH="${ROOT}/.tools/bin:${PATH}"
DEV_PY="${DEV_PYTHON:-${ROOT}/.venv/bin/python}"
STEPS=",${K8S_CHECK_STEPS:-cluster,dryrun,deploy,wedge,rollout,scale},"
want() { [[ "${STEPS}" == *",$1,"* ]]; }
RESULTS="${K8S_CHECK_RESULTS:-${ROOT}/bench/results/k8s-check.txt}"
VERSION="$(sed -n 's/^__version__ = "\(.*\)"/\1/p' orpheus_svc/__init__.py)"
IMAGE_LOCAL="localhost/orpheus-svc:${VERSION}-cpu"    # what scripts/image-check.sh builds
IMAGE_K8S="docker.io/library/orpheus-svc:${VERSION}-cpu"  # the cpu-demo overlay's image
BRIDGE=orpk8s0
POD_SUBNET=10.244.77.0/24
NODE_IP=10.244.77.1  # the bridge's own address (see the CNI config below)
NODE=orpheus-k8s
K8S_CACHE_DIR="${K8S_CACHE:-/var/cache/orpheus-k8s}"
T_START=${SECONDS}
say() { printf 'k8s-check [%4d s]: %s\n' "$((SECONDS - T_START))" "$*"; }
record() { printf '%s\n' "$*" >>"${WORK}/results.txt"; say "$*"; }
die() { say "FAILED: $*"; exit 1; }

for tool in containerd ctr etcd runc openssl ip iptables-save buildah podman; do
  command -v "${tool}" >/dev/null || die "${tool} missing (apt-get install containerd etcd-server containernetworking-plugins conntrack iptables buildah podman runc)"
done
if want scale; then
  command -v curl >/dev/null || die "curl missing (apt-get install curl)"
fi
[[ -x /usr/lib/cni/bridge ]] || die "/usr/lib/cni/bridge missing (apt-get install containernetworking-plugins)"
[[ "$(id -u)" == 0 ]] || die "needs root (containerd, kubelet, cgroups, network)"

WORK="$(mktemp -d /var/tmp/orpheus-k8s-XXXXXX)"
CG="orpheus-k8s-${WORK##*-}"           # our cgroup, in every hierarchy
SOCK="${WORK}/containerd/containerd.sock"
CTR=(ctr --address "${SOCK}" --namespace k8s.io)
KC="${WORK}/kubeconfig"
mkdir -p "${WORK}"/{logs,pki,etcd,containerd,cni/net.d,cni/ipam,kubelet,pod-logs}
printf '# scripts/k8s-check.sh, %s, on %s CPU cores (%s), measured\n' "$(date -u +%Y-%m-%dT%H:%MZ)" \
  "$(nproc)" "$(. /etc/os-release && echo "${PRETTY_NAME}")" >"${WORK}/results.txt"
PIDS=()              # name:pid of the daemons, in start order
LOGF_PIDS=()         # kubectl logs -f of the pods a rollout replaces
IMAGE_BUILT=0
CROOT_USED=0         # 1 while containerd's root is the cache's (and we hold its lock, fd 9)
ls /run/netns 2>/dev/null | sort >"${WORK}/netns.before" || true
ls /run/containerd/s 2>/dev/null | sort >"${WORK}/shim-sockets.before" || true
RUN_CONTAINERD_EXISTED=0; [[ -d /run/containerd ]] && RUN_CONTAINERD_EXISTED=1
VAR_LIB_CNI_EXISTED=0; [[ -d /var/lib/cni ]] && VAR_LIB_CNI_EXISTED=1
ls /var/lib/cni 2>/dev/null | sort >"${WORK}/var-lib-cni.before" || true
iptables_chains() {
  local t
  for t in filter nat mangle; do
    { iptables-save -t "${t}" 2>/dev/null || true; } | sed -n "s/^:\([^ ]*\) .*/${t} \1/p"
    { ip6tables-save -t "${t}" 2>/dev/null || true; } | sed -n "s/^:\([^ ]*\) .*/6${t} \1/p"
  done | sort
}
iptables_chains >"${WORK}/chains.before"
nft_tables() { { nft list tables 2>/dev/null || true; } | sort; }
nft_tables >"${WORK}/nft-tables.before"

cgroup_pids() { find /sys/fs/cgroup/pids/"${CG}" -name cgroup.procs -exec cat {} + 2>/dev/null || true; }
our_mounts() {  # targets of the mounts on or of anything under WORK (or the cache's root, in use)
  findmnt -rn -o TARGET,OPTIONS | awk -v w="${WORK}/" -v c="${CROOT}/" -v u="${CROOT_USED}" \
    'index($0, w) || (u == 1 && index($0, c)) {print $1}' | sort -u
}

# containerd's copy of the image, kept between runs as the Kubernetes build is (importing the
# 5.7 GB image took about 150 s of every run, and deleting containerd's copy at teardown up to
# 98 s). The cache (K8S_CACHE/containerd) holds containerd's root only: content store, unpacked
# snapshots, metadata; its state, socket, runc root and everything of the cluster stay under
# WORK. It is filled by a containerd of its own (no CRI plugin), started again once so that
# its start-up garbage collection drops what only the import's lease held, then stopped; the
# two metadata databases and a listing of the root (down to each snapshot's directory) are
# kept as "golden" and the key (podman's image ID, both names, containerd's version) written
# last. A run starts on that root; its teardown restores both databases and removes every path
# the listing does not have (the containers' snapshots, CRI's files, the pause image), then
# compares: anything else fails the check and drops the cache. One run at a time (flock).
# A new image of the same names (a rebuild: Dockerfile.cpu's layers put torch and the pins
# first) is imported into that root, put back first, as an OCI archive of only the blobs
# containerd lacks (scripts/k8s/oci_delta.py: a few MB when only our wheels changed), and the
# restart's garbage collection drops the old image's own layers; the golden copies are taken
# anew.
CCACHE="${K8S_CACHE_DIR}/containerd"
CROOT="${CCACHE}/root"
GOLDEN="${CCACHE}/golden"
CLOCK="${K8S_CACHE_DIR}/containerd.lock"
META_DB=io.containerd.metadata.v1.bolt/meta.db
SNAP_DB=io.containerd.snapshotter.v1.overlayfs/metadata.db
croot_listing() {
  find "${CROOT}" -path "${CROOT}/io.containerd.snapshotter.v1.overlayfs/snapshots/*/*" -prune \
    -o -printf '%y %p\n' | LC_ALL=C sort
}
croot_mounts() {  # mounts on or of anything under the cached root (overlays list it in lowerdir)
  findmnt -rn -o TARGET,OPTIONS | grep -F "${CROOT}/" || true
}
croot_clean() {  # the root exactly as the import left it
  cmp -s "${GOLDEN}/meta.db" "${CROOT}/${META_DB}" && cmp -s "${GOLDEN}/metadata.db" "${CROOT}/${SNAP_DB}" \
    && LC_ALL=C cmp -s "${GOLDEN}/listing" <(croot_listing)
}
croot_reset() {  # only with containerd stopped and nothing mounted from the root
  [[ -s "${GOLDEN}/listing" && -z "$(croot_mounts)" ]] || return 1
  cp -p "${GOLDEN}/meta.db" "${CROOT}/${META_DB}" && cp -p "${GOLDEN}/metadata.db" "${CROOT}/${SNAP_DB}" \
    || return 1
  LC_ALL=C comm -13 "${GOLDEN}/listing" <(croot_listing) | cut -d' ' -f2- | sort -r \
    | while read -r m; do rm -rf --one-file-system "${m}"; done
  croot_clean
}

teardown() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  local t_down=${SECONDS}
  say "teardown (exit ${rc})"
  [[ -n "${CLIENTS_PID:-}" ]] && kill "${CLIENTS_PID}" 2>/dev/null
  [[ -n "${CLIENTS_B_PID:-}" ]] && kill "${CLIENTS_B_PID}" 2>/dev/null
  # a Kubernetes, KEDA or Prometheus build still running: its whole session (go and its compilers),
  # waited for until none of it is left (the PID checked to be still the build's)
  local b
  for b in "${BUILD_PID:-}:build-binaries" "${KEDA_BUILD_PID:-}:build-module"; do
    if [[ -n "${b%%:*}" ]] && grep -qs "${b#*:}" "/proc/${b%%:*}/cmdline"; then
      kill -TERM -- "-${b%%:*}" 2>/dev/null; wait "${b%%:*}" 2>/dev/null
      for _ in $(seq 1 100); do pgrep -g "${b%%:*}" >/dev/null || break; sleep 0.1; done
      pkill -KILL -g "${b%%:*}" 2>/dev/null
    fi
  done
  [[ -n "${DNS_PID:-}" ]] && kill "${DNS_PID}" 2>/dev/null
  [[ -n "${WATCH_PID:-}" ]] && kill "${WATCH_PID}" 2>/dev/null
  # the background checks, and what they were running (a sleep, kubectl, a client)
  local bg
  for bg in "${SLOW_PID:-}" "${SESSION_PID:-}"; do
    [[ -n "${bg}" ]] && { pkill -TERM -P "${bg}" 2>/dev/null; kill "${bg}" 2>/dev/null; }
  done
  for pid in "${LOGF_PIDS[@]}"; do kill "${pid}" 2>/dev/null; done
  # a paused container would ignore everything but SIGKILL
  [[ -n "${STOPPED_PID:-}" ]] && kill -CONT "${STOPPED_PID}" 2>/dev/null
  # daemons, newest first: the kubelet before containerd, the control plane before etcd
  local i entry pid
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
    entry="${PIDS[i]}"; pid="${entry#*:}"
    kill -TERM "${pid}" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "${pid}" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "${pid}" 2>/dev/null
    wait "${pid}" 2>/dev/null
  done
  # whatever is left in our cgroup: containerd's shims and the containers (by pid)
  local left
  for _ in $(seq 1 50); do
    left="$(cgroup_pids)"
    [[ -z "${left}" ]] && break
    # shellcheck disable=SC2086
    kill -KILL ${left} 2>/dev/null
    sleep 0.1
  done
  # mounts under our directory (overlay root filesystems, kubelet volumes) or of the cached
  # containerd root (an overlay's lowerdir, an import's temporary mount), deepest first
  local m
  our_mounts | sort -r | while read -r m; do umount -l "${m}"; done
  # network namespaces and shim sockets made while we ran; then our bridge
  comm -13 "${WORK}/netns.before" <(ls /run/netns 2>/dev/null | sort) | grep '^cni-' \
    | while read -r m; do ip netns delete "${m}"; done
  comm -13 "${WORK}/shim-sockets.before" <(ls /run/containerd/s 2>/dev/null | sort) \
    | while read -r m; do rm -f "/run/containerd/s/${m}"; done
  # containerd's shims put their sockets under /run/containerd/s whatever its state dir
  if [[ "${RUN_CONTAINERD_EXISTED}" == 0 ]]; then
    rmdir /run/containerd/s /run/containerd 2>/dev/null
  fi
  comm -13 "${WORK}/var-lib-cni.before" <(ls /var/lib/cni 2>/dev/null | sort) \
    | while read -r m; do rm -rf "/var/lib/cni/${m}"; done
  [[ "${VAR_LIB_CNI_EXISTED}" == 0 ]] && rmdir /var/lib/cni 2>/dev/null
  ip link show "${BRIDGE}" >/dev/null 2>&1 && ip link delete "${BRIDGE}"
  # chains the kubelet added (its canaries, KUBE-FIREWALL): the rules that jump to them
  # first (KUBE-FIREWALL is hooked into INPUT and OUTPUT), then the chains
  comm -13 "${WORK}/chains.before" <(iptables_chains) | while read -r t c; do
    local cmd=iptables
    [[ "${t}" == 6* ]] && { cmd=ip6tables; t="${t#6}"; }
    "${cmd}-save" -t "${t}" 2>/dev/null | grep -E -- "^-A .* -j ${c}( |\$)" | sed 's/^-A /-D /' \
      | while read -r rule; do eval "${cmd} -t ${t} ${rule}" 2>/dev/null; done
    "${cmd}" -t "${t}" -F "${c}" 2>/dev/null; "${cmd}" -t "${t}" -X "${c}" 2>/dev/null
  done
  # iptables tables the kubelet's canaries brought into being, if nothing else uses them
  comm -13 "${WORK}/nft-tables.before" <(nft_tables) | while read -r _ fam tab; do
    grep -qE '^\s+(ip|meta|counter|jump|accept|drop|tcp|udp)' <<<"$(nft list table "${fam}" "${tab}" 2>/dev/null)" \
      || nft delete table "${fam}" "${tab}" 2>/dev/null
  done
  # our cgroups, deepest first, in every hierarchy
  local h
  for _ in 1 2 3; do
    for h in /sys/fs/cgroup/*/; do
      [[ -d "${h}${CG}" ]] && find "${h}${CG}" -depth -type d -exec rmdir {} + 2>/dev/null
    done
  done
  local leftover=""
  if [[ ( "${IMAGE_BUILT}" == 1 || "${K8S_REMOVE_IMAGE:-}" == 1 ) && "${KEEP_IMAGE:-}" != 1 ]]; then
    # containerd's copy stays: the next build's image shares all but its wheels' layers
    podman rmi -f "${IMAGE_LOCAL}" >/dev/null 2>&1 9>&-
  fi
  # containerd's cached root: back as the import left it (containerd is gone by now: it was
  # in our cgroup), or dropped (a fill that did not finish, a root that cannot be put back)
  if [[ "${CROOT_USED}" == 1 ]]; then
    if [[ -n "$(cgroup_pids)" || -n "$(croot_mounts)" ]]; then
      leftover+=" containerd-cache-in-use"  # not touched while anything may still use it
    elif [[ ! -s "${CCACHE}/key" ]]; then
      rm -rf --one-file-system "${CCACHE}"
    elif ! croot_reset; then
      leftover+=" containerd-cache-changed"
      {  # what differs, for the kept logs: golden listing (<) against the root now (>)
        LC_ALL=C diff "${GOLDEN}/listing" <(croot_listing) | head -300
        cmp "${GOLDEN}/meta.db" "${CROOT}/${META_DB}"; cmp "${GOLDEN}/metadata.db" "${CROOT}/${SNAP_DB}"
      } >"${WORK}/logs/containerd-cache-diff.txt" 2>&1
      rm -rf --one-file-system "${CCACHE}"
    fi
  fi
  # what is left must be nothing
  [[ -n "$(cgroup_pids)" ]] && leftover+=" processes"
  pgrep -f "^containerd --config ${WORK}/" >/dev/null && leftover+=" containerd"
  [[ -n "$(our_mounts)" ]] && leftover+=" mounts"
  ip link show "${BRIDGE}" >/dev/null 2>&1 && leftover+=" bridge"
  ls -d /sys/fs/cgroup/*/"${CG}" >/dev/null 2>&1 && leftover+=" cgroups"
  [[ -n "$(comm -13 "${WORK}/netns.before" <(ls /run/netns 2>/dev/null | sort))" ]] && leftover+=" netns"
  [[ -n "$(comm -13 "${WORK}/chains.before" <(iptables_chains))" ]] && leftover+=" iptables-chains"
  [[ -d /run/containerd && "${RUN_CONTAINERD_EXISTED}" == 0 ]] && leftover+=" /run/containerd"
  if [[ "${CROOT_USED}" == 1 ]]; then  # no process of ours may still hold the cache's lock
    exec 9>&-
    flock -n "${CLOCK}" true || leftover+=" processes-holding-${CLOCK}"
  fi
  if [[ -s "${WORK}/results.txt" && "${rc}" == 0 && -z "${leftover}" ]]; then
    printf 'teardown %d s, nothing left behind; the whole check %d s\n' "$((SECONDS - t_down))" \
      "$((SECONDS - T_START))" >>"${WORK}/results.txt"
    mkdir -p "$(dirname "${RESULTS}")"
    cp "${WORK}/results.txt" "${RESULTS}"
  fi
  if [[ ( "${rc}" != 0 || -n "${leftover}" ) && -d "${WORK}/logs" ]]; then
    local keep="/var/tmp/orpheus-k8s-logs-${WORK##*-}"
    cp -r "${WORK}/logs" "${keep}" 2>/dev/null && say "logs kept in ${keep}"
  fi
  rm -rf "${WORK}"
  if [[ -n "${leftover}" ]]; then
    say "LEFT BEHIND:${leftover}"; rc=1
  else
    say "torn down in $((SECONDS - t_down)) s: no process, mount, network namespace, bridge or cgroup left$( \
      ((CROOT_USED)) && [[ -s "${CCACHE}/key" ]] && echo "; containerd's cached root as the import left it")"
  fi
  exit "${rc}"
}
trap teardown EXIT

# The Kubernetes binaries (scripts/k8s/build-binaries.sh: cached, or built once, mostly CPU)
# build in the background, in a session of their own, while the image is built and imported
# (mostly disk and network): a cold run pays for the longer of the two, not their sum. Nothing
# before the cluster's daemons needs them. The teardown stops a build still running.
T_BUILD_EPOCH="$(date +%s)"
setsid scripts/k8s/build-binaries.sh >"${WORK}/logs/k8s-build.out" 2>"${WORK}/logs/k8s-build.log" &
BUILD_PID=$!
# KEDA (its CRDs for the dry run, its two binaries for the scale step) and Prometheus
# (Debian's is built without Kubernetes service discovery), built beside it, one after the
# other: the output's two lines are their directories.
KEDA_VERSION=v2.21.0 PROMETHEUS_VERSION=v0.316.0  # the module's v0.3XX.Y is Prometheus 3.XX.Y
setsid bash -c '
  scripts/k8s/build-module.sh keda github.com/kedacore/keda/v2 "$1" \
    "-X=github.com/kedacore/keda/v2/version.Version=${1#v} -X=github.com/kedacore/keda/v2/version.GitCommit=$1" \
    config ./cmd/operator=keda ./cmd/adapter=keda-adapter &&
  scripts/k8s/build-module.sh prometheus github.com/prometheus/prometheus "$2" \
    "-X github.com/prometheus/common/version.Version=$3 -X github.com/prometheus/common/version.Revision=$2" \
    - ./cmd/prometheus=prometheus' build-module "${KEDA_VERSION}" "${PROMETHEUS_VERSION}" 3.16.0 \
  >"${WORK}/logs/keda-build.out" 2>"${WORK}/logs/keda-build.log" &
KEDA_BUILD_PID=$!
keda_built() {  # waits for the KEDA and Prometheus builds once; sets KEDA_DIR, PROM_BIN, KEDA_BUILD_NOTE
  [[ -n "${KEDA_DIR:-}" ]] && return 0
  local t_wait=${SECONDS}
  wait "${KEDA_BUILD_PID}" || { tail -30 "${WORK}/logs/keda-build.log"; KEDA_BUILD_PID=""; die "the KEDA build failed"; }
  KEDA_BUILD_PID=""
  KEDA_DIR="$(sed -n 1p "${WORK}/logs/keda-build.out")"
  PROM_BIN="$(sed -n 2p "${WORK}/logs/keda-build.out")/bin/prometheus"
  [[ -x "${KEDA_DIR}/bin/keda" && -x "${KEDA_DIR}/bin/keda-adapter" ]] || die "the KEDA build named no binaries: ${KEDA_DIR}"
  [[ -x "${PROM_BIN}" ]] || die "the Prometheus build named no binary: ${PROM_BIN}"
  local s=$(($(stat -c %Y "${WORK}/logs/keda-build.out") - T_BUILD_EPOCH))
  if ((s < 5)); then KEDA_BUILD_NOTE="built 0 s, cached"; else KEDA_BUILD_NOTE="built ${s} s, $((SECONDS - t_wait)) s waited for"; fi
}
trap 'exit 130' INT TERM

free_port() { "${DEV_PY}" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# Start a daemon in our cgroup (its children, such as containerd's shims, stay in it too).
start() {
  local name="$1"; shift
  (echo "${BASHPID}" >"/sys/fs/cgroup/pids/${CG}/daemons/cgroup.procs" && exec "$@") \
    >"${WORK}/logs/${name}.log" 2>&1 &
  PIDS+=("${name}:$!")
}
stop_daemon() {  # NAME: SIGTERM (SIGKILL after 10 s), waited for, and no longer watched by alive
  local entry pid keep=()
  for entry in "${PIDS[@]}"; do
    if [[ "${entry%%:*}" != "$1" ]]; then keep+=("${entry}"); continue; fi
    pid="${entry#*:}"
    kill -TERM "${pid}" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "${pid}" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "${pid}" 2>/dev/null || true  # (set -e: it has exited by now, as a rule)
    wait "${pid}" 2>/dev/null || true
  done
  PIDS=("${keep[@]}")
}
alive() {
  local entry
  for entry in "${PIDS[@]}"; do
    kill -0 "${entry#*:}" 2>/dev/null || { tail -30 "${WORK}/logs/${entry%%:*}.log"; die "${entry%%:*} exited"; }
  done
}
# wait_for SECONDS WHAT CMD...: CMD every 0.5 s until it succeeds
wait_for() {
  local limit="$1" what="$2"; shift 2
  local until=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    alive
    ((SECONDS < until)) || die "no ${what} within ${limit} s"
    sleep 0.5
  done
}
k() { kubectl --kubeconfig "${KC}" "$@"; }
# containerd's config: ROOT STATE SOCKET [fill]. "fill" is the cache's importer: no CRI plugin,
# debug logs (its garbage collection is waited for in them).
containerd_config() {
  local extra=""
  [[ "${4:-}" == fill ]] && extra=', "io.containerd.grpc.v1.cri"'
  cat <<EOF
version = 2
root = "$1"
state = "$2"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp"${extra}]
[grpc]
  address = "$3"
[ttrpc]
  address = "$3.ttrpc"
EOF
  if [[ "${4:-}" == fill ]]; then printf '[debug]\n  level = "debug"\n'; return; fi
  cat <<EOF
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  # this VM's bounding set lacks CAP_SYS_RESOURCE: runc may not lower oom_score_adj
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "${WORK}/cni/net.d"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "${WORK}/containerd/runc"
EOF
}

# --- 1. the cluster -------------------------------------------------------------------
t0=${SECONDS}
for h in /sys/fs/cgroup/*/; do
  case "${h}" in */unified/) continue ;; esac
  mkdir -p "${h}${CG}/daemons" "${h}${CG}/pods"
  if [[ -f "${h}cpuset.cpus" ]]; then  # cgroup v1 cpuset: a child starts with no cpus
    for d in "${h}${CG}" "${h}${CG}/daemons" "${h}${CG}/pods"; do
      cat "${h}cpuset.cpus" >"${d}/cpuset.cpus"; cat "${h}cpuset.mems" >"${d}/cpuset.mems"
    done
  fi
done

# The image, and containerd's copy of it, before any daemon of the cluster starts (the
# cluster does not idle through an image build, and the copy must be there for containerd).
CROOT_ACTIVE="${WORK}/containerd/root"  # without the deploy step, nothing of the cache is used
if want deploy; then
  t1=${SECONDS}
  if ! podman image exists "${IMAGE_LOCAL}"; then
    say "no ${IMAGE_LOCAL}: building it (scripts/image-check.sh, KEEP_IMAGE=1)"
    KEEP_IMAGE=1 scripts/image-check.sh
    IMAGE_BUILT=1
  fi
  IMAGE_S=$((SECONDS - t1))
  IMAGE_ID="$(podman image inspect "${IMAGE_LOCAL}" --format '{{.Id}}')"
  CKEY_TAIL="${IMAGE_LOCAL} ${IMAGE_K8S} containerd $(containerd --version | cut -d' ' -f3) overlayfs"
  CKEY="${IMAGE_ID} ${CKEY_TAIL}"
  mkdir -p "${K8S_CACHE_DIR}"
  exec 9>"${CLOCK}"
  flock -n 9 || die "${CLOCK} is held: another k8s check (or a process left by one) uses ${CCACHE}"
  [[ -z "$(croot_mounts)" ]] || die "mounts of ${CROOT} left by an earlier run: $(croot_mounts)"
  CROOT_USED=1
  t1=${SECONDS}
  CACHE_FIX=""
  if [[ "$(cat "${CCACHE}/key" 2>/dev/null)" == "${CKEY}" ]] \
      && { croot_clean || { croot_reset && CACHE_FIX=" (put back first: an earlier run had not)"; }; }; then
    CACHE_NOTE="containerd's copy kept from a run at $(date -u -r "${CCACHE}/key" +%Y-%m-%dT%H:%MZ), checked against its listing in $((SECONDS - t1)) s${CACHE_FIX}"
  else
    # A rebuilt image (same names, same containerd): the kept root, put back as the last
    # import left it, takes only the layers it lacks (the wheels' layers of a rebuild that
    # reused the deps stage: scripts/k8s/oci_delta.py), and its restart's garbage collection
    # drops what only the old image used. Anything else (no cache, another containerd or
    # names, a root that cannot be put back) starts from an empty root.
    FROM_NOTE="into an empty root"
    if [[ -s "${CCACHE}/key" && "$(cut -d' ' -f2- "${CCACHE}/key")" == "${CKEY_TAIL}" ]] \
        && { croot_clean || croot_reset; }; then
      FROM_NOTE="into the root kept for image $(cut -c1-12 "${CCACHE}/key")"
    elif [[ -e "${CCACHE}" ]]; then
      rm -rf --one-file-system "${CCACHE}"
      FROM_NOTE+=" (the old copy dropped in $((SECONDS - t1)) s)"
    fi
    rm -f "${CCACHE}/key"  # written again last: a fill that does not finish drops the cache
    t1=${SECONDS}
    mkdir -p "${CROOT}" "${GOLDEN}"
    FSOCK="${WORK}/containerd/fill.sock"
    containerd_config "${CROOT}" "${WORK}/containerd/fill-state" "${FSOCK}" fill >"${WORK}/containerd/fill.toml"
    start containerd-fill containerd --config "${WORK}/containerd/fill.toml"
    wait_for 30 "containerd (the image's import)" ctr --address "${FSOCK}" version
    ctr --address "${FSOCK}" --namespace k8s.io content ls -q >"${WORK}/containerd/held.txt"
    podman save --format docker-archive "${IMAGE_LOCAL}" 9>&- \
      | "${DEV_PY}" scripts/k8s/oci_delta.py "${WORK}/containerd/held.txt" "${IMAGE_LOCAL}" "${IMAGE_K8S}" \
        2>"${WORK}/logs/oci_delta.log" \
      | ctr --address "${FSOCK}" --namespace k8s.io images import - >/dev/null \
      || { cat "${WORK}/logs/oci_delta.log"; die "the image's import into containerd failed"; }
    ctr --address "${FSOCK}" --namespace k8s.io images check >"${WORK}/containerd/check.txt"
    for n in "${IMAGE_LOCAL}" "${IMAGE_K8S}"; do
      awk -v n="${n}" '$1 == n && / complete / && $NF == "true" {f = 1} END {exit !f}' \
        "${WORK}/containerd/check.txt" \
        || { cat "${WORK}/containerd/check.txt"; die "containerd's ${n} is not complete and unpacked"; }
    done
    stop_daemon containerd-fill
    # started once more: its start-up garbage collection removes the blobs only the import's
    # lease (or only the image before this one) held, so what is kept is what every later
    # start of containerd finds and keeps
    start containerd-gc containerd --config "${WORK}/containerd/fill.toml"
    wait_for 30 "containerd's garbage collection" grep -q 'msg="garbage collected"' "${WORK}/logs/containerd-gc.log"
    ctr --address "${FSOCK}" --namespace k8s.io images check >"${WORK}/containerd/check.txt"
    [[ "$(grep -c ' complete .* true *$' "${WORK}/containerd/check.txt")" == 2 \
       && "$(wc -l <"${WORK}/containerd/check.txt")" == 3 ]] \
      || { cat "${WORK}/containerd/check.txt"; die "containerd's images after its garbage collection are not the two names, whole"; }
    stop_daemon containerd-gc
    cp -p "${CROOT}/${META_DB}" "${GOLDEN}/meta.db"
    cp -p "${CROOT}/${SNAP_DB}" "${GOLDEN}/metadata.db"
    croot_listing >"${GOLDEN}/listing"
    printf '%s\n' "${CKEY}" >"${CCACHE}/key"
    CACHE_NOTE="imported ${FROM_NOTE} in $((SECONDS - t1)) s: $(sed -n 's/^oci_delta: //p' "${WORK}/logs/oci_delta.log" | cut -d';' -f1) (cached for later runs)"
  fi
  CROOT_ACTIVE="${CROOT}"
  BUILT_NOTE=""
  if ((IMAGE_BUILT)); then BUILT_NOTE="built by scripts/image-check.sh in ${IMAGE_S} s, "; fi
  IMAGE_LINE="image ${IMAGE_LOCAL} ($(podman image inspect "${IMAGE_LOCAL}" --format '{{.Size}}' | numfmt --to=iec)B, ID ${IMAGE_ID:0:12}): ${BUILT_NOTE}${CACHE_NOTE}; as ${IMAGE_K8S}"
fi
T_WAIT=${SECONDS}
wait "${BUILD_PID}" || { tail -30 "${WORK}/logs/k8s-build.log"; BUILD_PID=""; die "the Kubernetes build failed"; }
BUILD_PID=""
BIN="$(tail -1 "${WORK}/logs/k8s-build.out")"
[[ -x "${BIN}/kubelet" ]] || die "the Kubernetes build named no binaries: ${BIN}"
# the build's own time: its output (the binaries' directory) is written as it ends
BUILD_S=$(($(stat -c %Y "${WORK}/logs/k8s-build.out") - T_BUILD_EPOCH)); BUILD_WAIT_S=$((SECONDS - T_WAIT))
export PATH="${BIN}:${PATH}"  # our kubectl, not Debian's
t0=${SECONDS}

PKI="${WORK}/pki"
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=orpheus-k8s-ca \
  -keyout "${PKI}/ca.key" -out "${PKI}/ca.crt" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver -keyout "${PKI}/apiserver.key" \
  -out "${PKI}/apiserver.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes.default.svc\n' >"${PKI}/san.ext"
openssl x509 -req -in "${PKI}/apiserver.csr" -CA "${PKI}/ca.crt" -CAkey "${PKI}/ca.key" \
  -CAcreateserial -days 1 -extfile "${PKI}/san.ext" -out "${PKI}/apiserver.crt" 2>/dev/null
openssl genrsa -out "${PKI}/sa.key" 2048 2>/dev/null
openssl rsa -in "${PKI}/sa.key" -pubout -out "${PKI}/sa.pub" 2>/dev/null
# The aggregation layer (KEDA's metrics server is an aggregated API): a front-proxy CA and
# the client certificate the API server presents to aggregated servers.
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=orpheus-k8s-front-proxy-ca \
  -keyout "${PKI}/front-proxy-ca.key" -out "${PKI}/front-proxy-ca.crt" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj /CN=front-proxy-client -keyout "${PKI}/front-proxy-client.key" \
  -out "${PKI}/front-proxy-client.csr" 2>/dev/null
printf 'extendedKeyUsage=clientAuth\n' >"${PKI}/client.ext"
openssl x509 -req -in "${PKI}/front-proxy-client.csr" -CA "${PKI}/front-proxy-ca.crt" \
  -CAkey "${PKI}/front-proxy-ca.key" -CAcreateserial -days 1 -extfile "${PKI}/client.ext" \
  -out "${PKI}/front-proxy-client.crt" 2>/dev/null
TOKEN="$(openssl rand -hex 24)"
echo "${TOKEN},orpheus-k8s-admin,orpheus-k8s-admin,system:masters" >"${PKI}/tokens.csv"

ETCD_PORT="$(free_port)"; ETCD_PEER="$(free_port)"; API_PORT="$(free_port)"
KCM_PORT="$(free_port)"; SCHED_PORT="$(free_port)"; KUBELET_PORT="$(free_port)"
API="https://127.0.0.1:${API_PORT}"
cat >"${KC}" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: "${API}", certificate-authority: "${PKI}/ca.crt"}}]
users: [{name: admin, user: {token: "${TOKEN}"}}]
contexts: [{name: local, context: {cluster: local, user: admin, namespace: default}}]
current-context: local
EOF

start etcd etcd --name orpheus-k8s --data-dir "${WORK}/etcd" \
  --listen-client-urls "http://127.0.0.1:${ETCD_PORT}" --advertise-client-urls "http://127.0.0.1:${ETCD_PORT}" \
  --listen-peer-urls "http://127.0.0.1:${ETCD_PEER}" --initial-advertise-peer-urls "http://127.0.0.1:${ETCD_PEER}" \
  --initial-cluster "orpheus-k8s=http://127.0.0.1:${ETCD_PEER}"

containerd_config "${CROOT_ACTIVE}" "${WORK}/containerd/state" "${SOCK}" >"${WORK}/containerd/config.toml"
# Pods on a bridge of their own: no default route and no masquerade, so a pod reaches
# nothing but this machine (the kubelet's probes and the check's clients reach it). The
# bridge is made here, with the gateway address, because that address is also the node's:
# the kubelet refuses a loopback --node-ip ("nodeIP can't be loopback address") and then
# publishes no address at all, so the API server cannot reach it for logs and exec.
ip link add "${BRIDGE}" type bridge
ip addr add "${NODE_IP}/24" dev "${BRIDGE}"
ip link set "${BRIDGE}" up
cat >"${WORK}/cni/net.d/10-orpheus-k8s.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "orpheus-k8s", "plugins": [
  {"type": "bridge", "bridge": "${BRIDGE}", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "dataDir": "${WORK}/cni/ipam",
            "ranges": [[{"subnet": "${POD_SUBNET}"}]]}},
  {"type": "loopback"}]}
EOF
start containerd containerd --config "${WORK}/containerd/config.toml"

start kube-apiserver kube-apiserver --etcd-servers "http://127.0.0.1:${ETCD_PORT}" \
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "${API_PORT}" \
  --tls-cert-file "${PKI}/apiserver.crt" --tls-private-key-file "${PKI}/apiserver.key" \
  --client-ca-file "${PKI}/ca.crt" --token-auth-file "${PKI}/tokens.csv" \
  --authorization-mode RBAC --service-cluster-ip-range 10.96.0.0/24 \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "${PKI}/sa.pub" --service-account-signing-key-file "${PKI}/sa.key" \
  --endpoint-reconciler-type none --kubelet-preferred-address-types InternalIP \
  --allow-privileged=false --profiling=false \
  --requestheader-client-ca-file "${PKI}/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
  --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
  --requestheader-extra-headers-prefix X-Remote-Extra- \
  --proxy-client-cert-file "${PKI}/front-proxy-client.crt" --proxy-client-key-file "${PKI}/front-proxy-client.key" \
  --enable-aggregator-routing=true
wait_for 60 "API server" k get --raw /readyz
wait_for 30 "containerd" "${CTR[@]}" version
CLUSTER_API_S=$((SECONDS - t0))

start kube-controller-manager kube-controller-manager --kubeconfig "${KC}" \
  --authentication-kubeconfig "${KC}" --authorization-kubeconfig "${KC}" \
  --leader-elect=false --bind-address 127.0.0.1 --secure-port "${KCM_PORT}" \
  --service-account-private-key-file "${PKI}/sa.key" --root-ca-file "${PKI}/ca.crt" \
  --use-service-account-credentials=false --profiling=false
start kube-scheduler kube-scheduler --kubeconfig "${KC}" \
  --authentication-kubeconfig "${KC}" --authorization-kubeconfig "${KC}" \
  --leader-elect=false --bind-address 127.0.0.1 --secure-port "${SCHED_PORT}" --profiling=false

# The pause image (the sandbox container): built from our own pause binary, as registry.k8s.io
# cannot be reached. Kept as a small archive next to the binaries.
PAUSE_TAR="${BIN}/../pause-3.10.tar"
if [[ ! -s "${PAUSE_TAR}" ]]; then
  pc="$(buildah from scratch)"
  buildah copy "${pc}" "${BIN}/pause" /pause >/dev/null
  buildah config --entrypoint '["/pause"]' --user 65535:65535 "${pc}"
  buildah commit -q "${pc}" registry.k8s.io/pause:3.10 >/dev/null
  buildah rm "${pc}" >/dev/null
  buildah push -q registry.k8s.io/pause:3.10 "docker-archive:${PAUSE_TAR}.tmp:registry.k8s.io/pause:3.10"
  buildah rmi registry.k8s.io/pause:3.10 >/dev/null
  mv "${PAUSE_TAR}.tmp" "${PAUSE_TAR}"
fi
"${CTR[@]}" images import "${PAUSE_TAR}" >/dev/null

cat >"${WORK}/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: ${NODE_IP}
port: ${KUBELET_PORT}
healthzPort: 0
readOnlyPort: 0
# Only this machine reaches the kubelet (the bridge's address): anonymous, allow all.
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://${SOCK}
# This VM: cgroup v1, no systemd, swap state unknown, a small shared disk.
cgroupDriver: cgroupfs
cgroupRoot: /${CG}/pods
failCgroupV1: false
failSwapOn: false
podLogsDir: ${WORK}/pod-logs
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
EOF
start kubelet kubelet --config "${WORK}/kubelet/config.yaml" --kubeconfig "${KC}" \
  --root-dir "${WORK}/kubelet" --cert-dir "${WORK}/kubelet/pki" \
  --hostname-override "${NODE}" --node-ip "${NODE_IP}"
wait_for 120 "node Ready" bash -c "kubectl --kubeconfig '${KC}' get node '${NODE}' -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
wait_for 60 "default ServiceAccount" k get serviceaccount default
CLUSTER_S=$((SECONDS - t0))
record "Kubernetes $(kubectl version --client -o json | "${DEV_PY}" -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])') (built ${BUILD_S} s$( ((BUILD_S < 5)) && echo ', cached'; ((BUILD_S >= 5)) && echo " beside the image; ${BUILD_WAIT_S} s waited for after it")), containerd $(containerd --version | cut -d' ' -f3), etcd $(etcd --version | sed -n 's/etcd Version: //p'), $(runc --version | sed -n 1p)"
record "cluster: API server ready ${CLUSTER_API_S} s, node Ready ${CLUSTER_S} s after the first daemon started"

# --- 2. server-side dry run of every overlay --------------------------------------------
if want dryrun; then
  # KEDA's CRDs first: the KEDA overlays' ScaledObject is checked against their schema
  keda_built
  kustomize build "${KEDA_DIR}/config/crd" >"${WORK}/keda-crds.yaml"
  k apply --server-side -f "${WORK}/keda-crds.yaml" >/dev/null
  # (kubectl wait fails at once on a CRD whose status has no conditions yet)
  crd_established() {
    [[ "$(k get crd scaledobjects.keda.sh -o jsonpath='{.status.conditions[?(@.type=="Established")].status}')" == True ]]
  }
  wait_for 60 "KEDA's ScaledObject CRD Established" crd_established
  for overlay in deploy/k8s/overlays/*/; do
    name="$(basename "${overlay}")"
    kustomize build "${overlay}" >"${WORK}/${name}.yaml"
    out="$(k apply --dry-run=server -f "${WORK}/${name}.yaml" 2>&1)" \
      || { echo "${out}"; die "the API server refused overlay ${name}"; }
    record "dry run (server) ${name}: $(grep -c 'created (server dry run)' <<<"${out}") objects accepted: $(awk '{print $1}' <<<"${out}" | sed 's#/.*##' | sort | uniq -c | awk '{printf "%s%s x%s", sep, $2, $1; sep=", "}')"
  done
  # The dry run is the server's: a quantity the server cannot parse is refused by it.
  sed 's/memory: 2Gi/memory: 2Gigabytes/' "${WORK}/cpu-demo.yaml" >"${WORK}/broken.yaml"
  if out="$(k apply --dry-run=server -f "${WORK}/broken.yaml" 2>&1)"; then
    die "the API server accepted a broken quantity"
  fi
  record "dry run (server) of cpu-demo with 'memory: 2Gigabytes': refused ($(grep -o 'quantities must match[^"]*' <<<"${out}" | sed -n 1p | cut -c1-60)...)"
fi

if ! want deploy; then exit 0; fi

# --- 3. the cpu-demo overlay, for real --------------------------------------------------
"${CTR[@]}" images ls -q >"${WORK}/images.txt"
grep -qx "${IMAGE_K8S}" "${WORK}/images.txt" || die "containerd has no ${IMAGE_K8S}"
record "${IMAGE_LINE}"

kustomize build scripts/k8s/overlay >"${WORK}/deploy.yaml"
t0=${SECONDS}
k apply -f "${WORK}/deploy.yaml" >/dev/null
if want wedge; then  # the slow-step pod starts now, beside the Deployment's (step 4 uses it)
  "${DEV_PY}" scripts/k8s/slow_step.py pod "${WORK}/deploy.yaml" 4242 25 >"${WORK}/slow-pod.json"
  k apply -f "${WORK}/slow-pod.json" >/dev/null
fi
SEL=app.kubernetes.io/name=orpheus-svc
ready_pods() {  # names of the pods that are Ready and not terminating
  k get pods -l "${SEL}" -o json | "${DEV_PY}" -c '
import json, sys
for p in json.load(sys.stdin)["items"]:
    if p["metadata"].get("deletionTimestamp"): continue
    c = {x["type"]: x["status"] for x in p["status"].get("conditions", [])}
    if c.get("Ready") == "True": print(p["metadata"]["name"])'
}
n_ready() { [[ "$(ready_pods | wc -l)" -ge "$1" ]]; }
wait_for 300 "first pod Ready" n_ready 1
FIRST_READY_S=$((SECONDS - t0))
# The Deployment has no replicas (the HPA owns the count): the HPA raises it to its
# minReplicas (2) even without a metrics adapter.
wait_for 300 "two pods Ready (the HPA's minReplicas)" n_ready 2
TWO_READY_S=$((SECONDS - t0))
POD="$(ready_pods | sed -n 1p)"
pod_json() { k get pod "$1" -o json; }
POD_IP="$(k get pod "${POD}" -o jsonpath='{.status.podIP}')"
record "cpu-demo applied: first pod Ready ${FIRST_READY_S} s, two Ready ${TWO_READY_S} s (HPA minReplicas; no metrics adapter)"
pod_json "${POD}" >"${WORK}/pod.json"
"${DEV_PY}" - "${WORK}/pod.json" >>"${WORK}/results.txt" <<'PY' || die "pod spec/status check failed"
import json, sys
from datetime import datetime
p = json.load(open(sys.argv[1]))
c = p["spec"]["containers"][0]
assert c["readinessProbe"]["grpc"]["port"] == 50051, c["readinessProbe"]
assert c["livenessProbe"]["grpc"]["port"] == 50051
assert c["securityContext"]["readOnlyRootFilesystem"] is True
st = p["status"]["containerStatuses"][0]
started = datetime.fromisoformat(st["state"]["running"]["startedAt"].replace("Z", "+00:00"))
ready = [x for x in p["status"]["conditions"] if x["type"] == "Ready"][0]
ready_at = datetime.fromisoformat(ready["lastTransitionTime"].replace("Z", "+00:00"))
print(f"pod {p['metadata']['name']} ({p['status']['podIP']}, QoS {p['status']['qosClass']}): "
      f"container started -> Ready (gRPC readiness probe, service "
      f"{c['readinessProbe']['grpc'].get('service')}) {(ready_at - started).total_seconds():.0f} s; "
      f"requests {c['resources']['requests']}, limits {c['resources']['limits']}")
PY
tail -1 "${WORK}/results.txt"
k logs "${POD}" >"${WORK}/logs/pod.log"
"${DEV_PY}" - "${WORK}/logs/pod.log" >>"${WORK}/results.txt" <<'PY' || die "kubectl logs is not JSON"
import json, sys
lines = [l for l in open(sys.argv[1]).read().splitlines() if l.strip()]
recs = [json.loads(l) for l in lines]  # every line one JSON object
assert lines and all(isinstance(r, dict) for r in recs)
keys = sorted(set().union(*recs))[:8]
print(f"kubectl logs: {len(lines)} lines, every one a JSON object (keys include {', '.join(keys)})")
PY
tail -1 "${WORK}/results.txt"
USER_ID="$(k exec "${POD}" -- id -u)"
[[ "${USER_ID}" != 0 ]] || die "the container runs as root"
if k exec "${POD}" -- touch /opt/venv/written 2>"${WORK}/touch.err"; then
  die "the root filesystem accepted a write"
fi
grep -qi 'read-only' "${WORK}/touch.err" || { cat "${WORK}/touch.err"; die "write refused for another reason"; }
k exec "${POD}" -- touch /tmp/written || die "/tmp (emptyDir) is not writable"
record "kubectl exec: uid ${USER_ID} (not root); writing /opt/venv: '$(sed -n 1p "${WORK}/touch.err" | sed 's/.*: //')'; /tmp writable"
"${DEV_PY}" scripts/release/image_client.py "${POD_IP}:50051" "${VERSION}" >"${WORK}/logs/synth.log" 2>&1 \
  || { cat "${WORK}/logs/synth.log"; die "Synthesize to ${POD_IP} failed"; }
record "from the host to the pod (${POD_IP}:50051): health SERVING, GetStatus ${VERSION}, one Synthesize with whole frames"
EP="$(k get endpointslices -l kubernetes.io/service-name=orpheus-svc-headless -o jsonpath='{.items[*].endpoints[*].addresses[*]}')"
record "headless Service endpoints: ${EP}"

# --- 4. a paused server (slow) and a wedged one (dead) ----------------------------------
container_pid() {  # host pid of the pod's server process
  local id
  id="$(k get pod "$1" -o jsonpath='{.status.containerStatuses[0].containerID}')"
  id="${id#containerd://}"
  "${CTR[@]}" tasks ls | awk -v id="${id}" '$1 == id {print $2}'
}
restarts() { k get pod "$1" -o jsonpath='{.status.containerStatuses[0].restartCount}'; }
# The slow engine step (run in the background while the wedged pod waits for its liveness probe:
# another pod, and the wait is the kubelet's, so the two overlap without touching each other).
slow_step_check() {
  # A slow engine step: the same pod spec with the sim backend and the fault slow_step
  # (every step holding seed 4242 takes 25 s longer): health NOT_SERVING 2 s into the stall,
  # the call ends UNAVAILABLE at engine_stall_timeout_seconds (10 s), the step ends at 25 s,
  # under engine_stall_exit_seconds (30 s): the server lives on and liveness (60 s) holds.
  wait_for 120 "the slow-step pod Ready" bash -c "kubectl --kubeconfig '${KC}' get pod orpheus-slow-step -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
  SLOW_IP="$(k get pod orpheus-slow-step -o jsonpath='{.status.podIP}')"
  t_slow=${SECONDS}
  CALL="$("${DEV_PY}" scripts/k8s/slow_step.py call "${SLOW_IP}:50051" 4242)"
  sleep 40  # the step's 25 s, and liveness periods beyond it
  wait_for 60 "the slow-step pod Ready again" bash -c "kubectl --kubeconfig '${KC}' get pod orpheus-slow-step -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
  SLOW_RESTARTS="$(restarts orpheus-slow-step)"
  [[ "${SLOW_RESTARTS}" == 0 ]] || die "a 25 s engine step restarted the container"
  NOT_READY="$(k get events --field-selector involvedObject.name=orpheus-slow-step,reason=Unhealthy -o jsonpath='{range .items[*]}{.message} x{.count}{"\n"}{end}' | grep -c -i readiness || true)"
  LIVE_FAILS="$(k get events --field-selector involvedObject.name=orpheus-slow-step,reason=Unhealthy -o jsonpath='{range .items[*]}{.message} x{.count}{"\n"}{end}' | grep -i liveness | sed -n 's/.* x\([0-9]*\)$/\1/p' | paste -sd+ | bc 2>/dev/null || echo 0)"
  echo "slow engine step (sim backend, slow_step 25 s): the call ended '${CALL}'; restartCount 0 and Ready again $((SECONDS - t_slow)) s after the call began; liveness failures seen: ${LIVE_FAILS:-0} (of 6), readiness failure events: ${NOT_READY}" >"${WORK}/slow-step.line"
  k delete pod orpheus-slow-step --grace-period=1 --wait=false >/dev/null
}
if want wedge; then
  # SIGSTOP from inside the pod cannot stop the server: it is the pid namespace's init, which
  # never receives SIGSTOP from its own namespace. Sent from the host it stops it.
  SPID="$(container_pid "${POD}")"
  [[ -n "${SPID}" ]] || die "no host pid for ${POD}"
  "${DEV_PY}" scripts/k8s/session_probe.py "${POD_IP}:50051" >"${WORK}/logs/paused-session.log" 2>&1 &
  SESSION_PID=$!
  sleep 1  # the session is under way (its first audio comes within a second or two)
  kill -STOP "${SPID}"; STOPPED_PID="${SPID}"
  say "server of ${POD} (host pid ${SPID}) stopped for 30 s"
  sleep 30
  kill -CONT "${SPID}"; STOPPED_PID=""
  wait "${SESSION_PID}" || { cat "${WORK}/logs/paused-session.log"; die "the session across the pause failed"; }
  SESSION_PID=""
  wait_for 60 "${POD} Ready again after the pause" bash -c "kubectl --kubeconfig '${KC}' get pod '${POD}' -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
  [[ "$(restarts "${POD}")" == 0 ]] || die "a 30 s pause restarted the container"
  record "paused 30 s (SIGSTOP, SIGCONT): not restarted (restartCount 0), Ready again; a session open across the pause: $(tail -1 "${WORK}/logs/paused-session.log")"

  # The kubelet counts liveness failures until a probe succeeds: the pause's failures (about
  # 3) stand until a liveness probe reaches the running server, which readiness turning True
  # does not show. One liveness period and timeout (10 + 5 s) of running first, or the wedge
  # below is restarted after the rest of the count (37 s once) and its time means nothing.
  sleep 15
  kill -STOP "${SPID}"; STOPPED_PID="${SPID}"
  t_stop=${SECONDS}
  say "server of ${POD} stopped for good: waiting for the liveness probe (the slow step meanwhile)"
  slow_step_check >"${WORK}/logs/slow-step.log" 2>&1 &
  SLOW_PID=$!
  wait_for 300 "restart by the liveness probe" bash -c "[[ \"\$(kubectl --kubeconfig '${KC}' get pod '${POD}' -o jsonpath='{.status.containerStatuses[0].restartCount}')\" -ge 1 ]]"
  RESTART_S=$((SECONDS - t_stop))
  STOPPED_PID=""
  kill -0 "${SPID}" 2>/dev/null && die "the stopped process (host pid ${SPID}) is still there"
  wait_for 300 "${POD} Ready after the restart" bash -c "kubectl --kubeconfig '${KC}' get pod '${POD}' -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
  READY_AGAIN_S=$((SECONDS - t_stop))
  LAST="$(k get pod "${POD}" -o jsonpath='{.status.containerStatuses[0].lastState.terminated.reason} (exit {.status.containerStatuses[0].lastState.terminated.exitCode})')"
  UNHEALTHY="$(k get events --field-selector "involvedObject.name=${POD},reason=Unhealthy" -o jsonpath='{range .items[*]}{.message}{"\n"}{end}' | grep -i liveness | sed -n 1p | cut -c1-90)"
  record "wedged for good (SIGSTOP): restarted by the liveness probe ${RESTART_S} s after the stop (last state ${LAST}), Ready again at ${READY_AGAIN_S} s; event: ${UNHEALTHY}"

  wait "${SLOW_PID}" || { cat "${WORK}/logs/slow-step.log"; die "the slow engine step check failed"; }
  SLOW_PID=""
  record "$(cat "${WORK}/slow-step.line")"
fi

# The DNS stand-in for the headless Service (scripts/k8s/headless_dns.py), started once for
# the steps whose clients use it (rollout, scale); sets TARGET, the clients' dns:/// target.
dns_stand_in() {
  [[ -n "${DNS_PID:-}" ]] && return 0
  local name=orpheus-svc-headless.default.svc.cluster.local
  "${DEV_PY}" scripts/k8s/headless_dns.py --port-file "${WORK}/dns.port" --name "${name}" \
    --service orpheus-svc-headless --server "${API}" --token "${TOKEN}" --ca "${PKI}/ca.crt" \
    --log "${WORK}/logs/dns.log" 2>"${WORK}/logs/dns.err" &
  DNS_PID=$!
  wait_for 10 "the DNS stand-in" test -s "${WORK}/dns.port"
  TARGET="dns://127.0.0.1:$(cat "${WORK}/dns.port")/${name}:50051"
}

# --- 5. a rolling update under streaming clients ----------------------------------------
if want rollout; then
  dns_stand_in
  "${DEV_PY}" scripts/k8s/rollout_clients.py --target "${TARGET}" --clients "${ROLLOUT_CLIENTS:-4}" \
    --stop-file "${WORK}/clients.stop" --out "${WORK}/logs/clients.json" >"${WORK}/logs/clients.log" 2>&1 &
  CLIENTS_PID=$!
  wait_for 120 "sessions streaming before the rollout" bash -c "grep -q 'finished' '${WORK}/logs/clients.log'"
  OLD_PODS="$(ready_pods | tr '\n' ' ')"
  for p in ${OLD_PODS}; do  # their logs to the end (SIGTERM, drain, exit)
    k logs -f "${p}" >"${WORK}/logs/old-${p}.log" 2>&1 &
    LOGF_PIDS+=($!)
  done
  "${DEV_PY}" scripts/k8s/watch_rollout.py --kubeconfig "${KC}" --out "${WORK}/logs/watch.json" \
    >"${WORK}/logs/watch.log" 2>&1 &
  WATCH_PID=$!
  t0=${SECONDS}
  k rollout restart deployment/orpheus-svc >/dev/null
  k rollout status deployment/orpheus-svc --timeout 600s >"${WORK}/logs/rollout.log" 2>&1 \
    || { cat "${WORK}/logs/rollout.log"; die "the rollout did not finish"; }
  ROLLOUT_S=$((SECONDS - t0))
  # until the old pods are gone (their drain ends with the process)
  wait_for 120 "old pods gone" bash -c "! kubectl --kubeconfig '${KC}' get pods -o name | grep -qE '$(sed 's/ *$//; s/ /|/g' <<<"${OLD_PODS}")'"
  GONE_S=$((SECONDS - t0))
  sleep 5
  touch "${WORK}/clients.stop"
  wait "${CLIENTS_PID}" || true
  CLIENTS_PID=""
  kill "${WATCH_PID}" 2>/dev/null; wait "${WATCH_PID}" 2>/dev/null || true
  WATCH_PID=""
  NEW_PODS="$(ready_pods | tr '\n' ' ')"
  record "rollout restart (2 replicas, maxSurge 1, maxUnavailable 0): complete in ${ROLLOUT_S} s, old pods (${OLD_PODS% }) gone at ${GONE_S} s; new: ${NEW_PODS% }"
  "${DEV_PY}" scripts/k8s/rollout_report.py "${WORK}/logs/clients.json" "${WORK}/logs/watch.json" "${WORK}/logs/dns.log" \
    "${WORK}"/logs/old-*.log >>"${WORK}/results.txt" || { tail -40 "${WORK}/logs/clients.log"; die "sessions were lost in the rollout"; }
  sed -n '/^rollout sessions/,$p' "${WORK}/results.txt"
  # The PDB (maxUnavailable 1): a first eviction is allowed, a second one refused while the
  # first pod's replacement is not Ready.
  read -r P1 P2 _ <<<"${NEW_PODS}"
  evict() {
    printf '{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"%s","namespace":"default"}}' "$1" \
      | k create --raw "/api/v1/namespaces/default/pods/$1/eviction" -f - 2>&1
  }
  evict "${P1}" >"${WORK}/logs/evict1.log" || { cat "${WORK}/logs/evict1.log"; die "the first eviction was refused"; }
  if evict "${P2}" >"${WORK}/logs/evict2.log"; then die "the PDB let a second pod be evicted"; fi
  record "PodDisruptionBudget: eviction of ${P1} allowed, of ${P2} refused: $(grep -o 'Cannot evict pod[^"]*' "${WORK}/logs/evict2.log" | sed -n 1p | cut -c1-80)"
fi

# --- 6. autoscaling on the sessions metric through KEDA ---------------------------------
if want scale; then
  keda_built
  source scripts/k8s/scale-step.sh
fi
record "total $((SECONDS - T_START)) s (on this 2-core CPU VM, shared with other work)"
