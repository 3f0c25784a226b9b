#!/usr/bin/env bash
# Mutation testing (mutmut 3, the `dev` extra) of the modules issue 38 names: core/,
# server/settings.py (group "options"), http/jsonwire.py, http/limits.py and
# engine/graph/buckets.py, of engine/model/invariant.py (batch invariance on the CPU), and
# of the engine step's scheduler modules (group "step": core/scheduler.py and the parts it
# composes; a subset of "core", to score them without the whole core), and of the card
# check's host-side modules (group "card": the step's input blocks, the FP8 path choice, the
# sim's fit to a card run), and of the prefix pool's book (group "prefix").
# Not part of the test command (scripts/test.sh): it takes hours on two cores.
# RELIABILITY.md ("Mutation testing") has the last run's score.
#
#   scripts/mutation.sh [group ...]     groups: core options jsonwire limits buckets invariant step card prefix
#                                       (default: all, one after the other)
#   MUTATION_JOBS=2                     mutants run at once (default: 1)
#   MUTATION_SAMPLE=300                 run only this many of each group's mutants not run
#                                       yet, drawn at random (a seeded draw; the summary
#                                       counts the rest as not run): an estimate where the
#                                       whole group takes too long
#   scripts/mutation.sh --summary       only print the table of the runs already made
#   scripts/mutation.sh --recheck [group ...]
#                                       run again the mutants that survived or had no test
#                                       (after tests were added: mutmut credits the new
#                                       tests first); a plain run never reruns a mutant
#                                       that has a result
#   MUTATION_RECHECK_SKIP=REGEX         --recheck leaves out the mutants whose names match
#                                       (modules no new test covers: their survivors would
#                                       only run their long tests again)
#
# Each group is its own mutmut run in build/mutation/<group>/ (a directory of links to
# orpheus_svc/, tests/ and pyproject.toml, and a setup.cfg holding the group's [mutmut]
# settings), so each mutant runs only against the tests that cover its module: mutmut
# records which of the group's tests call each function and runs a mutant of that
# function against those alone, stopping at the first failure (-x). Everything runs under
# `nice -n 19`. A run that is stopped resumes where it left off; `rm -rf build/mutation/
# <group>` starts the group afresh. To look at a survivor:
#
#   cd build/mutation/core && ../../../.venv/bin/mutmut results      # survivors, by name
#   cd build/mutation/core && ../../../.venv/bin/mutmut show NAME     # its diff
#
# The HTTP groups' tests share one in-process server (a session fixture); mutmut's fork
# server starts a fresh one for each mutant. Functions that run only while that server is
# built (limits.bounded_h11, whose class holds the head timer) are credited by mutmut to
# the first test alone; the script gives them every test of the group instead
# (mutation_stats.py).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
PY="${ROOT}/.venv/bin/python"
MUTMUT="${ROOT}/.venv/bin/mutmut"
OUT="${ROOT}/build/mutation"
JOBS="${MUTATION_JOBS:-1}"

# group -> the files it mutates; the tests that cover them
declare -A MUTATE=(
  [core]="orpheus_svc/core/*.py"
  [options]="orpheus_svc/server/settings.py"
  [jsonwire]="orpheus_svc/http/jsonwire.py"
  [limits]="orpheus_svc/http/limits.py"
  [buckets]="orpheus_svc/engine/graph/buckets.py"
  [invariant]="orpheus_svc/engine/model/invariant.py"
  [step]="orpheus_svc/core/scheduler.py orpheus_svc/core/sessions.py orpheus_svc/core/progress.py
          orpheus_svc/core/order.py orpheus_svc/core/scheduler_settings.py orpheus_svc/core/output.py"
  [card]="orpheus_svc/engine/graph/inputs.py orpheus_svc/engine/graph/fp8_paths.py
          orpheus_svc/engine/sim/fit.py"
  [prefix]="orpheus_svc/core/prefix_book.py"
)
declare -A TESTS=(
  [core]="tests/core tests/server/test_segmenter.py tests/server/test_segmenter_cuts.py tests/server/test_segmenter_languages.py tests/app tests/package"
  [options]="tests/server/test_options.py tests/server/test_settings.py tests/http/test_hostile_inputs.py"
  [jsonwire]="tests/http/test_jsonwire.py tests/http/test_hostile_inputs.py"
  [limits]="tests/http/test_limits_body.py tests/http/test_slow_clients.py tests/http/test_early_refusals.py tests/http/test_hostile_inputs.py"
  [buckets]="tests/engine/test_graph_buckets.py tests/engine/test_graph_backend.py"
  [invariant]="tests/engine/test_batch_invariance.py"
  [step]="tests/core"
  [card]="tests/engine/test_graph_copies.py tests/engine/test_fp8_kernels.py tests/engine_sim/test_sim_fit.py"
  [prefix]="tests/core/test_prefix_book.py tests/engine_sim/test_prefix_commands.py"
)
# groups whose tests build something once per session that mutmut cannot credit per test
declare -A WHOLE_MODULE=([limits]=1)
# tests no mutant runs: the two equivalence properties of the scheduler's shortcuts replay
# thousands of random steps (40 s and 14 s here, ten times that under mutmut's
# trampolines: about as long as the rest of the core's mutants together); the score of
# core/scheduler.py is a lower bound without them
SLOW_PROPERTIES="tests/core/test_scheduler_fastpath.py::test_the_shortcut_makes_the_same_plans_as_keying_and_sorting_everything
          tests/core/test_scheduler_parking.py::test_parking_makes_the_same_plans_as_judging_everything_every_step"
