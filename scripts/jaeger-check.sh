#!/usr/bin/env bash
# Opt-in (issue 35): a real Jaeger receives the server's traces. Builds Jaeger v1.76.0 from
# the Go module proxy into .tools/bin once (`go build` in a wrapper module, a few minutes and about 1 GB of
# Go build cache the first time; seconds after), then runs tests/telemetry/test_jaeger.py:
# Jaeger with in-memory storage and every port on 127.0.0.1, a sim-backend server tracing
# to it over OTLP/gRPC, and the call's trace read back whole from Jaeger's query API.
# Run by scripts/test.sh when ORPHEUS_JAEGER_CHECK=1, or alone.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
JAEGER_VERSION=v1.76.0
BIN="${ROOT}/.tools/bin/jaeger"
if [[ ! -x "${BIN}" || "$(cat "${BIN}.version" 2>/dev/null)" != "${JAEGER_VERSION}" ]]; then
  # `go install jaeger@version` refuses a module whose go.mod has a replace directive
  # (Jaeger's pins sarama): build it from a small wrapper module that repeats the replace
  echo "jaeger-check: building jaeger ${JAEGER_VERSION} from the Go module proxy into .tools/bin"
  WRAP="$(mktemp -d)"
  trap 'rm -rf "${WRAP}"' EXIT
  cat > "${WRAP}/go.mod" <<MOD
module orpheus-jaeger-build

go 1.24.6

require github.com/jaegertracing/jaeger ${JAEGER_VERSION}

replace github.com/Shopify/sarama => github.com/Shopify/sarama v1.33.0
MOD
  mkdir -p "$(dirname "${BIN}")"
  (cd "${WRAP}" && GOTOOLCHAIN="${GOTOOLCHAIN:-local}" GOFLAGS=-mod=mod \
     nice -n 10 go build -o "${BIN}" github.com/jaegertracing/jaeger/cmd/jaeger)
  echo "${JAEGER_VERSION}" > "${BIN}.version"
fi
ORPHEUS_JAEGER_CHECK=1 JAEGER_BIN="${BIN}" .venv/bin/python -m pytest -q -p no:cacheprovider \
  tests/telemetry/test_jaeger.py
