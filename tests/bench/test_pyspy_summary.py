"""The py-spy table maker (orpheus_bench.pyspy_summary): areas are charged by the nearest
frame that names one, and sleeping leaves do not count as running."""

from orpheus_bench import pyspy_summary as ps

ENGINE = ("thread (7): engine-core;Thread.run (threading.py:982);EngineLoop._run "
          "(orpheus_svc/engine/loop.py:190);EngineLoop._step (orpheus_svc/engine/loop.py:250)")
RAW = "\n".join([
    ENGINE + ";Scheduler.schedule (orpheus_svc/core/scheduler.py:185);Scheduler._priority "
    "(orpheus_svc/core/scheduler.py:317);deadline_priority (orpheus_svc/core/scheduler.py:42);"
    "SessionPlayout.slack (orpheus_svc/core/playout.py:148) 6",
    ENGINE + ";Scheduler.update (orpheus_svc/core/scheduler.py:229);FrameParser.feed "
    "(orpheus_svc/core/grammar.py:92) 3",
    ENGINE + ";SimBackend._timed_step (orpheus_svc/engine/sim/backend.py:275);SimBackend.step "
    "(orpheus_svc/engine/sim/backend.py:269) 10",
    "thread (1): MainThread;Handle._run (asyncio/events.py:80);TTSServicer._run "
    "(orpheus_svc/server/servicer.py:349) 1",
]) + "\n"


def test_areas_and_activity(tmp_path):
    raw = tmp_path / "p.txt"
    raw.write_text(RAW)
    areas = {ps.area_of(frames): n for _, frames, n in ps.parse(str(raw))
             if "SimBackend.step" not in frames[-1][0]}
    assert areas == {"scheduler: schedule (priority keys, sort, rows)": 6,
                     "scheduler: update (tokens -> frames, playout)": 3,
                     "gRPC + protobuf": 1}
    text = ps.summarise(str(raw), top=5, title="t")
    assert "| engine thread (engine-core) | 95.0% |" in text
    act = ps.activity(str(raw), ticks=20)
    assert "| engine-core | 95% | 45% |" in act  # the sim's modelled GPU step is a sleep
