"""The seeded-row checks of engine/model/invariant.py, as a program a test runs in fresh
processes (tests/engine/test_invariance_everywhere.py): one per CPU kernel path
(ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS, ONEDNN_MAX_CPU_ISA and the thread count are
read when torch loads, so each path needs a process of its own).

    python -m tests.engine.invariance_probe [--threads 1,2] [--full 2] [--backends torch,graph]

prints one JSON object: per thread count, what was checked, how many seeded rows, and the
first failures.

* matmul: the module's self-check (gemm_rows_invariant), float32 and float64.
* step: a tiny model on the torch backend and on the graph backend's CPU path. 64 seeded
  rows (decode rows at positions up to 1,000, past the attention's 512-key blocks) and 8
  seeded prompts are each stepped alone first; then steps of every batch size 1-64 and 257
  (--full; else a spread of them) put seeded rows at every place in the batch (a random half, then the other half, then
  all of them: the split and the unsplit step), beside unseeded rows and new prompts
  (seeded and unseeded, other lengths). Every seeded row must get the logits it got alone,
  bit for bit, and the same token. Between steps the slots' sampling state (seen marks,
  the graph engine's last ids) is put back, so each step repeats the same inputs.
* codec: a seeded session's PCM through the flusher with a tiny SNAC (noise on), alone and
  beside 9 sessions, byte for byte (tests/audio/test_seeded_calls.py's harness).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile

import torch

from orpheus_svc.core.request import GenerationRequest, SamplingParams
from orpheus_svc.core.step import StepPlan, StepRow
from orpheus_svc.core.tokens import AUDIO_BASE, CODES_PER_POSITION, FRAME_TOKENS
from orpheus_svc.engine.graph import step as graph_step
from orpheus_svc.engine.graph.backend import GraphBackend
from orpheus_svc.engine.model import invariant
from orpheus_svc.engine.model.llama import SlotLlama
from orpheus_svc.engine.model.sampling import constrained_logits
from orpheus_svc.engine.torch.backend import TorchBackend
from orpheus_svc.models.demo import random_state_dict

from .tiny import tiny_spec

CANDIDATES = 64   # seeded decode rows, slots 0..63
PROMPTS = 8       # seeded prompts, slots 64..71
NEW = 8           # unseeded prompts, slots 72..79
MATES = 257       # unseeded decode rows, slots 80..336
SLOTS = CANDIDATES + PROMPTS + NEW + MATES
SEQ = 700  # a seeded step's span rounds up to 1024: capped at the slot


def _model(graph: bool) -> SlotLlama:
    spec = tiny_spec()
    w = random_state_dict(spec, 0, dtype=torch.float32)
    w = {k: (v * 10 if not k.endswith("norm.weight") else v) for k, v in w.items()}
    return SlotLlama(spec, w, num_slots=SLOTS, max_seq_len=SEQ, dtype=torch.float32,
                     spare_slots=1 if graph else 0)


def _prompt(rng: random.Random) -> tuple[int, ...]:
    return (128259, 128000, *(rng.randrange(40, 5000) for _ in range(rng.randrange(1, 40))),
            128009, 128260, 128261, 128257)


def _request(slot: int, prompt, seeded: bool) -> GenerationRequest:
    return GenerationRequest(f"s{slot}", 0, tuple(prompt), 2000,
                             SamplingParams(0.6, 0.8, 1.1, seed=9000 + slot if seeded else None))


class Rows:
    """The probe's rows: each slot's request, prompt, decode position and last token."""

    def __init__(self, rng: random.Random) -> None:
        self.requests, self.position, self.last = {}, {}, {}
        for slot in range(SLOTS):
            seeded = slot < CANDIDATES + PROMPTS
            self.requests[slot] = _request(slot, _prompt(rng), seeded)
            n = len(self.requests[slot].prompt_ids)
            self.position[slot] = rng.randrange(n + 1, SEQ - 10 if slot < CANDIDATES else 600)
            self.last[slot] = AUDIO_BASE + rng.randrange(FRAME_TOKENS * CODES_PER_POSITION)

    def prefill(self, slot: int) -> StepRow:
        req = self.requests[slot]
        return StepRow(slot, slot, req, 9000 + slot, True, 0, None, 0, 0, False)

    def decode(self, slot: int) -> StepRow:
        req, pos = self.requests[slot], self.position[slot]
        k = pos - len(req.prompt_ids) + 1
        fp = k % FRAME_TOKENS
        return StepRow(slot, slot, req, 9000 + slot, False, k, self.last[slot], pos, fp,
                       fp == 0)


class Probe:
    """One backend: its slots prefilled once, then steps whose seeded rows are compared
    with the same rows stepped alone."""

    def __init__(self, kind: str, rows: Rows) -> None:
        self.kind, self.rows = kind, rows
        graph = kind == "graph"
        model = _model(graph)
        self.backend = GraphBackend(model, SLOTS, graphs=False) if graph else TorchBackend(model)
        self.logits: dict[int, torch.Tensor] = {}
        self._record()
        # the seeded slots' prompts, once (what the unseeded slots hold does not matter)
        for lo in range(0, CANDIDATES + PROMPTS, 8):
            self.step([rows.prefill(s) for s in range(lo, lo + 8)], [])
        self.saved = self._state()

    def _record(self) -> None:
        """Keep each row's logits of the step (the torch backend's sample, the graph
        engine's choose_tokens), by slot."""
        logits = self.logits
        if self.kind == "torch":
            backend, sample = self.backend, self.backend.sample

            def recording(rows, hidden):
                got = constrained_logits(hidden, backend.model.lm_head,
                                         [r.frame_position for r in rows],
                                         [r.stop_allowed for r in rows])
                for i, r in enumerate(rows):
                    logits[r.slot] = got[i].clone()
                return sample(rows, hidden)
            backend.sample = recording
            return
        choose = self._choose = graph_step.choose_tokens

        def choosing(model, state, hidden, slots, fpos, stop_ok, counter, sample=None, *rest):
            got = graph_step.step_logits(model, hidden, fpos, stop_ok)
            for i, s in enumerate(slots.tolist()):
                if sample is None or int(sample[i]):
                    logits[s] = got[i].clone()
            return choose(model, state, hidden, slots, fpos, stop_ok, counter, sample, *rest)
        graph_step.choose_tokens = choosing

    def close(self) -> None:
        if self.kind == "graph":
            graph_step.choose_tokens = self._choose

    def _state(self):
        if self.kind == "torch":
            return (self.backend.seen.seen.clone(),)
        st = self.backend.runner.state
        return st.seen.clone(), st.last_ids.clone()

    def restore(self) -> None:
        if self.kind == "torch":
            self.backend.seen.seen.copy_(self.saved[0])
            return
        st = self.backend.runner.state
        st.seen.copy_(self.saved[0])
        st.last_ids.copy_(self.saved[1])

    def step(self, prefill: list[StepRow], decode: list[StepRow]) -> dict[int, int]:
        """Each row's token by slot (and its logits in self.logits)."""
        self.logits.clear()
        plan = StepPlan(0, tuple(prefill), decode)
        result = self.backend.step(plan)
        tokens = {g: int(t[0]) for g, t in result.tokens.items()}
        if result.decode_tokens is not None:
            tokens.update(zip(plan.decode.gen_ids.tolist(), result.decode_tokens.tolist()))
        return tokens


