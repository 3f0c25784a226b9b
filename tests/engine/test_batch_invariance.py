"""A seeded row's logits and tokens do not depend on its batch (issue 33).

One seeded generation is stepped alone, then beside 1 to 12 random batch-mates (seeded and
unseeded, other prompts and lengths, arriving and ending while it runs, prefilled with it
or not: the scheduler's own steps; tests/engine/invariance_probe.py puts seeded rows at
every place of batches up to 257): its logits must be the same bits and its tokens the same at every step, on the
torch backend and on the graph backend (its CPU path: no capture, the same buffers). Float32
on the CPU, the server's own dtype there: float64 would hide the rounding that differs.
"""

import random

import pytest
import torch

from orpheus_svc.core.generation import Generation
from orpheus_svc.core.request import GenerationRequest, SamplingParams
from orpheus_svc.core.scheduler import Scheduler
from orpheus_svc.core.scheduler_settings import SchedulerSettings
from orpheus_svc.core.slots import SlotPool
from orpheus_svc.engine.graph.backend import GraphBackend
from orpheus_svc.engine.model import invariant
from orpheus_svc.engine.torch.backend import TorchBackend
from orpheus_svc.engine.model.llama import SlotLlama
from orpheus_svc.engine.model.sampling import constrained_logits

from .tiny import tiny_spec

from orpheus_svc.models.demo import random_state_dict

SLOTS, SEQ = 72, 1100
TARGET = 1
TARGET_PROMPT = (128259, 128000, 40, 41, 42, 43, 44, 45, 46, 128009, 128260, 128261, 128257)


def _model(graph: bool) -> SlotLlama:
    spec = tiny_spec()
    w = random_state_dict(spec, 0, dtype=torch.float32)
    w = {k: (v * 10 if not k.endswith("norm.weight") else v) for k, v in w.items()}
    return SlotLlama(spec, w, num_slots=SLOTS, max_seq_len=SEQ, dtype=torch.float32,
                     spare_slots=1 if graph else 0)


class _Recording(TorchBackend):
    """The torch backend, keeping the target's logits of every step."""

    def __init__(self, model):
        super().__init__(model)
        self.logits = []

    def sample(self, rows, hidden):
        at = [i for i, r in enumerate(rows) if r.gen_id == TARGET]
        if at:
            logits = constrained_logits(hidden, self.model.lm_head,
                                        [r.frame_position for r in rows],
                                        [r.stop_allowed for r in rows])
            self.logits.append(logits[at[0]].clone())
        return super().sample(rows, hidden)


def _request(rng: random.Random, seeded: bool, max_tokens: int) -> GenerationRequest:
    # some prompts long enough that the step's span passes 512 keys (the kernel's block)
    words = rng.randrange(450, 560) if rng.random() < 0.2 else rng.randrange(1, 40)
    prompt = (128259, 128000, *(rng.randrange(40, 5000) for _ in range(words)),
              128009, 128260, 128261, 128257)
    return GenerationRequest(f"m{rng.random()}", 0, prompt, max_tokens,
                             SamplingParams(0.6, 0.8, 1.1,
                                            seed=rng.randrange(1 << 40) if seeded else None))


def _run(backend, mates: int, seed: int) -> list[int]:
    """The target's tokens with `mates` random batch-mates arriving over its first steps."""
    rng = random.Random(seed)
    sched = Scheduler(SlotPool(SLOTS, SEQ), SchedulerSettings(max_batch_size=SLOTS,
                                                              max_waiting=256))
    target = GenerationRequest("target", 0, TARGET_PROMPT, 120,
                               SamplingParams(0.6, 0.8, 1.1, seed=4242))
    # some mates are there before the target (prefilled with it), the rest arrive later
    arrivals = sorted(rng.choice([0, 0, *range(1, 60)]) for _ in range(mates))
    gid = TARGET + 1
    tokens: list[int] = []
    step = 0
    while step == 0 or sched.has_work:
        while arrivals and arrivals[0] <= step:
            arrivals.pop(0)
            req = _request(rng, rng.random() < 0.4, rng.randrange(5, 300))
            sched.add(Generation(gen_id=gid, request=req, arrival=0.0,
                                 seed=req.sampling.seed or rng.randrange(1 << 40)))
            gid += 1
        if step == 0:
            sched.add(Generation(gen_id=TARGET, request=target, arrival=0.0, seed=4242))
        plan = sched.schedule(0.0)
        result = backend.step(plan)
        tokens.extend(result.tokens.get(TARGET, ()))
        if result.decode_tokens is not None:
            ids = plan.decode.gen_ids.tolist()
            if TARGET in ids:
                tokens.append(int(result.decode_tokens[ids.index(TARGET)]))
        sched.update(plan, result, 0.0)
        step += 1
    return tokens


