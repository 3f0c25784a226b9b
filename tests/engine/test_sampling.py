import numpy as np
import torch
from hypothesis import given, settings, strategies as st

from orpheus_svc.core.grammar import FrameParser, position_id_range
from orpheus_svc.core.tokens import END_OF_SPEECH_ID
from orpheus_svc.engine.model.sampling import (
    RowParams,
    SeenAudio,
    apply_repetition_penalty,
    constrained_logits,
    sample_rows,
    splitmix_uniform,
)

VOCAB, HIDDEN = 156940, 8


def _params(positions, stop, temp=0.6, top_p=0.8, seeds=None, counters=None):
    b = len(positions)
    return RowParams(positions=list(positions), stop_allowed=list(stop), temperature=[temp] * b,
                     top_p=[top_p] * b, repetition_penalty=[1.1] * b,
                     seeds=seeds or list(range(b)), counters=counters or [0] * b)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1), st.lists(st.integers(0, 6), min_size=1, max_size=12),
       st.floats(0.0, 2.0), st.floats(0.05, 1.0), st.booleans())
def test_constrained_sampling_never_emits_an_illegal_token(seed, positions, temp, top_p, spiky):
    g = torch.Generator().manual_seed(seed)
    head = torch.randn(VOCAB, HIDDEN, generator=g)
    if spiky:  # make illegal ids the most likely ones: they still must never come out
        head[:128266] *= 50
        head[END_OF_SPEECH_ID] *= 50
    hidden = torch.randn(len(positions), HIDDEN, generator=g)
    stop = [p == 0 and (seed + i) % 2 == 0 for i, p in enumerate(positions)]
    logits = constrained_logits(hidden, head, positions, stop)
    toks = sample_rows(logits, _params(positions, stop, temp, top_p, seeds=[seed + i for i in range(len(positions))]))
    for tok, p, s in zip(toks, positions, stop):
        lo, hi = position_id_range(p)
        assert lo <= tok < hi or (tok == END_OF_SPEECH_ID and s)


def test_sampled_stream_always_parses_into_frames():
    g = torch.Generator().manual_seed(3)
    head = torch.randn(VOCAB, HIDDEN, generator=g)
    head[END_OF_SPEECH_ID] *= 30  # stop is very likely wherever it is legal
    parser, n = FrameParser(), 0
    while not parser.stopped:  # the parser's state is the grammar state a row carries
        p, stop = parser.position, parser.stop_allowed
        logits = constrained_logits(torch.randn(1, HIDDEN, generator=g), head, [p], [stop])
        parser.feed(sample_rows(logits, _params([p], [stop], counters=[n])))
        n += 1
    assert n % 7 == 1 and n > 1  # stopped right after a whole frame, never before the first


def test_restricted_head_equals_the_matching_rows_of_the_full_head():
    g = torch.Generator().manual_seed(1)
    head, hidden = torch.randn(VOCAB, HIDDEN, generator=g), torch.randn(3, HIDDEN, generator=g)
    full = hidden @ head.T
    logits = constrained_logits(hidden, head, [0, 3, 6], [True, False, False])
    for row, p in enumerate([0, 3, 6]):
        lo, hi = position_id_range(p)
        torch.testing.assert_close(logits[row, :4096], full[row, lo:hi])
    torch.testing.assert_close(logits[0, 4096], full[0, END_OF_SPEECH_ID])
    assert torch.isinf(logits[1, 4096]) and logits[1, 4096] < 0


def test_same_seed_and_counter_give_same_token_whatever_the_batch():
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(4, 4097, generator=g)
    together = sample_rows(logits.clone(), _params([1, 1, 1, 1], [False] * 4, seeds=[9, 8, 7, 6], counters=[4, 4, 4, 4]))
    alone = [sample_rows(logits[i:i + 1].clone(), _params([1], [False], seeds=[s], counters=[4]))[0]
             for i, s in enumerate([9, 8, 7, 6])]
    assert together == alone


def test_top_p_restricts_to_the_nucleus_and_greedy_takes_argmax():
    logits = torch.full((1, 4097), -1e9)
    logits[0, 10], logits[0, 20], logits[0, 30] = 5.0, 4.0, 0.0
    seen = set()
    for c in range(200):
        seen.update(sample_rows(logits.clone(), _params([0], [False], temp=1.0, top_p=0.5, counters=[c])))
    assert seen == {128266 + 10}
    assert sample_rows(logits.clone(), _params([2], [False], temp=0.0))[0] == 128266 + 2 * 4096 + 10


