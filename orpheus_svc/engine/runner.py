"""StepRunner: runs the scheduler's plans on the backend, one call per step.

    done = runner.run(plan)    the step that completes now as (plan, result), or None

Inside it, what a step needs of the backend and nothing else:
  - run-ahead (capabilities.runs_ahead): a step is launched before the one in flight is
    collected, so the device never waits for the host between the two. `in_flight` is the
    plan launched last; the scheduler plans the next step with it (Scheduler.schedule's
    in_flight). A step launched with nothing in flight completes at the next run.
  - fault isolation: a step that raises is retried in parts (without its new rows, then
    by halves), failing only the rows that make it raise, for backends whose step is safe
    to retry (capabilities.retry_safe); for the others the step's rows fail.
  - release: ended generations go back to the backend, which says which it holds nothing
    more for (Backend.release: the scheduler's freed).
A FatalBackendError is no row's fault: it passes through and the engine thread ends.
Engine thread only; `ahead`, `failed_rows`, `isolation_retries` are read as racy snapshots.
"""

from __future__ import annotations

import logging
from typing import NamedTuple, Sequence

from orpheus_svc.core.errors import internal_message, new_error_id
from orpheus_svc.core.step import Backend, FatalBackendError, StepPlan, StepResult, StepRow
from orpheus_svc.engine.ahead import AheadRecord

log = logging.getLogger(__name__)


def internal(error_id: str) -> str:
    """What a client learns of a failed step: no exception text, just the id."""
    return internal_message("internal error while generating", error_id)


def split(plan: StepPlan) -> list[StepPlan]:
    """Parts to retry a failed step in: without the suspects first (rows new this step),
    else two halves (rows in plan order: prefill, then decode)."""
    p, d = len(plan.prefill), len(plan.decode)
    if p and d:
        return [plan.part((), range(d)), plan.part(range(p), ())]
    half = (p + d) // 2
    first, second = range(half), range(half, p + d)
    return [plan.part([i for i in idx if i < p], [i - p for i in idx if i >= p])
            for idx in (first, second)]


class Ran(NamedTuple):
    """A step that completed: its plan and what the backend made of it."""
    plan: StepPlan
    result: StepResult


class StepRunner:
    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.capabilities = backend.capabilities
        # the plan launched last and the backend's handle for it; None: nothing in flight
        self._ahead: tuple[StepPlan, object] | None = None
        self.ahead = AheadRecord()  # whether each step ran ahead, and why not (engine/ahead.py)
        self.failed_rows = 0        # generations failed by a backend error
        self.isolation_retries = 0  # steps re-run in parts to find the rows that fail

    @property
    def in_flight(self) -> StepPlan | None:
        return None if self._ahead is None else self._ahead[0]

    def run(self, plan: StepPlan) -> Ran | None:
        """Run `plan` (planned with `in_flight` as the step in flight). With a step in
        flight: launch `plan` behind it, then collect it (that step completes). A backend
        that runs ahead, with nothing in flight: launch `plan`, which completes at the next
        run (None now). Otherwise `plan` runs now (an empty plan too: a backend with
        draining slots confirms their ends in a step)."""
        if self._ahead is not None:
            flying, handle = self._ahead
            self._ahead = None
            self._launch_ahead(plan)
            return Ran(flying, self._collect(flying, handle))
        if self.capabilities.runs_ahead and not plan.empty:
            try:
                self._ahead = (plan, self.backend.launch(plan))
            except FatalBackendError:
                raise
            except Exception as exc:  # noqa: BLE001 - not retry_safe: the step's rows fail
                return Ran(plan, self._failed(plan.rows, exc))
            self.ahead.launched(False)
            return None
        return Ran(plan, self._isolated(plan))

    def idle(self) -> None:
        """Nothing to run and nothing in flight: the next step launches alone."""
        self.ahead.not_next("idle")

    def release(self, gen_ids: Sequence[int]) -> list[int]:
        """Ended generations back to the backend; returns those it holds nothing more for."""
        return self.backend.release(gen_ids) if gen_ids else []

    def _launch_ahead(self, plan: StepPlan) -> None:
        """Launch `plan` while the step before it runs. A launch that fails is forgotten:
        the scheduler plans afresh once the step before is read, and the rows lose nothing
        (what the plan admitted stays admitted and is prefilled then; what it released
        stays released)."""
        if plan.empty:
            self.ahead.not_next("next_empty")
            return
        try:
            self._ahead = (plan, self.backend.launch(plan))
            self.ahead.launched(True)
        except FatalBackendError:
            raise
        except Exception as exc:  # noqa: BLE001
            log.error("launching the next step ahead failed; it is planned again after this "
                      "one", exc_info=exc)
            self.ahead.not_next("launch_failed")

    def _collect(self, plan: StepPlan, handle: object) -> StepResult:
        """The launched step's tokens; a failure fails its rows."""
        try:
            return self.backend.collect(handle)
        except Exception as exc:  # noqa: BLE001
            return self._failed(plan.rows, exc)

    def _isolated(self, plan: StepPlan) -> StepResult:
        """backend.step(plan), failing only the rows that make it raise: a step that raises
        is retried without its suspects (the rows that joined this step: the others ran
        fine one step ago), then by halves, down to single rows: one bad row of 32 costs
        about 2 x log2(32) extra steps, once."""
        try:
            return self.backend.step(plan)
        except FatalBackendError:
            raise  # no row caused it and none would pass a retry
        except Exception as exc:  # noqa: BLE001 - one bad row must not fail its neighbours
            if len(plan.rows) <= 1 or not self.capabilities.retry_safe:
                return self._failed(plan.rows, exc)
            self.isolation_retries += 1
        merged = StepResult()
        for part in split(plan):
            sub = self._isolated(part)
            merged.tokens.update(sub.tokens)
            if sub.decode_tokens is not None:  # by gen_id, as the whole plan's rows differ
                merged.tokens.update(zip(part.decode.gen_ids.tolist(),
                                         ((t,) for t in sub.decode_tokens.tolist())))
            merged.errors.update(sub.errors)
            merged.freed.extend(sub.freed)
        return merged

    def _failed(self, rows: tuple[StepRow, ...], exc: BaseException) -> StepResult:
        """Fail `rows` for `exc`: the client gets a short message with an error id, the log
        the whole exception with each generation's session. A FatalBackendError is raised
        on."""
        if isinstance(exc, FatalBackendError):
            raise exc
        error_id = new_error_id()
        self.failed_rows += len(rows)
        log.error("backend step failed (error id %s) for %d generation(s): %s",
                  error_id, len(rows),
                  ", ".join(f"gen {g.gen_id} session {g.request.session_id} segment "
                            f"{g.request.segment_index}" for g in rows),
                  exc_info=exc)
        return StepResult(errors={g.gen_id: internal(error_id) for g in rows})
