#!/usr/bin/env bash
# Proves that the Python client installs and works beside the voice-agent frameworks and across
# the protobuf/grpcio range that clients/python/pyproject.toml declares. Each case gets a FRESH
# virtual environment (under a temp dir, removed afterwards), installs the wheel of
# ./clients/python (built once: what a user gets) with the named packages, prints the
# protobuf/grpcio it resolved,
# and runs the client tests (tests/clients, against the in-process fake server) there:
#
#   low      protobuf==5.26.1, grpcio==1.63.2   the declared lower bounds (gencode versions)
#   pipecat  the wheel[pipecat] + current pipecat-ai[tracing]   (pipecat needs protobuf<7;
#            its tracing extra: the turn's trace continues into the call, tests/plugins)
#   livekit  the wheel[livekit] + current livekit-agents
#
# With ORPHEUS_SERVER_ADDR set (scripts/test.sh sets it to its live demo server), the pipecat
# and livekit cases also run their plugin tests (tests/plugins) against that server, with
# ORPHEUS_REQUIRE_PLUGIN_TESTS=1 so that a missing framework fails instead of skipping. With
# ORPHEUS_OTLP_ENDPOINT and ORPHEUS_SPANS_FILE too (scripts/test.sh: that server traces to a
# receiver writing SPANS_FILE), the Pipecat example's trace is checked to continue into it.
#
# Usage: scripts/test-client-compat.sh [low|pipecat|livekit ...]   (default: all three)
# Env:   PYTHON (default python3) makes the venvs. Needs the package index (pip).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
PYTHON="${PYTHON:-python3}"
CASES=("$@")
[[ ${#CASES[@]} -gt 0 ]] || CASES=(low pipecat livekit)

WORK="$(mktemp -d -t orpheus-compat-XXXX)"
declare -A PIDS
# installs still running (an early exit, Ctrl-C) are stopped before their directory goes
stop_all() {
  set +e  # (pkill finding nothing must not end the trap under set -e)
  local pid
  for pid in "${PIDS[@]}"; do pkill -TERM -P "${pid}" 2>/dev/null; kill "${pid}" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "${WORK}"
}
trap stop_all EXIT
trap 'exit 130' INT TERM

# The client's wheel, built once: the cases install that file (a user installs a wheel), and
# three pip processes building ./clients/python at once would share its build/ and
# egg-info directories in the checkout.
echo "== client compat: the wheel of ./clients/python"
"${PYTHON}" -m pip wheel --quiet --disable-pip-version-check --no-deps ./clients/python -w "${WORK}/wheel"
WHEEL="$(ls "${WORK}"/wheel/orpheus_tts_client-*.whl)"

# A case in two parts: its venv (made and installed into: network and disk, little CPU), then
# its tests. The venvs of all cases are made at once; the tests run one case after another,
# as before (run at once, grpc.aio's timing-sensitive resume tests failed twice in four
# clean-clone runs: a lost status, lost last messages).
install_case() {
  local name="$1"; shift
  local venv="${WORK}/${name}"
  echo "== client compat: ${name}: pip install $*"
  "${PYTHON}" -m venv "${venv}"
  "${venv}/bin/python" -m pip install --quiet --disable-pip-version-check "$@" \
    pytest grpcio-health-checking
}

test_case() {
  local name="$1"
  local venv="${WORK}/${name}"
  "${venv}/bin/python" -c '
import importlib.metadata as md
found = []
for n in ("orpheus-tts-client", "protobuf", "grpcio", "pipecat-ai", "livekit-agents"):
    try:
        found.append(f"{n} {md.version(n)}")
    except md.PackageNotFoundError:
        pass
print("   resolved:", ", ".join(found))'
  # Run from a copy of tests/ so the checkout's clients/python/src is never on sys.path:
  # the installed distribution is what is tested.
  mkdir -p "${WORK}/${name}-tests/tests"
  cp tests/__init__.py "${WORK}/${name}-tests/tests/"
  cp -r tests/clients "${WORK}/${name}-tests/tests/"
  local targets=("tests/clients")
  if [[ -n "${ORPHEUS_SERVER_ADDR:-}" && -d "tests/plugins" && "${name}" != low ]]; then
    cp -r tests/plugins "${WORK}/${name}-tests/tests/"
    # this framework's plugin tests and its example (the other framework is not installed)
    targets+=("tests/plugins/test_${name}_plugin.py" "tests/plugins/test_examples.py")
    [[ -d examples ]] && cp -r examples "${WORK}/${name}-tests/"
  fi
  (cd "${WORK}/${name}-tests" && ORPHEUS_REQUIRE_PLUGIN_TESTS=1 PYTHONWARNINGS="error::UserWarning:google.protobuf" \
    "${venv}/bin/python" -m pytest -q -p no:cacheprovider -o addopts=-ra --durations=3 "${targets[@]}")
}

one_install() {
  case "$1" in
    low)     install_case low "${WHEEL}" "protobuf==5.26.1" "grpcio==1.63.2" "grpcio-health-checking==1.63.2" ;;
    pipecat) install_case pipecat "${WHEEL}[pipecat]" "pipecat-ai[tracing]" \
               opentelemetry-exporter-otlp-proto-grpc ;;
    livekit) install_case livekit "${WHEEL}[livekit]" ;;
  esac
}
for c in "${CASES[@]}"; do
  case "${c}" in
    low|pipecat|livekit) ;;
    *) echo "test-client-compat: unknown case ${c} (low|pipecat|livekit)" >&2; exit 2 ;;
  esac
done

# The installs at once, each into its own log (printed in case order); COMPAT_SERIAL=1 makes
# them one after another. COMPAT_PARALLEL=1 also runs the tests at once (about 20 s less
# again, with the flakes above).
# at_once FUNCTION WHAT: FUNCTION for every case at once, each into its own log (printed in
# case order); exits naming the cases that failed
at_once() {
  local fn="$1" what="$2" c failed=()
  for c in "${CASES[@]}"; do
    ( "${fn}" "${c}" ) >"${WORK}/${c}-${fn}.log" 2>&1 &
    PIDS[${c}]=$!
  done
  for c in "${CASES[@]}"; do
    if ! wait "${PIDS[${c}]}"; then failed+=("${c}"); fi
  done
  PIDS=()  # all reaped: nothing for stop_all to signal
  for c in "${CASES[@]}"; do cat "${WORK}/${c}-${fn}.log"; done
  if [[ ${#failed[@]} -gt 0 ]]; then
    echo "client compat: ${what} FAILED (${failed[*]})" >&2
    exit 1
  fi
}
if [[ "${COMPAT_SERIAL:-}" == 1 || ${#CASES[@]} -eq 1 ]]; then
  for c in "${CASES[@]}"; do one_install "${c}"; done
else
  at_once one_install install
fi
if [[ "${COMPAT_PARALLEL:-}" != 1 || ${#CASES[@]} -eq 1 ]]; then
  for c in "${CASES[@]}"; do echo "== client compat: ${c}: tests"; test_case "${c}"; done
else
  at_once test_case tests
fi
echo "client compat: OK (${CASES[*]})"
