"""Builds the sim backend (and its codec) from the config: engine/registry.py's entry."""

from __future__ import annotations

import logging
from typing import Callable

from orpheus_svc.engine.registry import BuiltBackend
from orpheus_svc.engine.sim.backend import SimBackend
from orpheus_svc.engine.sim.codec import SimCodec
from orpheus_svc.engine.sim.encode import sim_encode
from orpheus_svc.engine.sim.faults import SimFaults
from orpheus_svc.engine.sim.profiles import KV_BYTES_PER_TOKEN, get_profile
from orpheus_svc.models.adapters import read_configured_adapters

log = logging.getLogger(__name__)


def build_sim_backend(config) -> tuple[SimBackend, Callable[[str], list[int]], SimCodec | None]:
    """(backend, encode, codec) for `engine.backend: sim`; codec is None when
    engine.sim_codec is false (then load the real SNAC as for the torch backend)."""
    from orpheus_svc.config import ConfigError

    e = config.engine
    try:
        profile = get_profile(e.sim_profile)
    except KeyError as exc:
        raise ConfigError(f"engine.sim_profile: {exc.args[0]}") from None
    try:
        faults = SimFaults.parse(getattr(e, "sim_faults", ""))
    except ValueError as exc:
        raise ConfigError(f"engine.sim_faults: {exc}") from None
    adapters = read_configured_adapters(config, None)  # no weights to check shapes against
    backend = SimBackend(profile, num_slots=e.max_sessions, max_seq_len=e.max_seq_len,
                         faults=faults, max_adapters=adapters.capacity,
                         lora_rank=adapters.rank,
                         prefix_pool_tokens=e.prefix_pool_mb * (1 << 20) // KV_BYTES_PER_TOKEN,
                         prefix_budget=f"engine.prefix_pool_mb {e.prefix_pool_mb}")
    backend.adapters = adapters.served
    for slot, (_, weights) in enumerate(adapters.adapters):  # what a real pool holds now
        backend.pool[slot] = (str(weights.path), weights.spec.r)
    backend.adapter_details = adapters.details
    codec = SimCodec(profile, seed=e.seed or 0, faults=bool(faults.codec_error)) \
        if e.sim_codec else None
    backend.codec = codec  # its counters join stats() (the benchmark's sim stats file)
    if faults:
        log.warning("engine.sim_faults is set: injecting faults %s (for tests only)", faults)
    log.warning("engine.backend is sim: no model runs; steps are paced like a %s (%s) by a "
                "roofline model (docs/capacity.md) and the audio is low-level noise",
                profile.gpu, profile.name)
    return backend, sim_encode, codec


def build(config, device=None, dtype=None) -> BuiltBackend:
    """engine/registry.py's entry: the sim backend, its stand-in tokenizer and, unless
    engine.sim_codec is false, its codec."""
    backend, encode, codec = build_sim_backend(config)
    return BuiltBackend(backend, encode, f"sim:{config.engine.sim_profile}", codec=codec,
                        tokenizer="sim", adapters=backend.adapters,
                        adapter_details=backend.adapter_details)
