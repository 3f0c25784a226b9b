"""The token choice kernel (engine/graph/choose.py) in Triton's interpreter, against
engine/model/sampling.py's choose_columns run in float64 on the same logits and uniforms.

Every row is built for what it checks: greedy rows whose argmax the penalty moves (a seen
positive logit divided, a seen negative one multiplied), the stop id allowed and forbidden,
top_p 1 and tiny, top_p a hair above and below the exclusive prefix mass of a chosen
element with a uniform that picks the nucleus's last element, rows that sample nothing,
ties (the kernel's documented order), and plain rows at the default settings. The uniform
is checked bit for bit against splitmix_uniform_t, and the slot state (last ids, seen
marks) as a whole. The interpreter runs in a subprocess (TRITON_INTERPRET must be set
before the kernel is compiled): the functions named _in_* run there."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from orpheus_svc.core.tokens import (AUDIO_BASE, CODES_PER_POSITION, END_OF_SPEECH_ID,
                                     FRAME_TOKENS)
from orpheus_svc.engine.model.sampling import (apply_repetition_penalty, choose_columns,
                                               columns_to_ids, splitmix_uniform)

ROOT = Path(__file__).resolve().parents[2]
H = 16
SENTINEL = 7777  # the last id of a slot whose row samples nothing


def _interpret(call: str) -> dict:
    """Run `call` (one of this module's _in_* functions) under Triton's interpreter; what it
    prints last, a dict literal."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    script = f"from tests.engine import test_choose_kernel as t; print(t.{call})"
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=300, cwd=str(ROOT))
    assert out.returncode == 0, out.stderr[-3000:]
    return eval(out.stdout.strip().splitlines()[-1])


def _counter_for(seed: int, lo: float, hi: float) -> int:
    """A counter whose uniform for `seed` lies in [lo, hi)."""
    counters = np.arange(1 << 20, dtype=np.uint64)
    u = splitmix_uniform(np.full(counters.shape, seed, np.uint64), counters)
    hit = np.nonzero((u >= lo) & (u < hi))[0]
    assert len(hit), (lo, hi)
    return int(hit[0])


def _softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max())
    return e / e.sum()


class _Case:
    """Rows of one kernel launch, one slot each (slots shuffled), in float64."""

    def __init__(self, seed: int = 7) -> None:
        self.rng = np.random.default_rng(seed)
        self.rows: list[dict] = []

    def add(self, kind, logits=None, stop=0.0, stop_ok=1, seen=None, temp=0.6, top_p=0.8,
            pen=1.1, u=(0.0, 1.0), sample=1, fpos=None):
        rng = self.rng
        self.rows.append(dict(
            kind=kind, logits=rng.standard_normal(CODES_PER_POSITION) * 3 if logits is None
            else np.asarray(logits, np.float64), stop=float(stop), stop_ok=stop_ok,
            seen=rng.random(CODES_PER_POSITION) < 0.3 if seen is None else seen, temp=temp,
            top_p=top_p, pen=pen, u=u, sample=sample,
            fpos=int(rng.integers(FRAME_TOKENS)) if fpos is None else fpos))

    def tensors(self):
        """The kernel's inputs (dict of tensors) for the rows added."""
        rng, rows = self.rng, self.rows
        b = len(rows)
        n = b + 2  # two slots no row uses, and the dummy
        slots = rng.permutation(b + 1)[:b]
        seeds = rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64)
        audio = rng.standard_normal((b, FRAME_TOKENS * CODES_PER_POSITION)) * 3
        seen = rng.random((n, FRAME_TOKENS, CODES_PER_POSITION)) < 0.3
        params = np.ones((3, n), np.float32)
        hidden = np.zeros((b, H))
        stop_w = np.concatenate([[1.0], rng.standard_normal(H - 1)])
        counter = np.zeros(b, np.int64)
        for i, r in enumerate(rows):
            s, f = slots[i], r["fpos"]
            audio[i, f * CODES_PER_POSITION:(f + 1) * CODES_PER_POSITION] = r["logits"]
            seen[s, f] = r["seen"]
            params[:, s] = r["temp"], r["top_p"], r["pen"]
            hidden[i, 0] = r["stop"]  # stop logit = hidden . stop_w = r["stop"], exactly
            counter[i] = _counter_for(int(seeds[s].view(np.uint64)), *r["u"])
        last = np.full(n, AUDIO_BASE, np.int64)
        last[slots] = SENTINEL
        t = torch.from_numpy
        return dict(hidden=t(hidden), stop_row=t(stop_w), audio=t(audio), seen=t(seen),
                    params=t(params), seeds=t(seeds), last_ids=t(last), slots=t(slots),
                    fpos=t(np.array([r["fpos"] for r in rows])),
                    stop_ok=t(np.array([r["stop_ok"] for r in rows])), counter=t(counter),
                    sample=t(np.array([r["sample"] for r in rows])))


