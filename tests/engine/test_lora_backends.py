"""Rows on different adapters share one step: a mixed batch (base, adapter A, adapter B, A
again) gives each row exactly the tokens it gets alone with its adapter, on the torch
backend and on the graph backend (CPU, no capture), and both backends give the same
tokens for the same seeds. Float64, as tests/engine/test_graph_backend.py: any token that
differs is a bug."""

import dataclasses

import pytest
import torch

from orpheus_svc.engine.graph.backend import GraphBackend
from orpheus_svc.engine.model.llama import SlotLlama
from orpheus_svc.engine.torch.backend import TorchBackend
from orpheus_svc.models.adapters import read_adapter

from .test_graph_backend import _drive, _request
from .tiny import tiny_spec


def _model(weights, paths, graph):
    model = SlotLlama(tiny_spec(), dict(weights), num_slots=6, max_seq_len=160,
                      dtype=torch.float64, spare_slots=1 if graph else 0, max_adapters=3,
                      max_lora_rank=16)
    for index, path in enumerate(paths):
        ad = read_adapter(path, tiny_spec(), 16)
        model.lora.install(index, ad.layers, ad.spec.scaling)
    return model


def _backend(kind, weights, paths):
    if kind == "torch":
        return TorchBackend(_model(weights, paths, False))
    return GraphBackend(_model(weights, paths, True), 6, graphs=False, prefill_rows=16)


def _mixed():
    """base, A, B, A again: different prompts, seeds and sampling per row."""
    reqs = [_request(0, 30), _request(1, 26, 1.0, 0.95, 1.3), _request(2, 22, 0.0),
            _request(3, 30, 0.9, 0.5, 1.0)]
    return [dataclasses.replace(r, adapter=a) for r, a in zip(reqs, (-1, 0, 1, 0))]


@pytest.mark.parametrize("kind", ["torch", "graph"])
def test_a_mixed_batch_gives_each_row_its_tokens_alone(peft_adapters, kind):
    w, paths = peft_adapters
    reqs = _mixed()
    together = _drive(_backend(kind, w, [paths["plain"], paths["rs"]]), reqs)
    for i, req in enumerate(reqs):
        alone = _drive(_backend(kind, w, [paths["plain"], paths["rs"]]), [req])
        assert alone[1] == together[i + 1], (kind, i)
    # each adapter changes what its rows say (so the test could fail)
    base = _drive(_backend(kind, w, [paths["plain"], paths["rs"]]),
                  [dataclasses.replace(r, adapter=-1) for r in reqs])
    assert base[2] != together[2] and base[3] != together[3] and base[4] != together[4]
    assert base[1] == together[1]


def test_the_graph_backend_chooses_the_torch_backends_tokens_with_adapters(peft_adapters):
    w, paths = peft_adapters
    reqs = _mixed()
    eager = _drive(_backend("torch", w, [paths["plain"], paths["rs"]]), reqs)
    assert _drive(_backend("graph", w, [paths["plain"], paths["rs"]]), reqs) == eager


def test_an_adapter_installed_between_steps_needs_no_new_graphs(peft_adapters):
    """The pool is the graph's input: loading, clearing and reloading a slot rewrites its
    buffers in place (the captured step reads the same tensors), and a row on a cleared
    slot is the base model again."""
    w, paths = peft_adapters
    backend = _backend("graph", w, [])
    pool = backend.model.lora
    buffers = [t.data_ptr() for layer in pool.a + pool.b for t in layer.values()]
    req = dataclasses.replace(_request(1, 20), adapter=2)
    base = _drive(backend, [req])
    ad = read_adapter(paths["plain"], tiny_spec(), 16)
    pool.install(2, ad.layers, ad.spec.scaling)
    on = _drive(backend, [req])
    pool.clear(2)
    assert _drive(backend, [req]) == base != on
    assert [t.data_ptr() for layer in pool.a + pool.b for t in layer.values()] == buffers


def test_the_engine_refuses_an_adapter_slot_it_does_not_hold():
    """A request whose slot is outside the backend's pool fails alone at admission
    (engine/intake.py row_problem): it would read another slot's weights or none."""
    from orpheus_svc.engine.intake import row_problem as _row_problem

    req = _request(0, 10)
    for ok in (-1, 0, 1):
        assert _row_problem(dataclasses.replace(req, adapter=ok), 2) is None
    for bad in (2, -2):
        assert _row_problem(dataclasses.replace(req, adapter=bad), 2) == (
            f"adapter slot {bad} is not one of this engine's 2 (engine.max_adapters; -1 is "
            f"the base model)")
    assert _row_problem(dataclasses.replace(req, adapter=0)) is not None  # no pool


def test_the_indexed_path_in_the_graph_step_chooses_the_torch_backends_tokens(peft_adapters):
    """The graph engine on CUDA reads each row's adapter on the device (LoraRows.indexed:
    the gather, or the Triton kernels that equal it, test_lora_kernels.py) instead of
    grouping rows on the host. The whole step on that path, padding rows (slot -1, the
    pool's zero entry) and prompt rows included, chooses the eager backend's tokens."""
    from orpheus_svc.engine.model.lora import LoraRows

    w, paths = peft_adapters
    reqs = _mixed()
    eager = _drive(_backend("torch", w, [paths["plain"], paths["rs"]]), reqs)
    graph = _backend("graph", w, [paths["plain"], paths["rs"]])
    pool, used = graph.model.lora, []

    def indexed(adapter):
        used.append(adapter.clone())
        return LoraRows.indexed(pool, adapter)

    graph.runner._make_lora = indexed
    assert _drive(graph, reqs) == eager
    assert any((a == -1).any() and (a >= 0).any() for a in used)  # mixed steps ran this way
