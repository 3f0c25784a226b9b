#!/usr/bin/env bash
# The wheels as users get them (issue 26): `python -m build` both distributions (sdist, then
# the wheel from the sdist), `twine check`, the content test (tests/release/test_wheels.py)
# on those very files; then a fresh virtual environment with only the two wheels and their
# declared dependencies serves the demo from its own `orpheus-svc`, answers its own
# `orpheus-say`, GetStatus and one HTTP speech request (the server extra installs the HTTP
# edge), with the checkout nowhere on its path.
#
# The dependencies are not downloaded again (torch alone is about 3 GB): scripts/release/
# wheel_deps.py links, from the dev environment, exactly the closure of the wheels' own
# Requires-Dist (server extra included) into a directory the fresh venv adds to its path, and
# fails if one is missing or outside its range; `pip check` runs in the fresh venv too. Our
# two packages are installed from the wheels with --no-deps, and smoke_client.py asserts
# they import from the fresh venv (module.__file__).
#
# Usage: scripts/wheel-smoke.sh        Env: DEV_PYTHON (default .venv/bin/python; needs
#        build, twine, packaging: the dev extra), KEEP=1 keeps the scratch directory.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
DEV_PY="${DEV_PYTHON:-${ROOT}/.venv/bin/python}"
WORK="$(mktemp -d -t orpheus-wheels-XXXX)"
DIST="${WORK}/dist"
V="${WORK}/venv"
SERVER=""
cleanup() {
  [[ -n "${SERVER}" ]] && kill "${SERVER}" 2>/dev/null && wait "${SERVER}" 2>/dev/null
  [[ "${KEEP:-}" == 1 ]] && echo "wheel-smoke: kept ${WORK}" || rm -rf "${WORK}"
}
trap cleanup EXIT
t0=${SECONDS}
# Whatever touches the fresh venv runs without PYTHONPATH (a checkout on it would hide the wheels).
clean() { env -u PYTHONPATH "$@"; }

# Built from a copy of what a clean clone holds (scripts/release/source_tree.py): an earlier
# build's *.egg-info in the checkout could slip files into the sdist that we no longer ship.
"${DEV_PY}" scripts/release/source_tree.py "${WORK}/src"
"${DEV_PY}" -m build --outdir "${DIST}" "${WORK}/src" >"${WORK}/build-server.log" 2>&1 \
  || { tail -30 "${WORK}/build-server.log"; exit 1; }
"${DEV_PY}" -m build --outdir "${DIST}" "${WORK}/src/clients/python" >"${WORK}/build-client.log" 2>&1 \
  || { tail -30 "${WORK}/build-client.log"; exit 1; }
"${DEV_PY}" -m twine check --strict "${DIST}"/*
ORPHEUS_DIST_DIR="${DIST}" "${DEV_PY}" -m pytest -q -p no:cacheprovider tests/release/test_wheels.py
SERVER_WHL="$(ls "${DIST}"/orpheus_svc-*.whl)"
CLIENT_WHL="$(ls "${DIST}"/orpheus_tts_client-*.whl)"

# The fresh venv: the dev environment's base interpreter (the linked dependencies were built
# for it), no pip of its own (the dev pip installs into it with --python).
BASE_PY="$("${DEV_PY}" -c 'import sys; print(sys._base_executable)')"
"${BASE_PY}" -m venv --without-pip "${V}"
clean "${DEV_PY}" -m pip --python "${V}/bin/python" install --quiet --no-deps --no-index \
  "${SERVER_WHL}" "${CLIENT_WHL}"
SITE="$(clean "${V}/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
clean "${DEV_PY}" scripts/release/wheel_deps.py "${WORK}/deps" "${SERVER_WHL}[server]" "${CLIENT_WHL}"
echo "${WORK}/deps" >"${SITE}/orpheus-wheel-deps.pth"
clean "${DEV_PY}" -m pip --python "${V}/bin/python" check

VERSION="$(clean "${V}/bin/orpheus-svc" --version | awk '{print $2}')"
CLIENT_VERSION="$(clean "${V}/bin/orpheus-say" --version | awk '{print $2}')"
[[ "${SERVER_WHL}" == *"orpheus_svc-${VERSION}-"* && "${CLIENT_WHL}" == *"-${CLIENT_VERSION}-"* ]] \
  || { echo "wheel-smoke: --version says ${VERSION} / ${CLIENT_VERSION}; wheels: ${SERVER_WHL} ${CLIENT_WHL}"; exit 1; }
echo "wheel-smoke: orpheus-svc ${VERSION}, orpheus-say ${CLIENT_VERSION} from ${V}/bin"

# Serve from the fresh venv, outside the checkout, with no PYTHONPATH.
free_port() { "${V}/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PORT="$(free_port)"; HTTP_PORT="$(free_port)"
(cd "${WORK}" && exec env -u PYTHONPATH "${V}/bin/orpheus-svc" serve --host 127.0.0.1 \
  --port "${PORT}" --set "server.http_port=${HTTP_PORT}" >"${WORK}/server.log" 2>&1) &
SERVER=$!
(cd "${WORK}" && env -u PYTHONPATH "${V}/bin/python" "${ROOT}/scripts/release/smoke_client.py" \
  "${V}" "127.0.0.1:${PORT}" "${HTTP_PORT}" "${VERSION}") \
  || { echo "wheel-smoke: server log:"; tail -40 "${WORK}/server.log"; exit 1; }
(cd "${WORK}" && env -u PYTHONPATH "${V}/bin/orpheus-say" "Hello there." -o hello.wav \
  --server "127.0.0.1:${PORT}")
"${V}/bin/python" -c "import wave,sys; w=wave.open(sys.argv[1]); assert w.getnframes() >= 2048, w.getnframes(); print('wheel-smoke: orpheus-say wrote', w.getnframes(), 'samples')" "${WORK}/hello.wav"
grep -q "version=${VERSION}\|\"version\": \"${VERSION}\"" "${WORK}/server.log" \
  || { echo "wheel-smoke: the server did not log its version"; head -5 "${WORK}/server.log"; exit 1; }
kill -TERM "${SERVER}"; wait "${SERVER}" || { echo "server did not stop cleanly"; tail -20 "${WORK}/server.log"; exit 1; }
SERVER=""
echo "wheel-smoke: OK in $((SECONDS - t0)) s"