def test_sampling_follows_the_distribution():
    logits = torch.full((1, 4097), -1e9)
    logits[0, 1], logits[0, 2] = 0.0, float(np.log(3.0))  # 1:3 odds at temperature 1
    draws = [sample_rows(logits.clone(), _params([0], [False], temp=1.0, top_p=1.0, counters=[c]))[0]
             for c in range(2000)]
    share = draws.count(128266 + 2) / len(draws)
    assert 0.70 < share < 0.80


def test_repetition_penalty_lowers_seen_ids_only():
    logits = torch.tensor([[2.0, -2.0, 2.0] + [0.0] * 4094])
    seen = torch.zeros(1, 4096, dtype=torch.bool)
    seen[0, :2] = True
    out = apply_repetition_penalty(logits.clone(), seen, torch.tensor([2.0]))
    assert out[0, :3].tolist() == [1.0, -4.0, 2.0]


def test_seen_audio_marks_per_slot_and_position_and_resets():
    seen = SeenAudio(2, torch.device("cpu"))
    seen.mark([1], [128266 + 4096 * 3 + 17])
    assert seen.rows([1], [3])[0, 17] and not seen.rows([0], [3])[0, 17]
    assert not seen.rows([1], [2])[0, 17]
    seen.reset([1])
    assert not seen.seen.any()


def test_uniforms_are_in_range_and_decorrelated():
    u = splitmix_uniform(np.arange(1000, dtype=np.uint64), np.zeros(1000, dtype=np.uint64))
    assert (u >= 0).all() and (u < 1).all() and abs(u.mean() - 0.5) < 0.05


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.floats(0.05, 1.0), st.floats(0.1, 3.0))
def test_candidate_shortcut_samples_exactly_like_the_full_sort(seed, top_p, scale):
    import orpheus_svc.engine.model.sampling as S
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(6, 4097, generator=g) * scale
    params = _params([3] * 6, [False] * 6, temp=1.0, top_p=top_p, counters=list(range(6)))
    fast = sample_rows(logits.clone(), params)
    saved = S.NUCLEUS_CANDIDATES
    S.NUCLEUS_CANDIDATES = 10**6  # force the full sort
    try:
        full = sample_rows(logits.clone(), params)
    finally:
        S.NUCLEUS_CANDIDATES = saved
    assert fast == full


def test_the_device_uniforms_are_the_host_uniforms_bit_for_bit():
    """splitmix_uniform_t (int64 tensors, no host sync: the graph engine's) against the
    numpy uint64 original, over the whole 64-bit range of seeds and counters."""
    from orpheus_svc.engine.model.sampling import int64_bits, splitmix_uniform_t
    rng = np.random.default_rng(0)
    seeds = rng.integers(0, 2**64, size=20000, dtype=np.uint64)
    counters = rng.integers(0, 2**64, size=20000, dtype=np.uint64)
    seeds[:3], counters[:3] = [0, 2**64 - 1, 2**63], [0, 2**64 - 1, 1]
    host = splitmix_uniform(seeds, counters)
    dev = splitmix_uniform_t(torch.from_numpy(int64_bits(seeds)),
                             torch.from_numpy(int64_bits(counters))).numpy()
    assert dev.dtype == np.float64 and np.array_equal(dev, host)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1), st.floats(0.05, 1.0), st.floats(0.05, 3.0))
def test_branch_free_columns_are_the_columns(seed, top_p, scale):
    """choose_columns without asking the host which rows need the full sort (what a CUDA
    graph holds) picks the same columns, also when some rows' nucleus is past the top 128."""
    from orpheus_svc.engine.model.sampling import choose_columns
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(6, 4097, generator=g) * scale
    logits[0] = 0.0  # flat: its nucleus needs the full sort
    temp = torch.tensor([1.0, 0.6, 0.0, 1.3, 0.9, 0.2])
    u = torch.rand(6, generator=g)
    top = torch.full((6,), top_p)
    assert torch.equal(choose_columns(logits, temp, top, u),
                       choose_columns(logits, temp, top, u, branch_free=True))
