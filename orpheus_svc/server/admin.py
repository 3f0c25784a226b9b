"""AdminService (orpheus.admin.v1) over grpc.aio: proto <-> domain at this edge only; the calls
themselves are server/adapter_admin.py's (LoRA adapters) and server/reference_admin.py's
(reference voices).

Registered (app/server.py) only when the API keys include one with the admin scope; the
interceptor (server/auth.py) lets only such keys through. Reflection lists it then, so
grpcurl calls it without the .proto (docs/lora.md has the commands).
"""

from __future__ import annotations

import grpc
import structlog

from orpheus_svc.core import reference_catalog as refcat
from orpheus_svc.core.adapters import DRAINING, LOADED, LOADING, AdapterEntry
from orpheus_svc.core.reference_catalog import ReferenceEntry
from orpheus_svc.core.status import Status
from orpheus_svc.proto.admin.v1 import admin_pb2, admin_pb2_grpc

from .adapter_admin import AdapterAdmin, AdminError
from .reference_admin import ReferenceAdmin
from .servicer import GRPC_STATUS, Unparseable, tolerant
from .state import ServerState

log = structlog.get_logger("orpheus_svc.admin")

SERVICE_NAME = admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name

_STATES = {LOADING: admin_pb2.ADAPTER_STATE_LOADING, LOADED: admin_pb2.ADAPTER_STATE_LOADED,
           DRAINING: admin_pb2.ADAPTER_STATE_DRAINING}


_REFERENCE_STATES = {refcat.LOADING: admin_pb2.REFERENCE_VOICE_STATE_LOADING,
                     refcat.LOADED: admin_pb2.REFERENCE_VOICE_STATE_LOADED,
                     refcat.DRAINING: admin_pb2.REFERENCE_VOICE_STATE_DRAINING}


def reference_message(entry: ReferenceEntry) -> admin_pb2.ReferenceVoice:
    ref = entry.voice
    return admin_pb2.ReferenceVoice(
        name=ref.name, language=ref.language, transcript=ref.transcript, clip=entry.clip,
        seconds=ref.seconds, audio_tokens=len(ref.audio_token_ids),
        prefix_tokens=entry.prefix_tokens, open_sessions=max(entry.sessions, 0),
        state=_REFERENCE_STATES[entry.state])


def adapter_message(entry: AdapterEntry) -> admin_pb2.Adapter:
    return admin_pb2.Adapter(name=entry.name, path=entry.path, rank=entry.rank,
                             voices=entry.voice_names, open_sessions=max(entry.sessions, 0),
                             state=_STATES[entry.state], slot=entry.slot)


class AdminServicer(admin_pb2_grpc.AdminServiceServicer):
    """Each call answers or ends with the AdminError's status and message."""

    def __init__(self, admin: AdapterAdmin, references: ReferenceAdmin) -> None:
        self.admin = admin
        self.references = references

    async def LoadAdapter(self, request, context):
        await _parsed(context, "LoadAdapter", request)
        try:
            entry = await self.admin.load(request.name, request.path, list(request.voices))
        except AdminError as exc:
            await _refuse(context, "LoadAdapter", exc)
        return admin_pb2.LoadAdapterResponse(adapter=adapter_message(entry))

    async def ListAdapters(self, request, context):
        await _parsed(context, "ListAdapters", request)
        try:
            pool = self.admin.listing()
        except AdminError as exc:
            await _refuse(context, "ListAdapters", exc)
        return admin_pb2.ListAdaptersResponse(
            adapters=[adapter_message(e) for e in pool.adapters], capacity=pool.capacity,
            max_rank=pool.max_rank, adapter_dirs=list(pool.adapter_dirs))

    async def UnloadAdapter(self, request, context):
        await _parsed(context, "UnloadAdapter", request)
        try:
            entry, freed = self.admin.unload(request.name)
        except AdminError as exc:
            await _refuse(context, "UnloadAdapter", exc)
        return admin_pb2.UnloadAdapterResponse(adapter=adapter_message(entry), freed=freed)

    async def LoadReferenceVoice(self, request, context):
        await _parsed(context, "LoadReferenceVoice", request)
        clip = request.WhichOneof("clip")
        try:
            entry = await self.references.load(
                request.name, request.language, request.transcript,
                clip_path=request.clip_path if clip == "clip_path" else None,
                clip_audio=request.clip_audio if clip == "clip_audio" else None)
        except AdminError as exc:
            await _refuse(context, "LoadReferenceVoice", exc)
        return admin_pb2.LoadReferenceVoiceResponse(voice=reference_message(entry))

    async def ListReferenceVoices(self, request, context):
        await _parsed(context, "ListReferenceVoices", request)
        try:
            found = self.references.listing()
        except AdminError as exc:
            await _refuse(context, "ListReferenceVoices", exc)
        return admin_pb2.ListReferenceVoicesResponse(
            voices=[reference_message(e) for e in found.voices],
            reference_dirs=list(found.reference_dirs), min_clip_seconds=found.min_clip_seconds,
            max_clip_seconds=found.max_clip_seconds,
            max_transcript_chars=found.max_transcript_chars,
            max_clip_audio_bytes=found.max_clip_audio_bytes,
            max_clip_file_bytes=found.max_clip_file_bytes)

    async def UnloadReferenceVoice(self, request, context):
        await _parsed(context, "UnloadReferenceVoice", request)
        try:
            entry, freed = self.references.unload(request.name)
        except AdminError as exc:
            await _refuse(context, "UnloadReferenceVoice", exc)
        return admin_pb2.UnloadReferenceVoiceResponse(voice=reference_message(entry),
                                                      freed=freed)


async def _parsed(context, rpc: str, request) -> None:
    if isinstance(request, Unparseable):
        await _refuse(context, rpc, AdminError(Status.INVALID_ARGUMENT,
                                               "request could not be parsed"))


async def _refuse(context, rpc: str, exc: AdminError) -> None:
    level = "error" if exc.code == Status.INTERNAL else "warning"
    getattr(log, level)("admin call refused", rpc=rpc, status=exc.code, reason=exc.message)
    await context.abort(GRPC_STATUS[exc.code], exc.message)


def add_admin_service(state: ServerState, server: grpc.aio.Server, *, split: bool = False) -> str:
    """Serve AdminService on `server` (requests parsed at this edge, as TTSService's);
    returns its full name (for reflection)."""
    servicer = AdminServicer(AdapterAdmin(state, split=split),
                             ReferenceAdmin(state, split=split))
    handlers = {}
    for name, method in admin_pb2.DESCRIPTOR.services_by_name["AdminService"].methods_by_name.items():
        request_cls = getattr(admin_pb2, method.input_type.name)
        response_cls = getattr(admin_pb2, method.output_type.name)
        handlers[name] = grpc.unary_unary_rpc_method_handler(
            getattr(servicer, name), request_deserializer=tolerant(request_cls),
            response_serializer=response_cls.SerializeToString)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME,
                                                                          handlers),))
    return SERVICE_NAME
