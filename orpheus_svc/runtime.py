"""Builds the running engine from a Config: checkpoints, backend, flusher, EngineLoop.

Used by both `orpheus-svc serve` and `orpheus-svc synth`, so the offline path and the
server run exactly the same pipeline. `Runtime.open(request)` starts one generation and
returns its GenerationHandle (engine/handle.py): the one way in for sessions, offline
synth and warm-up. With no model configured it loads the seeded demo
checkpoint (random weights of the real architecture: it streams audio, not speech) and
says so.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from orpheus_svc.audio.codec import load_snac
from orpheus_svc.audio.nullcodec import NullCodec
from orpheus_svc.audio.flusher import Flusher
from orpheus_svc.config import Config, ConfigError
from orpheus_svc.core.adapters import AdapterCatalog, AdapterLease, AdapterRefusal
from orpheus_svc.core.events import AudioEvent, EngineEvent, Rejected
from orpheus_svc.core.prompt import build_prompt, expected_audio_seconds, max_tokens_for_text
from orpheus_svc.core.reference import (
    ReferenceVoice,
    ReferenceVoiceError,
    check_room,
    reference_prefix,
    text_turn,
    with_reference_voices,
)
from orpheus_svc.core.prefix_book import PrefixPoolFull
from orpheus_svc.core.reference_catalog import (
    ReferenceCatalog,
    ReferenceEntry,
    ReferenceLease,
    ReferenceRefusal,
)
from orpheus_svc.core.status import Status
from orpheus_svc.core.request import GenerationRequest, SamplingParams
from orpheus_svc.core.tokens import FRAME_SECONDS
from orpheus_svc.core.voices import VoiceRegistry, english_registry
from orpheus_svc.engine.collector import CollectorPacer
from orpheus_svc.engine.handle import EventRouter, GenerationHandle
from orpheus_svc.engine.loop import EngineLoop
from orpheus_svc.engine.registry import BuiltBackend, build_backend
from orpheus_svc.models.reference_voices import ReferenceStartupError, load_reference_voices

log = logging.getLogger(__name__)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"model.device is {name!r} but CUDA is not available on this machine "
                          f"(torch {torch.__version__}); use cpu or auto")
    return device


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, name)


# FrontRuntime.request's `reference` when the caller holds no lease: the voice's name says.
BY_NAME: Any = object()


@dataclass
class FrontRuntime:
    """What sessions, GetStatus and ListVoices use: prompts (the tokenizer), the voices, and
    `open` on an engine. The single topology's Runtime is one with the engine in-process;
    a split topology's front-end (orpheus_svc/ipc/frontend.py) has one whose engine is the
    engine process, reached over ZeroMQ."""

    config: Config
    engine: Any  # EngineLoop, or any Engine (engine/handle.py) with stats() and settings
    router: EventRouter
    encode: Callable[[str], list[int]]
    model_name: str
    is_demo: bool
    device: Any
    # The served model's voices (models/voices.py): validation, ListVoices, the default.
    voices: VoiceRegistry = field(default_factory=english_registry)
    # Why the engine cannot honour a client's seed (BackendCapabilities.seed_refusal); None:
    # it can, or (a split front-end) this side does not know and the backend refuses it.
    seed_refusal: str | None = None
    # LoRA adapters (docs/lora.md): name -> its slot in the engine's pool. `voices` holds
    # their voices too, each Voice naming its adapter; a session picks one by voice name.
    # Both are the adapter catalog's published snapshots (`catalog`, core/adapters.py):
    # given at construction (what start-up serves), then replaced by the catalog alone,
    # on the asyncio loop that owns it, when an adapter is loaded or unloaded.
    adapters: dict[str, int] = field(default_factory=dict)
    # Which adapter holds which pool slot and how many sessions run on each (the admin
    # service loads and unloads through it); None: made from `voices` and `adapters`.
    catalog: AdapterCatalog | None = None
    # Reference voices (core/reference.py, docs/voices.md): casefolded name -> the voice, whose
    # clip and transcript go in front of every prompt spoken in it. `voices` lists them too
    # (Voice.reference), among the base model's voices: the base model speaks them. Given at
    # construction (model.reference_voices: `voices` lists them already), then the reference
    # catalog's published snapshot (`reference_catalog`), replaced on the asyncio loop when
    # one is added or removed (add_reference_voice, remove_reference_voice).
    references: dict[str, ReferenceVoice] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.catalog is None:
            self.catalog = AdapterCatalog.from_registry(self.voices, self.adapters)
        # the base model's own voices: what the reference voices are listed after
        base = self.catalog.base
        self._model_voices = VoiceRegistry(tuple(v for v in base.voices if not v.reference),
                                           base.default, base.source)
        self.reference_catalog = ReferenceCatalog(on_free=self._release_reference)
        for ref in self.references.values():  # model.reference_voices, listed from start-up
            self.reference_catalog.add(ref, prefix_tokens=len(reference_prefix(self.encode, ref)))
        self.reference_catalog.on_change = self._publish_references
        self.catalog.held_elsewhere = self.reference_catalog.holder
        self.catalog.on_change = self._publish_adapters
        self._publish_adapters()

    def _publish_adapters(self) -> None:
        self.voices, self.adapters = self.catalog.voices, dict(self.catalog.slots)

    def _publish_references(self) -> None:
        self.references = dict(self.reference_catalog.references)
        self.catalog.set_base(with_reference_voices(self._model_voices,
                                                    self.reference_catalog.loaded()))

    # -- reference voices: registration ----------------------------------------------------
    #
    # add_reference_voice / remove_reference_voice are the one way a reference voice enters
    # or leaves the served voices while serving (the admin service calls them); what the
    # engine keeps for a voice (a KV prefix pool: the reference's prefix prefilled once,
    # copied into each session's slot) hooks in at `_hold_reference` (made before the voice
    # is listed; a full pool refuses there) and `_release_reference` (freed once the voice
    # is unloaded and its last session ended). Start-up voices (model.reference_voices) are
    # listed at construction, before the engine runs, through the same catalog (`add`).

    def voice_owner(self, name: str) -> str | None:
        """Who has voice name `name` (any case): the base model, an adapter (loading or
        loaded) or a reference voice (loading or loaded); None when it is free."""
        return self.reference_catalog.holder(name) or self.catalog.owner_of(name)

    async def add_reference_voice(self, ref: ReferenceVoice, clip: str = "") -> ReferenceEntry:
        """Register `ref` (read from `clip`, "" for bytes) and list it: ListVoices and every
        edge speak it when this returns. In order: the name free among every voice
        (ALREADY_EXISTS, field "name"), room in a slot for the prefix and a segment
        (check_room: INVALID_ARGUMENT, field "clip"), the name held (LOADING), what the
        engine keeps for it made (`_hold_reference`), then LOADED. ReferenceRefusal
        otherwise, with nothing registered. The asyncio loop only (the catalogs' owner)."""
        owner = self.voice_owner(ref.name)
        if owner is not None:
            raise ReferenceRefusal(Status.ALREADY_EXISTS, (
                f"{ref.name!r} is already {owner}; name the reference voice differently"),
                field="name")
        try:
            check_room(self.encode, ref, self.engine.capabilities.max_seq_len)
        except ReferenceVoiceError as exc:
            raise ReferenceRefusal(Status.INVALID_ARGUMENT, exc.message, field=exc.field) from None
        prefix = len(reference_prefix(self.encode, ref))
        self.reference_catalog.reserve(ref, clip, prefix)
        try:
            await self._hold_reference(ref)
        except BaseException:
            self.reference_catalog.abandon(ref.name)
            raise
        return self.reference_catalog.activate(ref.name)

    def remove_reference_voice(self, name: str) -> tuple[ReferenceEntry, bool]:
        """Unregister reference voice `name`: unlisted and refused to new sessions at once;
        the sessions open on it finish in its voice (each holds a ReferenceLease), and
        `_release_reference` runs after the last one ends (at once when none is open: the
        bool). ReferenceRefusal: NOT_FOUND, or FAILED_PRECONDITION while it loads."""
        return self.reference_catalog.unload(name)

    async def _hold_reference(self, ref: ReferenceVoice) -> None:
        """The engine's part of registering `ref`, before it is listed: with a prefix pool
        (engine.prefix_pool_mb; engine/model/prefix_pool.py), its prefix computed into the
        pool on the engine thread, between steps. A pool with no room refuses the voice
        (ReferenceRefusal RESOURCE_EXHAUSTED naming the budget), with nothing registered.
        Without a pool, nothing: each segment computes the prefix with its prompt."""
        if not self._has_prefix_pool():
            return
        done = self.engine.add_prefix(tuple(reference_prefix(self.encode, ref)))
        try:
            await asyncio.wrap_future(done)
        except PrefixPoolFull as exc:
            raise ReferenceRefusal(Status.RESOURCE_EXHAUSTED, str(exc), field="clip") from None

    def _release_reference(self, ref: ReferenceVoice) -> None:
        """`ref` is unloaded and no session holds it any more (the reference catalog's
        on_free, on the asyncio loop): the pool lets its prefix go (a segment admitted
        later would compute it itself). Called once for every voice that was listed,
        start-up ones included."""
        log.info("reference voice %s released", ref.name)
        if self._has_prefix_pool():
            self.engine.drop_prefix(tuple(reference_prefix(self.encode, ref))) \
                .add_done_callback(_log_drop_failure)

    def _has_prefix_pool(self) -> bool:
        caps = getattr(self.engine, "capabilities", None)
        return bool(caps is not None and getattr(caps, "prefix_pool_tokens", 0))

    def adapter_of(self, voice: str) -> int:
        """The pool slot of the loaded adapter that speaks `voice`, -1 for the base model's
        voices (and for a name no voice has: the edge refused it already)."""
        return self.catalog.slot_of(voice)

    def lease_voice(self, voice: str) -> AdapterLease | ReferenceLease | None:
        """What a session holds from its start to its end: the adapter that speaks `voice`
        (its slot goes into every request of the session; released when the session
        ends, so an unloaded adapter's slot is freed only after its last session), the
        reference voice `voice` (its clip builds every prompt of the session, even after an
        unload), or None for a base voice. Either lease has `slot` and `reference`.
        AdapterRefusal / ReferenceRefusal (FAILED_PRECONDITION) for a voice being unloaded.
        The asyncio loop only (the catalogs' owner)."""
        lease = self.reference_catalog.lease(voice)
        return lease if lease is not None else self.catalog.lease(voice)

    def voice_refusal(self, voice: str) -> str | None:
        """Why `voice`, which the voice list does not have, takes no new session: it is
        spoken by an adapter being unloaded, or is a reference voice being unloaded; None
        when that is not why."""
        return self.catalog.refusal(voice) or self.reference_catalog.refusal(voice)

    def request(self, session_id: str, segment_index: int, voice: str, text: str,
                sampling: SamplingParams = SamplingParams(),
                adapter: int | None = None, reference: Any = BY_NAME) -> GenerationRequest:
        """A GenerationRequest for one segment (prompt ids and token budget from the text),
        with `sampling` as it is given: a session's was validated and completed at its edge
        (server/settings.py, the one place config.sampling fills what a request left unset);
        a caller with none (warm-up) gets SamplingParams' own, Orpheus's recommended values.
        `adapter`: the pool slot the session leased (lease_voice; -1 the base model); None:
        the slot of whichever loaded adapter speaks `voice` now (warm-up, offline callers).
        `reference`: the reference voice the session leased (None: none, whatever the name
        means now); BY_NAME: whichever is listed as `voice` now. ValueError (the caller's INVALID_ARGUMENT) for a seed the engine would ignore."""
        if sampling.seed is not None and self.seed_refusal:
            raise ValueError(f"sampling.seed: {self.seed_refusal}")
        prompt, prefix_len = self.prompt_parts(voice, text, reference)
        expected = max(1, round(expected_audio_seconds(text) / FRAME_SECONDS))
        return GenerationRequest(session_id=session_id, segment_index=segment_index,
                                 prompt_ids=tuple(prompt), max_tokens=max_tokens_for_text(text),
                                 sampling=sampling, expected_frames=expected,
                                 adapter=self.adapter_of(voice) if adapter is None else adapter,
                                 prefix_len=prefix_len)

    def prompt(self, voice: str, text: str, reference: Any = BY_NAME) -> list[int]:
        """The prompt ids of `text` in `voice`: a reference voice's (its clip's turns, then
        the text's: core/reference.py build_reference_prompt), else "{voice}: {text}"'s.
        `reference` as in `request`."""
        return self.prompt_parts(voice, text, reference)[0]

    def prompt_parts(self, voice: str, text: str, reference: Any = BY_NAME
                     ) -> tuple[list[int], int]:
        """(prompt ids, prefix length): a reference voice's prompt starts with its prefix
        (core/reference.py reference_prefix: what the engine's prefix pool holds), any
        other's has none (0). `reference` as in `request`."""
        ref = self.references.get((voice or "").strip().casefold()) \
            if reference is BY_NAME else reference
        if ref is None:
            return build_prompt(self.encode, voice, text), 0
        prefix = reference_prefix(self.encode, ref)
        return prefix + text_turn(self.encode, text), len(prefix)

    def open(self, request: GenerationRequest, on_event: Callable[[EngineEvent], None] | None = None,
             loop: Any = None) -> GenerationHandle:
        """Start one generation and return its handle (engine/handle.py): its events in
        order, ending with one final AudioEvent (with its Finish) or a Rejected; on `loop`
        when given, one wake-up per batch; without `on_event`, read by handle.events()."""
        return GenerationHandle(self.engine, self.router, request, on_event, loop)

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


@dataclass
class Runtime(FrontRuntime):
    flusher: Flusher = None  # type: ignore[assignment]
    # the prompt tokenizer a split topology's front-ends load: a tokenizer.json or a
    # built-in one's name (engine/registry.py load_tokenizer); None: not known
    tokenizer: str | None = None
    # the base model an adapter loaded while serving is checked against (BuiltBackend.lora_base)
    lora_base: Any = None
    _started: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.catalog.capacity:  # a slot freed after an unload is cleared on the device
            self.catalog.on_free = self._clear_slot

    def _clear_slot(self, slot: int) -> None:
        """The catalog freed `slot` (its adapter unloaded, its last session ended): zero it
        on the engine thread, queued behind the cancels of that session's generations."""
        log.info("adapter slot %d is free", slot)
        done = self.engine.write_adapter(slot, None)
        done.add_done_callback(_log_failure)

    def start(self) -> None:
        self.flusher.start()
        self.engine.start()
        self._started = True

    def stop(self) -> None:
        if self._started:
            self.engine.stop()
            self.flusher.stop(timeout=10)
            self.engine.backend.close()  # trtllm: abort live requests, shut the LLM down
            self._started = False

    def warm_up(self, timeout: float = 300.0) -> float:
        """Run one short generation through engine and codec; returns its audio seconds."""
        req = self.request("warm-up", 0, self.voices.default, "Hello.")
        samples = 0
        with self.open(dataclasses.replace(req, max_tokens=14)) as gen:
            try:
                for ev in gen.events(timeout):
                    if isinstance(ev, Rejected):
                        raise RuntimeError(f"warm-up generation failed: {ev.reason}")
                    if isinstance(ev, AudioEvent):
                        samples += ev.num_samples
                        if ev.final and ev.finish is not None and ev.finish.reason == "error":
                            raise RuntimeError(f"warm-up generation failed: {ev.finish.error}")
            except TimeoutError:
                raise RuntimeError(f"warm-up generation stalled: no progress for {timeout:.0f} s") from None
        return samples / 24000


def build_runtime(config: Config, router: EventRouter | None = None, *,
                  on_step: Callable[[int, float], None] | None = None,
                  on_decode: Callable[[int], None] | None = None) -> Runtime:
    """Load checkpoints and build (not start) the engine described by `config`.
    `on_step` is called from the engine thread with each step's batch size and period
    (seconds since the previous step ended, or since it began after a wait), `on_decode`
    from the flusher thread with the windows of each codec call (metrics)."""
    router = router or EventRouter()
    m, e = config.model, config.engine
    device = resolve_device(m.device)
    dtype = resolve_dtype(m.dtype, device)
    if m.cpu_threads > 0:
        torch.set_num_threads(m.cpu_threads)
    settings = e.scheduler_settings(device.type)
    log.info(e.row_budget_choice(device.type)[1])
    built = build_backend(config, device, dtype)  # engine/<backend>/build.py
    if config.flusher.null_codec:  # a benchmark's baseline: silence, no SNAC
        log.warning("flusher.null_codec is on: every decode is silence (a benchmark setting)")
        codec = NullCodec(device)
    else:
        fl = config.flusher
        codec = built.codec or load_snac(snac_ref(config, built.is_demo), device=device,
                                         dtype=resolve_dtype(fl.codec_dtype, device),
                                         max_batch_frames=fl.max_decode_frames,
                                         graphs=fl.codec_graphs)
    flusher = Flusher(codec, config.flusher, router, on_error=router.on_audio_error,
                      on_decode=on_decode)
    engine = EngineLoop(built.backend, flusher, router, settings=settings, seed=e.seed,
                        on_step=on_step,
                        collector=CollectorPacer() if e.gc_pacing else None)
    references = _references(config, built, device)
    _pool_references(built, references)
    try:
        voices = with_reference_voices(_voices(config, built), references, built.adapters)
    except ValueError as exc:
        raise ReferenceStartupError(str(exc)) from None
    catalog = _catalog(voices, built)
    return Runtime(config=config, engine=engine, flusher=flusher, router=router,
                   encode=built.encode, model_name=built.model_name, is_demo=built.is_demo,
                   device=device, voices=catalog.voices,
                   seed_refusal=built.backend.capabilities.seed_refusal,
                   tokenizer=built.tokenizer, adapters=dict(catalog.slots), catalog=catalog,
                   lora_base=built.lora_base,
                   references={r.name.casefold(): r for r in references})


def _references(config: Config, built: BuiltBackend, device: torch.device
                ) -> tuple[ReferenceVoice, ...]:
    """The reference voices of model.reference_voices, encoded with the SNAC checkpoint the
    codec uses (model.snac or the demo's), each checked to leave a segment room in a slot.
    ReferenceStartupError naming the entry at fault."""
    if not config.model.reference_voices:
        return ()
    refs = load_reference_voices(config.model.reference_voices,
                                 snac_ref(config, built.is_demo), device)
    max_seq_len = built.backend.capabilities.max_seq_len
    for i, ref in enumerate(refs):
        try:
            room = check_room(built.encode, ref, max_seq_len)
        except ReferenceVoiceError as exc:
            raise ReferenceStartupError(f"model.reference_voices[{i}].{exc.field}: "
                                        f"{exc.message}") from None
        log.info("reference voice %s: a slot of %d tokens keeps %d for each segment's text "
                 "and speech", ref.name, max_seq_len, room)
    return refs


def _pool_references(built: BuiltBackend, references: Sequence[ReferenceVoice]) -> None:
    """Each start-up reference voice's prefix computed into the backend's prefix pool, when
    it has one (engine.prefix_pool_mb; core/step.py add_prefix), before the engine thread
    starts. ReferenceStartupError naming the voice when the pool cannot hold them all."""
    backend = built.backend
    if not backend.capabilities.prefix_pool_tokens:
        return
    for ref in references:
        try:
            backend.add_prefix(tuple(reference_prefix(built.encode, ref)))
        except PrefixPoolFull as exc:
            raise ReferenceStartupError(f"reference voice {ref.name}: {exc}") from None


def _catalog(base: VoiceRegistry, built: BuiltBackend) -> AdapterCatalog:
    """The adapter catalog at start-up: the base model's voices, the engine's pool size,
    and each served adapter (BuiltBackend.adapters, in slot order) with its voices.
    ConfigError when an adapter's voice takes a name the base model or another adapter
    already has."""
    catalog = AdapterCatalog(base, built.backend.capabilities.max_adapters)
    details = built.adapter_details or (("", 0),) * len(built.adapters)
    for slot, ((name, registry), (path, rank)) in enumerate(zip(built.adapters, details)):
        try:
            catalog.add(name, slot, registry, path, rank)
        except (AdapterRefusal, ValueError) as exc:  # a voice name taken twice
            raise ConfigError(f"model.adapters: {exc}") from None
        log.info("adapter %s speaks: %s", name, ", ".join(registry.names))
    return catalog


def _log_drop_failure(done) -> None:
    if done.exception() is not None:
        log.error("dropping a reference voice's prefix from the pool failed: %s",
                  done.exception())


def _log_failure(done) -> None:
    if done.exception() is not None:
        log.error("clearing a freed LoRA adapter slot failed: %s", done.exception())


def snac_ref(config: Config, is_demo: bool) -> str:
    """model.snac, else the demo's random-init SNAC (with a warning unless the whole model
    is the demo, whose own warning says so)."""
    if config.model.snac is not None:
        return config.model.snac
    from orpheus_svc.models.demo import ensure_demo_checkpoint
    if not is_demo:
        log.warning("model.snac not set: using a random-init SNAC, so the audio is not "
                    "speech; set model.snac to hubertsiuzdak/snac_24khz or a local copy")
    return str(ensure_demo_checkpoint().snac_dir)


def _voices(config: Config, built: BuiltBackend) -> VoiceRegistry:
    """The served model's voice list (order of sources: models/voices.py)."""
    from orpheus_svc.core.voices import VoiceRegistryError
    from orpheus_svc.models.voices import load_voice_registry

    m = config.model
    model_dir = built.model_dir
    if model_dir is None and m.path and os.path.isdir(os.path.expanduser(m.path)):
        model_dir = Path(os.path.expanduser(m.path))  # sim / trtllm: read it, never download it
    try:
        registry = load_voice_registry(setting=m.voices, model_ref=m.path, model_dir=model_dir,
                                       engine_dir=built.engine_dir)
    except VoiceRegistryError as exc:
        raise ConfigError(f"voices: {exc}") from exc
    log.info("voices (%s): %s; default %s", registry.source or "model", ", ".join(registry.names),
             registry.default)
    return registry
