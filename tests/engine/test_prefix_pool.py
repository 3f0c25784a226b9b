"""The prefix pool (engine/model/prefix_pool.py): a reference voice's prefix computed once
and copied into a slot gives what prefilling the whole prompt gives (float64), and the same
bits as computing the prefix in the slot (the pool off, or unloaded)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from orpheus_svc.core.prefix_book import PrefixPoolFull
from orpheus_svc.core.request import GenerationRequest, SamplingParams
from orpheus_svc.engine.model.llama import SlotLlama
from orpheus_svc.engine.model.prefix_pool import PrefixPool
from orpheus_svc.engine.torch.backend import TorchBackend

from .test_graph_backend import _drive, _weights

# a reference prefix (transcript turn + audio turn) and two texts' turns after it
PREFIX = (128259, 128000, 50, 51, 52, 53, 128009, 128260, 128261, 128257,
          *(128266 + 4096 * (i % 7) + 11 * i for i in range(21)), 128258, 128262)
TURNS = [(128259, 128000, 40, 41, 128009, 128260, 128261, 128257),
         (128259, 128000, 60, 61, 62, 63, 64, 128009, 128260, 128261, 128257)]


def _model(dtype=torch.float64, slots=4, seq=192):
    spec, w = _weights()
    return SlotLlama(spec, w, num_slots=slots, max_seq_len=seq, dtype=dtype)


def _request(i, prefix_len=len(PREFIX), seed=7):
    return GenerationRequest(f"s{i}", 0, PREFIX + TURNS[i % 2], 28,
                             SamplingParams(seed=seed + i), prefix_len=prefix_len)


def test_a_pooled_prefix_gives_the_whole_prompts_last_hidden_state_in_float64():
    model = _model()
    pool = PrefixPool(model, budget_mb=1)
    pool.add(PREFIX)
    whole = model.prefill([0, 1], [PREFIX + TURNS[0], PREFIX + TURNS[1]])
    assert pool.copy_into(PREFIX, 2) and pool.copy_into(PREFIX, 3)
    rest = model.prefill([2, 3], list(TURNS), starts=[len(PREFIX)] * 2)
    assert torch.allclose(rest, whole, rtol=0, atol=1e-10)
    # and the slots' KV, prefix and turn, is the whole prompt's
    n = len(PREFIX) + len(TURNS[0])
    for cache in model.k_cache + model.v_cache:
        assert torch.allclose(cache[2, :, :n], cache[0, :, :n], rtol=0, atol=1e-10)


def test_a_turn_after_a_prefix_shares_a_call_with_a_prompt_from_zero():
    # one call: a long prompt from position 0 pads the turn past the slot's end
    model = _model(seq=192)
    long_prompt = PREFIX[:2] + tuple(range(40, 40 + 168))
    k, v = model.prefix_kv(PREFIX)
    model.write_prefix(1, k, v)
    both = model.prefill([0, 1], [long_prompt, TURNS[0]], starts=[0, len(PREFIX)])
    alone = model.prefill([2], [PREFIX + TURNS[0]])
    assert torch.allclose(both[1], alone[0], rtol=0, atol=1e-10)
    assert torch.allclose(both[0], model.prefill([3], [long_prompt])[0], rtol=0, atol=1e-10)


def test_a_turn_after_a_prefix_attends_to_the_prefix():
    # the same turn after another prefix must come out otherwise: the keys below the
    # start are read, not only the turn's own
    model = _model()
    other = PREFIX[:10] + tuple(t + 1 for t in PREFIX[10:-2]) + PREFIX[-2:]
    for slot, prefix in ((0, PREFIX), (1, other)):
        k, v = model.prefix_kv(prefix)
        model.write_prefix(slot, k, v)
    out = model.prefill([0, 1], [TURNS[0]] * 2, starts=[len(PREFIX)] * 2)
    assert not torch.allclose(out[0], out[1], atol=1e-6)


@pytest.fixture
def blas_by_shape(monkeypatch):
    """Every GEMM outside an invariant step sums in an order that follows its M (the BLAS
    of test_batch_invariance.py's adversary): only a prefix computed batch-invariant in
    the slot can match the pool's."""
    from orpheus_svc.engine.model import invariant, linear

    from .test_batch_invariance import _blas_by_shape
    adversary, real = _blas_by_shape(torch.mm), linear.rows_matmul
    monkeypatch.setattr(linear, "rows_matmul", lambda x, w_t: real(x, w_t)
                        if invariant.in_invariant_step() else adversary(x, w_t))


class _Hidden(TorchBackend):
    """The torch backend, keeping every step's hidden states (the bits tokens come from)."""

    def __init__(self, model, pool):
        super().__init__(model, pool)
        self.hidden = []

    def sample(self, rows, hidden):
        self.hidden.append(hidden.clone())
        return super().sample(rows, hidden)


def test_with_the_pool_without_it_and_after_it_dropped_the_bits_are_the_same(blas_by_shape):
    want = None
    for case in ("pool", "no pool", "dropped"):
        model = _model(torch.float32)
        pool = PrefixPool(model, budget_mb=1) if case != "no pool" else None
        if pool is not None:
            pool.add(PREFIX)
        if case == "dropped":
            pool.drop(PREFIX)
        backend = _Hidden(model, pool)
        got = _drive(backend, [_request(i) for i in range(4)]), backend.hidden
        want = want or got
        assert got[0] == want[0], case
        assert all(torch.equal(a, b) for a, b in zip(got[1], want[1], strict=True)), case
    # a prefix_len of 0 prefills the same prompt whole: float32 may round otherwise, but
    # these prompts still sample the same tokens
    whole = _drive(TorchBackend(_model(torch.float64)),
                   [_request(i, prefix_len=0) for i in range(4)])
    pooled_model = _model(torch.float64)
    pooled = PrefixPool(pooled_model, budget_mb=1)
    pooled.add(PREFIX)
    assert _drive(TorchBackend(pooled_model, pooled), [_request(i) for i in range(4)]) == whole


def test_the_first_session_and_a_later_one_get_the_same_bits():
    model = _model(torch.float32)
    pool = PrefixPool(model, budget_mb=1)
    pool.add(PREFIX)
    backend = TorchBackend(model, pool)
    first = _drive(backend, [_request(0)])
    # slots reused, other sessions before it
    _drive(backend, [_request(1, seed=99), _request(3, seed=5)])
    assert _drive(backend, [_request(0)]) == first


def test_a_full_pool_refuses_a_prefix_and_changes_nothing():
    model = _model()
    per_token = model.kv_bytes_per_token
    pool = PrefixPool(model, budget_mb=1)
    assert pool.tokens == (1 << 20) // per_token
    pool.add(PREFIX)
    big = tuple(range(1000, 1000 + pool.tokens - len(PREFIX) + 1))
    with pytest.raises(PrefixPoolFull, match=r"engine.prefix_pool_mb 1"):
        pool.book.place(big)
    assert len(pool.book) == 1 and big not in pool.book and PREFIX in pool.book


def test_a_prefix_that_fails_to_compute_leaves_the_pool_as_it_was(monkeypatch):
    model = _model()
    pool = PrefixPool(model, budget_mb=1)

    def broken(ids):
        raise RuntimeError("device error")
    monkeypatch.setattr(model, "prefix_kv", broken)
    with pytest.raises(RuntimeError, match="device error"):
        pool.add(PREFIX)
    assert len(pool.book) == 0 and pool.book.used == 0


def test_a_request_names_its_prefix_only_by_its_prompt():
    req = _request(0)
    assert req.prefill_tokens == len(req.prompt_ids)  # not known to be pooled
    cached = dataclasses.replace(req, prefix_cached=True)
    assert cached.prefill_tokens == len(TURNS[0])


def _graph(pool_on: bool, dtype=torch.float64):
    from orpheus_svc.engine.graph.backend import GraphBackend
    spec, w = _weights()
    model = SlotLlama(spec, w, num_slots=4, max_seq_len=192, dtype=dtype, spare_slots=1)
    pool = PrefixPool(model, budget_mb=1) if pool_on else None
    backend = GraphBackend(model, 4, graphs=False, prefixes=pool)
    if pool_on:
        backend.add_prefix(PREFIX)
    return backend


def test_the_graph_engines_rows_start_after_a_pooled_prefix():
    # float64: the pooled prefix and the rows after it sample what the whole prompt as
    # rows of the step samples; with the pool off the prefix is computed in the slot
    whole = _drive(_graph(False), [_request(i, prefix_len=0) for i in range(4)])
    pooled = _graph(True)
    assert pooled.capabilities.prefix_pool_tokens > 0 and pooled.holds_prefix(PREFIX)
    assert _drive(pooled, [_request(i) for i in range(4)]) == whole
    assert _drive(_graph(False), [_request(i) for i in range(4)]) == whole


def test_the_graph_engine_samples_the_same_with_the_pool_and_without(blas_by_shape):
    # the token choice is inside the step, so tokens are what can be compared here
    runs = [_drive(_graph(pool_on, torch.float32), [_request(i) for i in range(3)])
            for pool_on in (True, False)]
    assert runs[0] == runs[1]


def test_the_graph_engine_computes_a_missing_prefix_as_the_pool_does(blas_by_shape):
    # in a seeded step, the prefix a pool does not hold is computed in the slot with the
    # pool's bits (its KV compared directly: the step's token choice hides small moves)
    from types import SimpleNamespace
    row = SimpleNamespace(slot=2, request=_request(0))
    kv = []
    for pool_on in (True, False):
        backend = _graph(pool_on, torch.float32)
        assert backend._place_prefix(row, seeded=True) == len(PREFIX)
        kv.append([c[2, :, :len(PREFIX)].clone() for c in backend.model.k_cache])
    assert all(torch.equal(a, b) for a, b in zip(*kv))
