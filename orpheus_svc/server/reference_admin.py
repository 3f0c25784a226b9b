"""Loading, listing and unloading reference voices while the server serves, in domain terms:
what the admin service (server/admin.py, orpheus.admin.v1) answers. Runs on the asyncio
loop, the owner of the runtime's voice catalogs; no grpc here (docs/voices.md, "Loading and
unloading while serving").

    load(name, language, transcript, clip_path | clip_audio)
      name, transcript, language       core/reference.py checks          INVALID_ARGUMENT
      the name free among every voice  runtime.voice_owner (cheap, before any decoding)
                                                                          ALREADY_EXISTS
      clip_path                        model.reference_dirs set          FAILED_PRECONDITION
                                       audio/clip.py resolve_clip_path   PERMISSION_DENIED
      clip_audio                       at most MAX_CLIP_AUDIO_BYTES      INVALID_ARGUMENT
      decode, check, encode            a worker thread, one load at a time: SNAC's encoder
                                       loaded for the call and dropped (audio/snac_encoder.py)
                                       unreadable, empty, silent, too short or too long:
                                                                          INVALID_ARGUMENT
      runtime.add_reference_voice      the one registration point: the name again, room in
                                       a slot, what the engine keeps (a full prefix pool:
                                       RESOURCE_EXHAUSTED), then listed
    unload(name)                       runtime.remove_reference_voice: unlisted at once;
                                       released after its last session

Every refusal is an AdminError whose message starts with the request field at fault
("clip_path: ..."); a refused load registers nothing. The split topology refuses every call
(UNIMPLEMENTED), as it does the adapters' (server/adapter_admin.py): each front-end builds
its own prompts from its own voice list, so no one process could add a voice to all of them.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import structlog

from orpheus_svc.audio.clip import ClipPathError, resolve_clip_path
from orpheus_svc.core.errors import internal_message, new_error_id
from orpheus_svc.core.lora_config import adapter_dirs
from orpheus_svc.core.reference import (
    MAX_CLIP_AUDIO_BYTES,
    MAX_CLIP_BYTES,
    MAX_CLIP_SECONDS,
    MAX_TRANSCRIPT_CHARS,
    MIN_CLIP_SECONDS,
    ReferenceVoiceError,
    check_language,
    check_name,
    check_transcript,
)
from orpheus_svc.core.reference_catalog import ReferenceEntry, ReferenceRefusal
from orpheus_svc.core.status import Status

from .adapter_admin import AdminError
from .state import ServerState

log = structlog.get_logger("orpheus_svc.admin")

SPLIT_REFUSAL = ("the admin service is not available with server.topology split: each "
                 "front-end builds prompts from its own voice list and counts only its own "
                 "sessions, so reference voices are fixed at start-up there "
                 "(model.reference_voices; a rolling restart changes them); use "
                 "server.topology single to load reference voices while serving")


@dataclass(frozen=True)
class ReferenceListing:
    """ListReferenceVoices' answer: the voices in load order, the allowed directories."""

    voices: list[ReferenceEntry]
    reference_dirs: tuple[str, ...]
    min_clip_seconds: float = MIN_CLIP_SECONDS
    max_clip_seconds: float = MAX_CLIP_SECONDS
    max_transcript_chars: int = MAX_TRANSCRIPT_CHARS
    max_clip_audio_bytes: int = MAX_CLIP_AUDIO_BYTES
    max_clip_file_bytes: int = MAX_CLIP_BYTES