def _reference(x: dict) -> torch.Tensor:
    """The ids choose_columns picks in float64 for the kernel inputs `x` (every row)."""
    b = x["slots"].shape[0]
    from orpheus_svc.engine.model.sampling import splitmix_uniform_t
    slots, fpos = x["slots"], x["fpos"]
    logits = torch.cat([x["audio"].view(b, FRAME_TOKENS, CODES_PER_POSITION)[
        torch.arange(b), fpos], (x["hidden"] @ x["stop_row"])[:, None]], dim=1)
    logits[:, -1].masked_fill_(x["stop_ok"] == 0, float("-inf"))
    params = x["params"][:, slots]
    logits = apply_repetition_penalty(logits, x["seen"][slots, fpos], params[2])
    u = splitmix_uniform_t(x["seeds"][slots], x["counter"])
    return columns_to_ids(choose_columns(logits, params[0], params[1], u), fpos)


def _edge_rows(case: _Case, k: int, top_p: float = 0.8) -> None:
    """Two rows whose k most likely columns hold 1e-9 less and 1e-9 more than top_p (a
    float32, as the slot state holds it), the k-th column thus just inside the nucleus and
    just outside, with a uniform that picks the nucleus's last column: the first picks the
    k-th column, the second the one before. (Temperature 1, nothing seen: the logits are
    the probabilities' own; the top k are raised by the one shift that gives the mass.)"""
    logits = case.rng.standard_normal(CODES_PER_POSITION) * 2
    top = np.argsort(-logits)[:k]
    rest = np.ones(CODES_PER_POSITION, bool)
    rest[top] = False
    top_p = float(np.float32(top_p))
    for mass, last in ((top_p - 1e-9, k), (top_p + 1e-9, k - 1)):
        e = np.exp(logits - logits.max())
        shift = np.log(mass * e[rest].sum() / (e[top].sum() * (1 - mass)))
        row = logits.copy()
        row[top] += shift
        p = np.sort(_softmax(row))[::-1]
        kept = p[:last + 1].sum()
        lo = 1 - 0.5 * p[last] / kept  # past every prefix but the last kept column's
        case.add(f"edge{last}", row, stop_ok=0, seen=np.zeros(CODES_PER_POSITION, bool),
                 temp=1.0, top_p=top_p, u=(lo, 1.0))


def build_case() -> _Case:
    case = _Case()
    rng = case.rng
    for _ in range(6):
        case.add("default", stop=rng.standard_normal() * 3, stop_ok=int(rng.integers(2)))
    base = rng.standard_normal(CODES_PER_POSITION)
    none = np.zeros(CODES_PER_POSITION, bool)
    # greedy: the penalty moves the argmax (a seen positive logit divided, a seen negative
    # one multiplied), the stop id allowed and forbidden, flat rows a sampler would miss
    pos = base.copy()
    pos[[11, 22]] = 10.0, 8.0
    seen = none.copy()
    seen[11] = True
    case.add("greedy_pos", pos, stop=-50, seen=seen, temp=0.0, pen=1.5)
    neg = -5 - np.abs(base)
    neg[[33, 44]] = -1.0, -1.2
    seen = none.copy()
    seen[33] = True
    case.add("greedy_neg", neg, stop=-50, seen=seen, temp=0.0, pen=1.5)
    case.add("greedy_stop", stop=60, stop_ok=1, temp=0.0)
    case.add("greedy_no_stop", stop=60, stop_ok=0, temp=0.0)
    for _ in range(3):
        case.add("greedy_flat", rng.standard_normal(CODES_PER_POSITION) * 0.3, temp=0.0,
                 stop_ok=0, u=(0.2, 0.8))
    # sampling with a stop logit far above the rest: allowed, it is the token
    case.add("stop", stop=60, stop_ok=1)
    case.add("no_stop", stop=60, stop_ok=0)
    # top_p 1 (the whole row; a uniform near 1 reaches far into the tail), top_p tiny
    case.add("top_p_1", temp=1.3, top_p=1.0, u=(0.999, 1.0))
    case.add("top_p_1", temp=1.3, top_p=1.0)
    for _ in range(2):
        case.add("top_p_tiny", rng.standard_normal(CODES_PER_POSITION), temp=1.0,
                 top_p=1e-6, stop_ok=0, u=(0.5, 1.0))
    for k in (1, 6):
        _edge_rows(case, k)
    # rows that sample nothing: their slots keep their state
    for _ in range(3):
        case.add("no_sample", stop=60, temp=0.0, sample=0)
    # ties, the kernel's order: descending probability, then ascending column
    tie = base.copy()
    tie[[3000, 100]] = 20.0
    case.add("tie_greedy", tie, stop_ok=0, seen=none, temp=0.0)
    flat = np.zeros(CODES_PER_POSITION)
    case.add("tie_all", flat, stop_ok=0, seen=none, temp=1.0, top_p=1.0)
    case.add("tie_half", flat, stop_ok=0, seen=none, temp=1.0, top_p=0.5)
    return case


