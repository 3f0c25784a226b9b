"""Drive an EngineLoop from a test: a recording frame sink and an event collector."""

import threading
from collections import defaultdict

import numpy as np

from orpheus_svc.core.events import AudioEvent
from orpheus_svc.engine.handle import is_end


class RecordingFlusher:
    """Stands in for audio.Flusher: records frames per generation, no audio; like the
    flusher, it ends each generation with one (empty) final AudioEvent carrying the Finish
    the engine handed over, sent to `collector`."""

    def __init__(self, collector=None):
        self.collector = collector  # woken on every push, as audio events would wake it
        self.frames = defaultdict(list)
        self.final = {}
        self.playout = {}  # gen_id -> the playout snapshots the engine gave, in order
        self.dropped = set()
        self.ended = set()  # final event sent
        self.lock = threading.Lock()

    def _end(self, gen_id, finish):
        with self.lock:
            if finish is None or gen_id in self.ended:
                return
            self.ended.add(gen_id)
        if self.collector is not None:
            self.collector([AudioEvent(gen_id, np.zeros(0, np.float32), 0, final=True,
                                       finish=finish)])

    def push(self, gen_id, frames, final, playout=None, finish=None, seed=None):
        with self.lock:
            assert gen_id not in self.final, "frames after final"
            if playout is not None:
                assert gen_id in self.playout or len(frames), "the first snapshot comes with frames"
                self.playout.setdefault(gen_id, []).append(playout)
            self.frames[gen_id].extend(np.asarray(frames).tolist())
            if final or finish is not None:
                self.final[gen_id] = True
        self._end(gen_id, finish)
        if self.collector is not None:
            self.collector([])

    def push_many(self, pushes):  # the engine's hand-off, once per step
        for p in pushes:
            self.push(*p)

    def drop(self, gen_id, finish=None):
        with self.lock:
            self.dropped.add(gen_id)
        self._end(gen_id, finish)


class Collector:
    """Thread-safe event sink; wait_for() blocks until a predicate over events holds."""

    def __init__(self):
        self.events = []
        self.cond = threading.Condition()

    def __call__(self, batch):
        with self.cond:
            self.events.extend(batch)
            self.cond.notify_all()

    def wait_for(self, pred, timeout=60.0):
        with self.cond:
            ok = self.cond.wait_for(lambda: pred(self.events), timeout)
        assert ok, f"timed out; events so far: {self.events[-5:]}"

    def of(self, kind, gen_id=None):
        with self.cond:
            return [e for e in self.events if isinstance(e, kind)
                    and (gen_id is None or e.gen_id == gen_id)]

    def finishes(self):
        """gen_id -> the Finish on its final event."""
        with self.cond:
            return {e.gen_id: e.finish for e in self.events
                    if isinstance(e, AudioEvent) and e.finish is not None}

    def finish(self, gen_id):
        return self.finishes()[gen_id]

    def ended(self, gen_ids):
        done = {e.gen_id for e in self.events if is_end(e)}
        return set(gen_ids) <= done