declare -A SKIP=([core]="${SLOW_PROPERTIES}" [step]="${SLOW_PROPERTIES}")
ALL=(core options jsonwire limits buckets invariant step card prefix)

summary() { "${PY}" "${ROOT}/scripts/mutation_stats.py" summary "${OUT}" "${ALL[@]}"; }

if [[ "${1:-}" == "--summary" ]]; then
  summary
  exit 0
fi
recheck=
if [[ "${1:-}" == "--recheck" ]]; then
  recheck=1
  shift
fi
[[ -x "${MUTMUT}" ]] || { echo "mutmut not installed: .venv/bin/pip install -e '.[dev]'" >&2; exit 1; }
mkdir -p "${OUT}"
exec 9>"${OUT}/.lock"
flock -n 9 || { echo "another scripts/mutation.sh is running (${OUT}/.lock)" >&2; exit 1; }
groups=("$@")
(( ${#groups[@]} )) || groups=("${ALL[@]}")

for group in "${groups[@]}"; do
  [[ -n "${MUTATE[${group}]:-}" ]] || { echo "unknown group ${group}: ${ALL[*]}" >&2; exit 2; }
  dir="${OUT}/${group}"
  mkdir -p "${dir}"
  ln -sfn "${ROOT}/orpheus_svc" "${dir}/orpheus_svc"
  ln -sfn "${ROOT}/tests" "${dir}/tests"
  ln -sfn "${ROOT}/pyproject.toml" "${dir}/pyproject.toml"
  {
    echo "[mutmut]"
    echo "source_paths = orpheus_svc"
    echo "only_mutate ="
    for m in ${MUTATE[${group}]}; do echo "    ${m}"; done
    echo "pytest_add_cli_args_test_selection ="
    for t in ${TESTS[${group}]}; do echo "    ${t}"; done
    # test_layers reads the sources' imports, and a mutated module imports mutmut
    printf 'pytest_add_cli_args =\n    -p\n    no:cacheprovider\n    --ignore=tests/package/test_layers.py\n'
    # a fork server that has collected the tests (imported torch, grpc) but run none of
    # them: each mutant's process starts from there, with no thread of an earlier test
    echo "process_isolation = forkserver"
    echo "forkserver_warmup = collect"
    echo "use_git_change_detection = false"
  } > "${dir}/setup.cfg"
  printf '\n== %s: mutating %s against %s\n' "${group}" "${MUTATE[${group}]}" "${TESTS[${group}]}"
  cd "${dir}"
  if [[ ! -f mutants/mutmut-stats.json || -n "${recheck}" ]]; then
    # which tests run each function, then adjust: mutmut saves its stats, then stops at
    # a mutant name that matches none
    nice -n 19 "${MUTMUT}" run --max-children "${JOBS}" 'no-such-mutant*' > stats.log 2>&1 || true
    [[ -f mutants/mutmut-stats.json ]] || {
      echo "mutmut failed in ${dir}: see stats.log" >&2; cd "${ROOT}"; continue; }
  fi
  if [[ -n "${WHOLE_MODULE[${group}]:-}" ]]; then
    "${PY}" "${ROOT}/scripts/mutation_stats.py" widen mutants/mutmut-stats.json "${MUTATE[${group}]}"
  fi
  if [[ -n "${SKIP[${group}]:-}" ]]; then
    "${PY}" "${ROOT}/scripts/mutation_stats.py" drop mutants/mutmut-stats.json ${SKIP[${group}]}
  fi
  names=()
  if [[ -n "${recheck}" ]]; then
    mapfile -t names < <("${PY}" "${ROOT}/scripts/mutation_stats.py" names . survived "no tests" |
                         grep -Ev "${MUTATION_RECHECK_SKIP:-^$}")
    if (( ! ${#names[@]} )); then echo "nothing to recheck in ${group}"; cd "${ROOT}"; continue; fi
    echo "rechecking ${#names[@]} mutants"
  elif [[ -n "${MUTATION_SAMPLE:-}" ]]; then
    mapfile -t names < <("${PY}" "${ROOT}/scripts/mutation_stats.py" sample . "${MUTATION_SAMPLE}")
    if (( ! ${#names[@]} )); then echo "nothing left to run in ${group}"; cd "${ROOT}"; continue; fi
    echo "running a sample of ${#names[@]} mutants"
  fi
  nice -n 19 "${MUTMUT}" run --max-children "${JOBS}" "${names[@]}" > run.log 2>&1 || {
    echo "mutmut failed in ${dir}: see run.log" >&2; tail -20 run.log >&2; cd "${ROOT}"; continue; }
  cd "${ROOT}"
done
summary