def _trials(rng: random.Random, sizes):
    """(prefill slots, decode slots in batch order) of each step: seeded rows at every
    place of every batch size (module docstring)."""
    mates = list(range(CANDIDATES + PROMPTS + NEW, SLOTS))
    for b in sizes:
        places = list(range(b))
        rng.shuffle(places)
        if b <= CANDIDATES:
            half = set(places[:max(1, b // 2)])
            masks = [half, set(range(b)) - half, set(range(b))]
        else:
            masks = [set(places[i:i + CANDIDATES]) for i in range(0, b, CANDIDATES)]
        for seeded in masks:
            if not seeded:
                continue
            cands = rng.sample(range(CANDIDATES), len(seeded))
            others = rng.sample(mates, b - len(seeded))
            order = [cands.pop() if i in seeded else others.pop() for i in range(b)]
            prefill = []
            if rng.random() < 0.5:  # new prompts beside them, seeded and not
                prefill = (rng.sample(range(CANDIDATES, CANDIDATES + PROMPTS), rng.randrange(1, 3))
                           + rng.sample(range(CANDIDATES + PROMPTS, CANDIDATES + PROMPTS + NEW),
                                        rng.randrange(0, 3)))
                rng.shuffle(prefill)
            yield prefill, order


def check_steps(kind: str, quick: bool) -> dict:
    rng = random.Random(5)
    rows = Rows(rng)
    probe = Probe(kind, rows)
    alone = {}
    for s in range(CANDIDATES + PROMPTS):
        probe.restore()
        row = rows.prefill(s) if s >= CANDIDATES else rows.decode(s)
        tokens = probe.step([row] if row.prefill else [], [] if row.prefill else [row])
        alone[s] = (tokens[s], probe.logits[s])
    sizes = [1, 2, 3, 7, 16, 17, 33, 64, 257] if quick else [*range(1, 65), 257]
    checked, failures = 0, []
    for prefill, order in _trials(rng, sizes):
        probe.restore()
        tokens = probe.step([rows.prefill(s) for s in prefill], [rows.decode(s) for s in order])
        for s in [*prefill, *order]:
            if s not in alone:
                continue
            checked += 1
            token, logits = alone[s]
            if tokens[s] != token or not torch.equal(probe.logits[s], logits):
                failures.append(f"{kind}: slot {s} in a batch of {len(order)} (place "
                                f"{order.index(s) if s in order else 'prefill'}): "
                                f"{'token' if tokens[s] != token else 'logits'} differ")
    probe.close()
    return {"rows": checked, "failed": len(failures), "failures": failures[:20]}


def check_codec() -> dict:
    from orpheus_svc.audio.codec import load_snac, write_random_snac

    from ..audio.conftest import TINY_CONFIG
    from ..audio.test_seeded_calls import _target_pcm

    with tempfile.TemporaryDirectory() as tmp:
        codec = load_snac(write_random_snac(tmp, seed=3, config=TINY_CONFIG), noise=True,
                          seed=5)
    want = _target_pcm(codec, 0, 0)
    failures = [f"codec: {mates} mates: other bytes"
                for mates, seed in ((9, 4),)
                if _target_pcm(codec, mates, seed).tobytes() != want.tobytes()]
    return {"sessions": 1, "failures": failures}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2",
                    help="torch thread counts to run the checks under, in turn")
    ap.add_argument("--full", default="",
                    help="thread counts under which every batch size 1-64 runs (else a spread)")
    ap.add_argument("--backends", default="torch,graph")
    ap.add_argument("--full-backends", default="torch",
                    help="the backends the --full thread counts sweep every batch size on")
    ap.add_argument("--graph-threads", default="",
                    help="thread counts the graph backend runs under (default: all)")
    args = ap.parse_args(argv)
    full = {int(t) for t in args.full.split(",") if t}
    out = {"capability": torch.backends.cpu.get_cpu_capability(), "runs": []}
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        run = {"threads": threads,
               "matmul": invariant.gemm_rows_invariant(dtype=torch.float32)
               and invariant.gemm_rows_invariant(dtype=torch.float64)}
        graph_threads = {int(t) for t in args.graph_threads.split(",") if t}
        for kind in args.backends.split(","):
            if kind == "graph" and graph_threads and threads not in graph_threads:
                continue
            run[kind] = check_steps(kind, threads not in full
                                    or kind not in args.full_backends.split(","))
        run["codec"] = check_codec()
        run["ok"] = run["matmul"] and not any(
            v["failures"] for v in run.values() if isinstance(v, dict))
        out["runs"].append(run)
    out["ok"] = all(r["ok"] for r in out["runs"])
    json.dump(out, sys.stdout)
    print()
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