def _tie_expectation(kind: str, u: float) -> int:
    """The column the kernel's tie rule gives the tie rows (choose.py docstring)."""
    if kind == "tie_greedy":
        return 100
    kept = CODES_PER_POSITION if kind == "tie_all" else CODES_PER_POSITION // 2
    return int(np.ceil(u * kept)) - 1


def _in_parity(dtype: str = "float64") -> dict:
    """The kernel's ids, slot state and uniforms against the reference, per row kind."""
    from orpheus_svc.engine.graph.choose import triton_choose
    from orpheus_svc.engine.model.sampling import splitmix_uniform_t
    case = build_case()
    x = case.tensors()
    dt = getattr(torch, dtype)
    ref = _reference(x)
    run = dict(x)
    for k in ("hidden", "stop_row", "audio"):
        run[k] = x[k].to(dt)
    run["seen"], run["last_ids"] = x["seen"].clone(), x["last_ids"].clone()
    u_out = torch.full((len(case.rows),), float("nan"), dtype=dt)
    ids = triton_choose(**run, u_out=u_out)
    u_ref = splitmix_uniform_t(x["seeds"][x["slots"]], x["counter"])
    bad, wrong_u = [], []
    for i, r in enumerate(case.rows):
        if r["sample"] == 0:
            continue
        want = int(ref[i])
        if r["kind"].startswith("tie"):
            want = AUDIO_BASE + r["fpos"] * CODES_PER_POSITION + _tie_expectation(
                r["kind"], float(u_ref[i]))
        if int(ids[i]) != want:
            bad.append(f"{r['kind']}:{i}")
        if r["temp"] > 0 and float(u_out[i]) != float(u_ref[i].to(dt)):
            wrong_u.append(i)
    # the slot state: each sampling row's last id and seen mark (not for the stop id);
    # nothing else moves
    sample = x["sample"] != 0
    slots, fpos = x["slots"], x["fpos"]
    want_last = x["last_ids"].clone()
    want_last[slots[sample]] = ids[sample]
    want_seen = x["seen"].clone()
    col = ids - AUDIO_BASE - fpos * CODES_PER_POSITION
    inside = (col >= 0) & (col < CODES_PER_POSITION)
    audio = sample & inside
    want_seen[slots[audio], fpos[audio], col[audio]] = True
    return {"bad": bad, "wrong_u": wrong_u,
            "last_ids": bool(torch.equal(run["last_ids"], want_last)),
            "seen": bool(torch.equal(run["seen"], want_seen)),
            "kinds": sorted({r["kind"] for r in case.rows}),
            "stops": int((ids == END_OF_SPEECH_ID).sum()),
            "cols_ok": bool(((ids == END_OF_SPEECH_ID) | inside)[sample].all())}


def test_the_kernel_picks_choose_columns_tokens_for_every_kind_of_row_in_float64():
    got = _interpret("_in_parity()")
    assert got["bad"] == [], got
    assert got["wrong_u"] == []  # the in-kernel SplitMix64 is splitmix_uniform_t, bit for bit
    assert got["last_ids"] and got["seen"]
    assert got["cols_ok"] and got["stops"] == 2  # greedy_stop and stop
    assert {"edge1", "edge0", "edge6", "edge5", "no_sample", "tie_half"} <= set(got["kinds"])