def test_the_matmul_self_check_passes():
    """engine/model/invariant.py's self-check: a row of rows_matmul keeps its bits at every
    batch size and place (tests/engine/test_invariance_everywhere.py runs it under every
    CPU kernel path of the machine too)."""
    assert invariant.gemm_rows_invariant(dtype=torch.float32)
    assert invariant.gemm_rows_invariant(dtype=torch.float64)


def _blas_by_shape(real):
    """A GEMM that sums each row's products in an order that follows the call's M, as a
    BLAS does that picks its kernel by shape (MKL with AMX from 9 rows up): the worst case
    invariance must hold under."""
    def mm(a, b, out=None):
        cut = 1 + (a.shape[0] * 37) % (a.shape[1] - 1)
        y = real(a[:, cut:], b[cut:]) + real(a[:, :cut], b[:cut])
        return y if out is None else out.copy_(y)
    return mm


def test_a_gemm_whose_order_follows_m_cannot_move_a_seeded_row(monkeypatch):
    """Invariance holds by construction, not by the BLAS: with a GEMM that changes every
    row's order of summation with M (above), a row still keeps its bits at every batch
    size, because inside an invariant step every call has the one shape of a block; the
    same GEMM called on the batch as it comes gives the row other bits."""
    adversary = _blas_by_shape(torch.mm)
    gen = torch.Generator().manual_seed(1)
    w_t = torch.randn((96, 256), generator=gen).T
    x = torch.randn((40, 256), generator=gen)
    assert not torch.equal(adversary(x[:1], w_t)[0], adversary(x, w_t)[0])
    monkeypatch.setattr(torch, "mm", adversary)
    assert invariant.gemm_rows_invariant()
    alone = _Recording(_model(False))
    want = _run(alone, 0, 0)
    crowded = _Recording(_model(False))
    assert _run(crowded, 12, 5) == want
    for a, b in zip(alone.logits, crowded.logits, strict=True):
        assert torch.equal(a, b)


def test_the_self_check_fails_on_a_matmul_that_follows_the_batch(monkeypatch):
    """The self-check can fail: with a matmul whose order of summation follows M (no fixed
    blocks) it finds a row that moved, and on one that mixes rows too."""
    adversary = _blas_by_shape(torch.mm)
    monkeypatch.setattr(invariant, "rows_matmul", adversary)
    assert not invariant.gemm_rows_invariant()
    monkeypatch.setattr(invariant, "rows_matmul", lambda x, w_t: (x + x.mean(0)) @ w_t)
    assert not invariant.gemm_rows_invariant()


def test_outside_an_invariant_step_the_matmul_is_the_plain_one():
    """An unseeded step's matmuls are exactly the ones it always had (one call, no copy)."""
    gen = torch.Generator().manual_seed(1)
    w_t = torch.randn((96, 256), generator=gen).T
    for m in (1, 7, 40):
        x = torch.randn((m, 256), generator=gen)
        assert torch.equal(invariant.rows_matmul(x, w_t), x @ w_t)


