"""Injected faults of the sim backend (engine.sim_faults; tests only, never for serving).

SimFaults names generations by their seed (a client sets it in SamplingOptions; segment i of
a session runs with seed + i) and makes the backend raise when such a generation reaches a
token, makes a step slow, or makes the codec fail on that generation's audio. EngineLoop
must then fail only the targeted rows (tests/engine_sim/test_faults.py, tests/e2e). Two kinds
end the engine thread instead, as a device that is lost or a bug past the loop's handlers
would: the server must then end every call and exit (tests/engine_sim/test_engine_death.py,
tests/e2e/test_process_faults.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from orpheus_svc.core.step import FatalBackendError, StepPlan
from orpheus_svc.core.tokens import CODES_PER_POSITION, FRAME_TOKENS


class SimFault(RuntimeError):
    """An injected failure (engine.sim_faults)."""


class SimEngineDeath(BaseException):
    """An injected exception that no handler of EngineLoop catches (engine_death): it
    stands for a bug past the loop's own handlers, and ends the engine thread."""


# A frame the sim never draws by chance (p = 4096^-7 per frame): the codes of a generation
# whose audio the codec must fail on carry it, so SimCodec recognises that generation's windows.
POISON_CODES = np.full(FRAME_TOKENS, CODES_PER_POSITION - 1, dtype=np.int64)


@dataclass
class SimFaults:
    """Injected faults, keyed by generation seed. Spec (engine.sim_faults), comma separated:

        step_error:SEED@TOKEN     backend.step raises while that generation is in the step,
                                  from its token TOKEN on (0 = at prefill)
        slow_step:SEED@SECONDS    every step with that generation in it takes SECONDS longer
        codec_error:SEED          the codec raises on any decode call holding its audio
        fatal_error:SEED          backend.step raises FatalBackendError (a lost device) as
                                  soon as that generation is in a step
        engine_death:SEED         backend.step raises an exception that EngineLoop does not
                                  handle (SimEngineDeath): the engine thread dies
    """

    step_error: dict[int, int] = field(default_factory=dict)
    slow_step: dict[int, float] = field(default_factory=dict)
    codec_error: set[int] = field(default_factory=set)
    fatal_error: set[int] = field(default_factory=set)
    engine_death: set[int] = field(default_factory=set)

    @classmethod
    def parse(cls, spec: str) -> "SimFaults":
        faults = cls()
        for item in filter(None, (p.strip() for p in (spec or "").split(","))):
            kind, _, arg = item.partition(":")
            seed_s, _, val = arg.partition("@")
            try:
                seed = int(seed_s)
                if kind == "step_error":
                    faults.step_error[seed] = int(val or 0)
                elif kind == "slow_step":
                    faults.slow_step[seed] = float(val)
                elif kind in ("codec_error", "fatal_error", "engine_death") and not val:
                    getattr(faults, kind).add(seed)
                else:
                    raise ValueError
            except ValueError:
                raise ValueError(f"bad fault {item!r}: use step_error:SEED@TOKEN, "
                                 "slow_step:SEED@SECONDS, codec_error:SEED, fatal_error:SEED "
                                 "or engine_death:SEED") from None
        return faults

    def __bool__(self) -> bool:
        return bool(self.step_error or self.slow_step or self.codec_error or self.fatal_error
                    or self.engine_death)

    def before_step(self, plan: StepPlan, sleep: Callable[[float], None]) -> None:
        extra = 0.0
        for g in plan.rows:
            if g.seed in self.fatal_error:
                raise FatalBackendError(f"injected fatal backend error: generation {g.gen_id} "
                                        f"(seed {g.seed})")
            if g.seed in self.engine_death:
                raise SimEngineDeath(f"injected engine thread death: generation {g.gen_id} "
                                     f"(seed {g.seed})")
            at = self.step_error.get(g.seed)
            if at is not None and g.num_generated >= at:
                raise SimFault(f"injected step fault: generation {g.gen_id} (seed {g.seed}) "
                               f"at token {g.num_generated}")
            extra = max(extra, self.slow_step.get(g.seed, 0.0))
        if extra > 0:
            sleep(extra)