def test_the_reference_needs_the_rows_it_is_checked_on():
    """The case's rows do what they are built for under choose_columns itself: the penalty
    moves the greedy argmax, the top_p edges keep one column more or less, the stop logit
    wins where allowed (a row that proved nothing would let a wrong kernel pass)."""
    case = build_case()
    x = case.tensors()
    ids = _reference(x)
    col = {}
    for i, r in enumerate(case.rows):
        c = int(ids[i]) - AUDIO_BASE - r["fpos"] * CODES_PER_POSITION
        col.setdefault(r["kind"], []).append(END_OF_SPEECH_ID if int(ids[i]) == END_OF_SPEECH_ID
                                             else c)
    assert col["greedy_pos"] == [22] and col["greedy_neg"] == [44]
    assert col["greedy_stop"] == [END_OF_SPEECH_ID] and col["stop"] == [END_OF_SPEECH_ID]
    assert END_OF_SPEECH_ID not in col["greedy_no_stop"] + col["no_stop"]
    for kind, k in (("edge1", 1), ("edge0", 0), ("edge6", 6), ("edge5", 5)):
        r = next(r for r in case.rows if r["kind"] == kind)
        order = np.argsort(-r["logits"])
        assert col[kind] == [int(order[k])], kind
    flat = [r for r in case.rows if r["kind"] == "greedy_flat"]
    assert all(int(np.argmax(r["logits"])) == c for r, c in zip(flat, col["greedy_flat"]))


def _in_float32() -> dict:
    """The kernel in float32 (as on the card) against TorchChoice on the same rows, and the
    start-up check on a small model's head: it passes, and refuses a kernel that picks
    other tokens."""
    from types import SimpleNamespace

    from orpheus_svc.engine.graph import choose
    case = build_case()
    x = case.tensors()
    b = len(case.rows)
    lm_head = torch.zeros((END_OF_SPEECH_ID + 1, H), dtype=torch.float32)
    lm_head[END_OF_SPEECH_ID] = x["stop_row"].float()
    state = SimpleNamespace(seen=x["seen"].clone(), params=x["params"], seeds=x["seeds"],
                            last_ids=x["last_ids"].clone(), dummy=b + 1,
                            true=torch.ones((), dtype=torch.bool))
    ref_state = SimpleNamespace(**{**vars(state), "seen": x["seen"].clone(),
                                   "last_ids": x["last_ids"].clone()})
    args = (x["hidden"].float(), lm_head, x["audio"].float())
    rows = (x["slots"], x["fpos"], x["stop_ok"], x["counter"], x["sample"])
    got = choose.TritonChoice().choose(*args, state, *rows)
    ref = choose.TorchChoice.choose(*args, ref_state, *rows)
    # within float32 rounding of a boundary the two may differ: the edge rows' margins are
    # below it, and rows that sample nothing have meaningless ids
    skip = ("edge", "no_sample", "tie_all", "tie_half")
    bad = [f"{r['kind']}:{i}" for i, r in enumerate(case.rows)
           if not r["kind"].startswith(skip) and int(got[i]) != int(ref[i])]
    check = choose.triton_choice(lm_head, rows=12) is not None
    real = choose.triton_choose
    choose.triton_choose = lambda *a, **k: real(*a, **k) + 1
    try:
        choose.triton_choice(lm_head, rows=12)
        refused = False
    except RuntimeError:
        refused = True
    finally:
        choose.triton_choose = real
    return {"bad": bad, "check": check, "refused": refused}


def test_the_kernel_in_float32_picks_the_torch_tokens_and_passes_its_start_up_check():
    got = _interpret("_in_float32()")
    assert got["bad"] == [], got
    assert got["check"] and got["refused"]


def _in_backend() -> dict:
    """Tokens of the graph backend with the kernel choosing, and of the eager backend."""
    from tests.engine.test_graph_backend import _drive, _graph, _model, _request
    from orpheus_svc.engine.graph.choose import TritonChoice
    from orpheus_svc.engine.torch.backend import TorchBackend
    reqs = [_request(0, 8), _request(1, 6, 0.0), _request(2, 6, 1.0, 0.95, 1.3)]
    eager = _drive(TorchBackend(_model(False)), reqs)
    graph = _graph(max_batch=4)  # torch's fused operations, the kernel's choice
    graph.runner.choice = TritonChoice()
    return {"same": _drive(graph, reqs) == eager,
            "lengths": sorted(len(t) for t in eager.values())}


def test_the_graph_backend_with_the_kernel_chooses_the_eager_tokens():
    got = _interpret("_in_backend()")
    assert got["same"] and got["lengths"] == [6, 6, 8]


def _in_runner() -> dict:
    """The choice the runner makes at start-up with each kind of fused operations."""
    from tests.engine.test_graph_backend import _model
    from orpheus_svc.engine.graph.backend import GraphBackend
    return {fused: GraphBackend(_model(True), 4, graphs=False, fused=fused).runner.choice.name
            for fused in ("torch", "triton")}


def test_the_runner_chooses_with_the_kernel_where_the_fused_operations_are_tritons():
    assert _interpret("_in_runner()") == {"torch": "torch", "triton": "triton"}