@pytest.mark.parametrize("mates,seed", [(1, 1), (3, 3), (12, 5)])
def test_a_seeded_row_gets_the_same_logits_and_tokens_whatever_its_batch(mates, seed):
    alone = _Recording(_model(False))
    want = _run(alone, 0, 0)
    crowded = _Recording(_model(False))
    got = _run(crowded, mates, seed)
    assert got == want
    assert len(crowded.logits) == len(alone.logits) == len(want)
    for step, (a, b) in enumerate(zip(alone.logits, crowded.logits)):
        assert torch.equal(a, b), f"step {step}: logits differ"


@pytest.mark.parametrize("mates,seed", [(2, 11), (12, 13)])
def test_the_graph_backend_keeps_a_seeded_row_invariant_too(mates, seed):
    def graph():
        return GraphBackend(_model(True), SLOTS, graphs=False)

    want = _run(graph(), 0, 0)
    assert len(want) > 10
    assert _run(graph(), mates, seed) == want


def test_an_invariant_steps_rows_attend_alone_over_spans_of_their_own():
    """rows_attention: each row is one call of its own, over its length rounded up to
    SPAN_BLOCK (at most the slot), from a fresh copy of its query; so even a kernel whose
    result follows its call's batch size and span gives a row the same output alone and
    beside others."""
    calls = []

    def attend(q, keys, values, mask):  # an adversary: its output follows the call's shape
        calls.append((q.shape[0], keys.shape[2], int(mask.sum())))
        return q.sum(dim=(1, 2)) + q.shape[0] * 1000 + keys.shape[2]

    def keys_of(row, span):
        return torch.zeros((1, 2, span, 4)), torch.zeros((1, 2, span, 4))

    gen = torch.Generator().manual_seed(3)
    q = torch.randn((5, 2, 1, 4), generator=gen)
    pos = [3, 600, 511, 512, 1500]
    out = invariant.rows_attention(q, keys_of, pos, 1200, attend)
    assert calls == [(1, 512, 4), (1, 1024, 601), (1, 512, 512), (1, 1024, 513),
                     (1, 1200, 1200)]  # one row a call; its own span, capped at the slot
    for row, p in enumerate(pos):
        alone = invariant.rows_attention(q[row:row + 1], keys_of, [p], 1200, attend)
        assert torch.equal(alone[0], out[row])


def test_a_seeded_rows_gemm_call_is_its_own_whatever_its_place(monkeypatch):
    """rows_matmul gives each row a call of its own: a BLAS whose result moves with a row's
    place in its call (as MKL's does when two threads split the rows) cannot move it."""
    mm = torch.mm

    def by_place(a, b, out=None):  # rows after the first get other bits
        y = mm(a, b)
        y[1:] += 1e-3
        return out.copy_(y) if out is not None else y
    monkeypatch.setattr(torch, "mm", by_place)
    gen = torch.Generator().manual_seed(4)
    w_t = torch.randn((24, 40), generator=gen).T
    x = torch.randn((9, 40), generator=gen)
    with invariant.invariant_step():
        batch = invariant.rows_matmul(x, w_t)
        for row in range(9):
            assert torch.equal(invariant.rows_matmul(x[row:row + 1], w_t)[0], batch[row])


def test_unseeded_rows_take_the_batched_path():
    """The fast path for unseeded load is untouched: one prefill padded to the longest
    prompt; a seeded row's prompt is padded to a length of its own."""
    assert invariant.prompt_groups([9, 30], [False, False], SEQ) == [([0, 1], None)]
    assert invariant.prompt_groups([9, 30, 33, 12, 7], [True, False, True, True, False],
                                   SEQ) == [([1, 4], None), ([0], 32), ([2], 64), ([3], 32)]
    assert invariant.prompt_groups([9, 30], None, SEQ) == [([0, 1], None)]


def test_no_prompts_make_no_prefill_groups():
    assert invariant.prompt_groups([], None, SEQ) == []
    assert invariant.prompt_groups([], [], SEQ) == []


class _OnCuda:
    """Stands for a CUDA tensor: rows_matmul reads only its device before handing it on."""
    device = torch.device("cuda")


