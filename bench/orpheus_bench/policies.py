"""Baseline batch orders for the scheduling comparison (BENCHMARKS.md "Scheduling policy").

The production scheduler has one order, core/scheduler.py `deadline_priority` (aged first,
then first audio, then least playout slack). The comparison pits it against two textbook
orders; they live here, not in the server, and are injected as SchedulerSettings.priority:

    fifo         arrival order only: the oldest generations run, newer ones wait
    round_robin  longest left out first: everyone takes turns, whatever their playout

A baseline's keys never have the (2, slack) shape, so the playout horizon
(engine.max_ahead_seconds) parks nothing under them.

    python -m orpheus_bench.policies --policy fifo [orpheus-svc serve flags...]

starts `orpheus-svc serve` with that order (scripts/policy-compare.sh does, per policy).
"""

from __future__ import annotations

import argparse
import sys

from orpheus_svc.core.generation import Generation
from orpheus_svc.core.playout import SessionPlayout
from orpheus_svc.core.scheduler_settings import PriorityFn, SchedulerSettings, deadline_priority


def fifo(gen: Generation, session: SessionPlayout, now: float,
         settings: SchedulerSettings) -> tuple:
    return (0, gen.arrival)


def round_robin(gen: Generation, session: SessionPlayout, now: float,
                settings: SchedulerSettings) -> tuple:
    return (0, -gen.steps_waited, gen.arrival)


POLICIES: dict[str, PriorityFn] = {"deadline": deadline_priority, "fifo": fifo,
                                   "round_robin": round_robin}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m orpheus_bench.policies",
                                 description="orpheus-svc serve with a baseline batch order")
    ap.add_argument("--policy", choices=list(POLICIES), required=True)
    args, serve_args = ap.parse_known_args(argv)
    from orpheus_svc.app.cli import main as svc_main

    return svc_main(["serve", *serve_args], priority=POLICIES[args.policy])


if __name__ == "__main__":
    sys.exit(main())