class ReferenceAdmin:
    """The reference voice calls (module docstring) on `state`'s runtime. `split`: this
    process is a front-end of the split topology (every call refused)."""

    def __init__(self, state: ServerState, *, split: bool = False) -> None:
        self.state = state
        self.split = split
        self._encoding = asyncio.Lock()  # one clip through SNAC's encoder at a time

    def _runtime(self):
        if self.split:
            raise AdminError(Status.UNIMPLEMENTED, SPLIT_REFUSAL)
        runtime = self.state.runtime
        if runtime is None:
            raise AdminError(Status.UNAVAILABLE, "the model is still loading; retry shortly "
                                                 "(health reports SERVING when ready)")
        return runtime

    def _dirs(self) -> tuple[str, ...]:
        return adapter_dirs(self.state.config.model.reference_dirs, "model.reference_dirs")

    # -- the calls -------------------------------------------------------------------------

    def listing(self) -> ReferenceListing:
        runtime = self._runtime()
        return ReferenceListing(runtime.reference_catalog.entries(), self._dirs())

    async def load(self, name: str, language: str, transcript: str, *,
                   clip_path: str | None = None, clip_audio: bytes | None = None
                   ) -> ReferenceEntry:
        """A reference voice from the clip at `clip_path` or in `clip_audio` and its
        transcript, registered and listed (module docstring); the entry as loaded.
        AdminError otherwise, with nothing registered."""
        runtime = self._runtime()
        language = language or "en"
        try:
            check_name(name)
            transcript = check_transcript(transcript)
            check_language(language)
        except ReferenceVoiceError as exc:
            raise AdminError(Status.INVALID_ARGUMENT, f"{exc.field}: {exc.message}") from None
        owner = runtime.voice_owner(name)
        if owner is not None:
            raise AdminError(Status.ALREADY_EXISTS, f"name: {name!r} is already {owner}; "
                                                    f"name the reference voice differently")
        field, source, shown = self._clip(clip_path, clip_audio)
        async with self._encoding:
            try:
                ref = await asyncio.get_running_loop().run_in_executor(
                    None, lambda: _encode(runtime, name, source, transcript, language))
            except ReferenceVoiceError as exc:
                where = field if exc.field == "clip" else exc.field
                raise AdminError(Status.INVALID_ARGUMENT, f"{where}: {exc.message}") from None
            except Exception as exc:  # a SNAC checkpoint that will not load, or a bug
                error_id = new_error_id()
                log.error("reference voice load failed", voice=name, error_id=error_id,
                          exc_info=exc)
                raise AdminError(Status.INTERNAL, internal_message(
                    f"reference voice {name!r}: encoding the clip failed", error_id)
                    + "; nothing was loaded") from None
        try:
            entry = await runtime.add_reference_voice(ref, shown)
        except ReferenceRefusal as exc:
            where = field if exc.field == "clip" else exc.field
            raise AdminError(exc.code, f"{where}: {exc.message}" if where else exc.message
                             ) from None
        log.info("reference voice loaded", voice=entry.name, clip=shown or "(bytes)",
                 seconds=round(ref.seconds, 2), audio_tokens=len(ref.audio_token_ids),
                 prefix_tokens=entry.prefix_tokens)
        return entry

    def unload(self, name: str) -> tuple[ReferenceEntry, bool]:
        """Reference voice `name` takes no new session from now on; it is released after
        its last session (at once with none open: the bool)."""
        runtime = self._runtime()
        try:
            entry, freed = runtime.remove_reference_voice(name)
        except ReferenceRefusal as exc:
            raise AdminError(exc.code, f"{exc.field}: {exc.message}" if exc.field
                             else exc.message) from None
        log.info("reference voice unloaded", voice=entry.name, open_sessions=entry.sessions,
                 released=freed)
        return entry, freed

    # -- inside ----------------------------------------------------------------------------

    def _clip(self, clip_path: str | None, clip_audio: bytes | None
              ) -> tuple[str, object, str]:
        """(the request field that gives the clip, what audio/clip.py reads, the resolved
        path to list or ""). AdminError for a missing clip, a path the server may not read,
        or bytes over MAX_CLIP_AUDIO_BYTES; nothing is opened here."""
        if clip_audio is not None:
            if len(clip_audio) > MAX_CLIP_AUDIO_BYTES:
                raise AdminError(Status.INVALID_ARGUMENT, (
                    f"clip_audio: the clip is {len(clip_audio)} bytes; a request carries at "
                    f"most {MAX_CLIP_AUDIO_BYTES} ({MAX_CLIP_AUDIO_BYTES // (1024 * 1024)} "
                    f"MiB): send a compressed clip, or put the file in model.reference_dirs "
                    f"and give clip_path"))
            return "clip_audio", bytes(clip_audio), ""
        if clip_path is None:
            raise AdminError(Status.INVALID_ARGUMENT, (
                "clip_path or clip_audio: the clip is missing: give its file (clip_path, "
                "inside model.reference_dirs) or its bytes (clip_audio)"))
        dirs = self._dirs()
        if not dirs:
            raise AdminError(Status.FAILED_PRECONDITION, (
                "clip_path: model.reference_dirs is empty: this server reads no clip file "
                "while serving; send the clip's bytes (clip_audio), or name the directories "
                "clips may come from in model.reference_dirs"))
        try:
            real = resolve_clip_path(clip_path, dirs)
        except ClipPathError as exc:
            code = Status.PERMISSION_DENIED if exc.outside else Status.INVALID_ARGUMENT
            raise AdminError(code, f"clip_path: {exc.message}") from None
        return "clip_path", str(real), str(real)


def _encode(runtime, name: str, source, transcript: str, language: str):
    """`source` decoded and checked (audio/clip.py load_clip: its refusals before SNAC is
    read), then encoded into a ReferenceVoice with SNAC's encoder, loaded for this call on
    the runtime's device and dropped after (a worker thread)."""
    from orpheus_svc.audio.clip import load_clip
    from orpheus_svc.audio.snac_encoder import load_snac_encoder
    from orpheus_svc.core.reference import ReferenceVoice
    from orpheus_svc.runtime import snac_ref

    pcm = load_clip(source)
    encoder = load_snac_encoder(snac_ref(runtime.config, runtime.is_demo), runtime.device)
    try:
        tokens = encoder.encode_tokens(pcm)
    finally:
        encoder.close()
    return ReferenceVoice(name, transcript, tuple(tokens), language)