def test_on_cuda_an_invariant_step_hands_the_matmul_to_the_fixed_tile_kernel(monkeypatch):
    """On CUDA the fixed-shape blocks are fixed_gemm's one tile shape, not torch.mm calls
    (the kernel itself is tested in tests/engine/test_invariant_kernels.py)."""
    from orpheus_svc.engine.model import fixed_gemm
    seen = []

    def spy(*args, **kwargs):
        seen.append((args, kwargs))
        return "fixed_gemm's"

    monkeypatch.setattr(fixed_gemm, "fixed_gemm", spy)
    x, w_t = _OnCuda(), object()
    with invariant.invariant_step():
        assert invariant.rows_matmul(x, w_t) == "fixed_gemm's"
    assert len(seen) == 1
    (args, kwargs), = seen
    assert len(args) == 2 and args[0] is x and args[1] is w_t and kwargs == {}


def _probe_calls(monkeypatch, **kwargs) -> list[tuple]:
    """What the self-check hands rows_matmul, call by call: (x's shape, w_t's shape, the
    places in x of the row it follows (None: the call that sets its bits), dtypes,
    devices, x's sum). The stand-in multiplies nothing (every row gets zeros: it passes)."""
    calls: list[tuple] = []
    probe: dict = {}

    def spy(x, w_t):
        meta = x.device.type == "meta"
        if probe.get("w_t") is not w_t:  # a new weight: its first call is the row alone
            probe.update(w_t=w_t, row=None if meta else x[0].clone())
            at = None
        else:
            at = None if meta else (x == probe["row"]).all(1).nonzero().flatten().tolist()
        calls.append((tuple(x.shape), tuple(w_t.shape), at, (x.dtype, w_t.dtype),
                      (x.device.type, w_t.device.type),
                      None if meta else float(x.double().sum())))
        return torch.zeros((x.shape[0], w_t.shape[1]))

    monkeypatch.setattr(invariant, "rows_matmul", spy)
    assert invariant.gemm_rows_invariant(**kwargs)
    return calls


def test_the_self_check_tries_every_batch_size_and_place_it_names(monkeypatch):
    """gemm_rows_invariant as the invariance probe calls it (a 256-deep weight of 96
    columns, then of one: the stop logit): the row alone, then M = 1 .. 2 x SELF_CHECK_BLOCK
    + 8 and 64 at every place, 257 at the first, middle and last rows and the edges of the
    first and last blocks, each once; in the dtype asked for."""
    block = invariant.SELF_CHECK_BLOCK
    places = {m: [[at] for at in range(m)] for m in (*range(1, 2 * block + 9), 64)}
    places[257] = [[0], [block - 1], [block], [128], [255], [256]]
    want = []
    for cols in (96, 1):
        want.append(((1, 256), (256, cols), None))
        want += [((m, 256), (256, cols), at) for m, ats in places.items() for at in ats]
    calls = _probe_calls(monkeypatch, dtype=torch.float64)
    assert [c[:3] for c in calls] == want
    assert {c[3] for c in calls} == {(torch.float64, torch.float64)}
    assert {c[4] for c in calls} == {("cpu", "cpu")}


def test_the_self_check_builds_its_operands_on_the_device_it_is_asked_for(monkeypatch):
    calls = _probe_calls(monkeypatch, device="meta", k=8, n=4)
    assert calls and {c[4] for c in calls} == {("meta", "meta")}


def test_the_self_check_draws_from_its_own_seeded_generator(monkeypatch):
    """The same seed, the same batches (a failure can be run again); torch's global
    generator neither used nor moved."""
    with torch.random.fork_rng():
        torch.manual_seed(7)
        state = torch.get_rng_state()
        first = _probe_calls(monkeypatch, k=8, n=4, seed=3)
        assert torch.equal(torch.get_rng_state(), state)
        torch.manual_seed(8)
        assert _probe_calls(monkeypatch, k=8, n=4, seed=3) == first
        assert _probe_calls(monkeypatch, k=8, n=4, seed=4) != first
