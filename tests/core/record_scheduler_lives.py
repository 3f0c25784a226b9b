"""Records what the scheduler decides in each life of tests/core/test_scheduler_replay.py:
tests/core/scheduler_lives/<life>.jsonl.gz, which that test replays today's Scheduler
against.

How these were recorded (issue 44): once, from the frozen pre-split scheduler that the
replay used to compare today's with live, tests/unit/legacy_scheduler.py at commit de3b2a0
(deleted since):

    .venv/bin/python -m tests.core.record_scheduler_lives --legacy de3b2a0

(--legacy REV takes that file from git, `git show REV:tests/unit/legacy_scheduler.py`, so
it works without the file in the tree; the frozen copy imports today's core modules besides
itself: slots, batch, playout, budget, generation.) At de3b2a0 the live comparison passed,
so the record is also what today's Scheduler decided then.

After a change of the scheduler's behaviour made on purpose, regenerate the records from
today's Scheduler (all lives, or those named) and read the diff before committing it. Each
file is gzip'd JSON lines: the first says where it was recorded from, its run-ahead steps and
its counts; then one line per step (see test_scheduler_replay.py's docstring for the keys).
`git config diff.gzip.textconv "gzip -dc"` once makes `git diff` show them as text
(scheduler_lives/.gitattributes names the driver):

    .venv/bin/python -m tests.core.record_scheduler_lives [LIFE ...]
    git diff tests/core/scheduler_lives

Regenerating keeps each life's script: the steps that ran ahead are read from its record
(the frozen scheduler's choices: test_scheduler_replay.py's docstring), the rest follows
from the life's seed. A behaviour change can only move what the lives record, never make
this test pass by itself: the replay must then decide exactly what the new record says.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from orpheus_svc.core.prompt import fit_to_slot
from orpheus_svc.core.admission import AdmissionError
from orpheus_svc.core.slots import SlotPool

from .test_scheduler_replay import (LIVES, RECORDS, Life, Observer, encode_changes,
                                    read_record, record_path, replay, scheduler)

REPO = Path(__file__).resolve().parents[2]


class Recorder(Observer):
    def __init__(self) -> None:
        super().__init__()
        self.steps: list[dict] = []

    def step(self, step) -> None:
        self.steps.append({"s": step})

    def put(self, key: str, value) -> None:
        assert key not in self.steps[-1], (self.steps[-1]["s"], key)
        self.steps[-1][key] = value


class Legacy:
    """The frozen scheduler behind today's calls, as the live comparison fed it: a prompt
    the slot cannot hold never reached it (the engine loop refused it first: PromptTooLong
    here), its AdmissionError is today's, and schedule(now, in_flight) is its
    schedule_ahead (None where it declined; where it planned, the idle sessions are
    forgotten after it, as today's plan in flight does)."""

    def __init__(self, module, life: Life) -> None:
        self._m, self._life = module, life
        self._s = module.Scheduler(
            SlotPool(life.slots, life.max_seq_len, confirm_frees=life.confirm_frees),
            module.SchedulerSettings(**life.settings))

    @property
    def settings(self):
        return self._s.settings

    @settings.setter
    def settings(self, value) -> None:
        self._s.settings = value

    def add(self, gen) -> None:
        req = gen.request
        fit_to_slot(len(req.prompt_ids), req.max_tokens, self._life.max_seq_len)
        try:
            self._s.add(gen)
        except self._m.AdmissionError as exc:
            raise AdmissionError(str(exc)) from None

    def schedule(self, now: float, in_flight=None):
        if in_flight is None:
            return self._s.schedule(now)
        plan = self._s.schedule_ahead(in_flight, now)
        if plan is not None:
            self._s._forget_idle_sessions(now)
        return plan

    def __getattr__(self, name):
        return getattr(self._s, name)


def legacy_insides(sched: Legacy) -> tuple[bool, bool]:
    return bool(sched._s._parked), bool(sched._s._deferred_ids)


def current_insides(sched) -> tuple[bool, bool]:
    return bool(len(sched._parking)), sched._queue.num_deferred > 0


def load_legacy(rev: str):
    text = subprocess.run(["git", "show", f"{rev}:tests/unit/legacy_scheduler.py"],
                          cwd=REPO, check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "legacy_scheduler.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("legacy_scheduler", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def git_rev() -> str:
    out = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=7"], cwd=REPO,
                         capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def record(name: str, legacy=None, legacy_rev: str = "") -> dict:
    life = LIVES[name]
    obs = Recorder()
    if legacy is not None:
        source = (f"tests/unit/legacy_scheduler.py at {legacy_rev} (the scheduler before "
                  f"issue 38 split it), by tests/core/record_scheduler_lives.py")
        seen, ahead = replay(life, Legacy(legacy, life), obs, None, legacy_insides)
    else:
        path = record_path(name)
        script = set(read_record(name)[0]["ahead_steps"]) if path.exists() else None
        source = (f"orpheus_svc/core/scheduler.py at {git_rev()}, by "
                  f"tests/core/record_scheduler_lives.py")
        seen, ahead = replay(life, scheduler(life), obs, script, current_insides)
    head = {"life": name, "recorded_from": source, "ahead_steps": ahead, "seen": seen}
    lines = [head, *encode_changes(obs.steps)]
    text = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)
    RECORDS.mkdir(exist_ok=True)
    with open(record_path(name), "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
        f.write(text.encode("utf-8"))
    return seen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("lives", nargs="*", help="life names (default: all)")
    parser.add_argument("--legacy", metavar="REV",
                        help="record from tests/unit/legacy_scheduler.py at this git revision")
    args = parser.parse_args(argv)
    names = args.lives or list(LIVES)
    unknown = [n for n in names if n not in LIVES]
    if unknown:
        parser.error(f"unknown lives: {unknown}; known: {list(LIVES)}")
    legacy = load_legacy(args.legacy) if args.legacy else None
    for name in names:
        seen = record(name, legacy, args.legacy or "")
        size = record_path(name).stat().st_size
        print(f"{name}: {size} bytes, {seen}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
