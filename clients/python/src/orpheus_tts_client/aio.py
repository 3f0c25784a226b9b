"""asyncio client, on grpc.aio.

    async with AsyncClient("localhost:50051") as tts:
        async for ev in tts.stream(llm_text_fragments(), voice="tara"):
            if isinstance(ev, AudioChunk):
                await player.write(ev.audio)
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterable, AsyncIterator, Iterable

import grpc
import grpc.aio
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc

from . import _convert
from ._aio_session import AsyncSession
from ._base import _UNSET, DEFAULT_TARGET, DEFAULT_VOICE, Metadata, _ClientBase
from .types import (
    FLUSH, Encoding, Event, Sampling, ServerStatus, SynthesisResult, TTSError, VoiceList,
)

TextSource = AsyncIterable[Any] | Iterable[Any] | str


class AsyncClient(_ClientBase):
    """asyncio client for ``orpheus.tts.v1.TTSService``; same arguments and methods as
    ``Client`` (see there), but coroutines and async iterators.

    Create it inside the event loop that uses it (grpc.aio channels belong to one loop).
    """

    def __init__(self, target: str = DEFAULT_TARGET, **kwargs: Any) -> None:
        super().__init__(target, **kwargs)
        self._channel = self._new_channel(self._options)
        self._stub = tts_pb2_grpc.TTSServiceStub(self._channel)
        self._check = self._health_method(self._channel)
        self._info: tuple[grpc.aio.Channel, Any, Any] | None = None

    def _new_channel(self, options) -> grpc.aio.Channel:
        if self._credentials is not None:
            return grpc.aio.secure_channel(self.grpc_target, self._credentials, options=options)
        return grpc.aio.insecure_channel(self.grpc_target, options=options)

    def _info_stubs(self):
        """(stub, health check) for health() and status(); see _ClientBase."""
        if self._info_options is None:
            return self._stub, self._check
        if self._info is None:  # one event loop: no lock needed
            ch = self._new_channel(self._info_options)
            self._info = (ch, tts_pb2_grpc.TTSServiceStub(ch), self._health_method(ch))
        return self._info[1], self._info[2]

    @property
    def channel(self) -> grpc.aio.Channel:
        return self._channel

    async def close(self, grace: float | None = None) -> None:
        await self._channel.close(grace)
        if self._info is not None:
            info, self._info = self._info[0], None
            await info.close(grace)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until the channel is connected (asyncio.TimeoutError on timeout); with
        health checking, until a replica reports SERVING."""
        await asyncio.wait_for(self._channel.channel_ready(), timeout)

    # -- synthesis ---------------------------------------------------------------------------

    def session(self, voice: str = DEFAULT_VOICE, *,
                encoding: Encoding | str = Encoding.PCM16, sample_rate: int | None = None,
                sampling: Sampling | None = None, timeout: float | None = _UNSET,
                metadata: Metadata | None = None,
                word_timestamps: bool = False) -> AsyncSession:
        """Open a StreamingSynthesize session driven by hand: ``send(text)``, ``flush()``,
        ``end()``, ``cancel()``, and ``async for ev in session`` (see AsyncSession).

        ``async with client.session(voice="tara") as s: ...`` cancels it on exit if unfinished.
        ``word_timestamps=True`` adds WordTimings events (docs/api.md).
        """
        config = _convert.config_request(voice, encoding, sample_rate, sampling, word_timestamps)
        kwargs = self._call_kwargs(timeout, metadata)

        def open_call(attempt_timeout: float | None) -> grpc.aio.StreamStreamCall:
            return self._stub.StreamingSynthesize(**dict(kwargs, timeout=attempt_timeout))

        enc = _convert.as_encoding(encoding)
        return AsyncSession(open_call, config, enc, int(sample_rate or _convert.default_rate(enc)),
                            retries=self.retries, timeout=kwargs["timeout"], resume=self.resume)

    def stream(self, text: TextSource, voice: str = DEFAULT_VOICE, *,
               encoding: Encoding | str = Encoding.PCM16, sample_rate: int | None = None,
               sampling: Sampling | None = None, timeout: float | None = _UNSET,
               metadata: Metadata | None = None,
               word_timestamps: bool = False) -> AsyncIterator[Event]:
        """One StreamingSynthesize session: ``async for ev in client.stream(...)``.

        ``text`` is a str, or a sync or async iterable of str fragments and ``FLUSH`` items,
        sent as they come (a task writes while you read). A sync iterable runs on the event
        loop, so it must not block; wrap a blocking source in an async generator. Its end
        half-closes the input; leaving the loop early cancels the call. A convenience over
        ``session()``.
        """
        return self._stream(self.session(voice, encoding=encoding, sample_rate=sample_rate,
                                         sampling=sampling, timeout=timeout,
                                         metadata=metadata,
                                         word_timestamps=word_timestamps), text)

    async def _stream(self, session: AsyncSession, text: TextSource) -> AsyncIterator[Event]:
        writer_error: list[BaseException] = []

        async def write() -> None:
            try:
                await session.start()
                async for item in _items(text):
                    if item is FLUSH:
                        await session.flush()
                    elif isinstance(item, str):
                        await session.send(item)
                    else:
                        raise TypeError(f"text iterables yield str or orpheus_tts_client.FLUSH, "
                                        f"got {type(item).__name__}")
                await session.end()
            except TTSError:
                return  # the call already ended; the reader reports its status
            except Exception as e:  # noqa: BLE001 - re-raised on the reader's side
                writer_error.append(e)
                session.cancel()

        writer = asyncio.ensure_future(write())
        try:
            async for ev in session:
                yield ev
            if writer_error:
                raise writer_error[0]
        except TTSError:
            if writer_error:
                raise writer_error[0] from None
            raise
        finally:
            if not writer.done():
                writer.cancel()
            session.cancel()

    def synthesize_events(self, text: str, voice: str = DEFAULT_VOICE, *,
                          encoding: Encoding | str = Encoding.PCM16,
                          sample_rate: int | None = None, sampling: Sampling | None = None,
                          timeout: float | None = _UNSET, metadata: Metadata | None = None,
                          word_timestamps: bool = False) -> AsyncIterator[Event]:
        """One Synthesize call (whole text in one request); yields events like ``stream``."""
        request = _convert.synthesize_request(text, voice, encoding, sample_rate, sampling,
                                              word_timestamps)
        return self._synthesize(request, self._call_kwargs(timeout, metadata))

    async def _synthesize(self, request, kwargs) -> AsyncIterator[Event]:
        call = self._stub.Synthesize(request, **kwargs)
        try:
            while True:
                try:
                    msg = await call.read()
                except grpc.RpcError as e:
                    raise TTSError.from_rpc_error(e) from None
                if msg is grpc.aio.EOF:
                    break
                ev = _convert.event(msg)
                if ev is not None:
                    yield ev
        finally:
            call.cancel()

    async def synthesize(self, text: str, voice: str = DEFAULT_VOICE, *,
                         encoding: Encoding | str = Encoding.PCM16,
                         sample_rate: int | None = None, sampling: Sampling | None = None,
                         timeout: float | None = _UNSET, metadata: Metadata | None = None,
                         word_timestamps: bool = False) -> SynthesisResult:
        """Speak a whole text (Synthesize RPC) and return all its audio at once."""
        return await collect(
            self.synthesize_events(text, voice, encoding=encoding, sample_rate=sample_rate,
                                   sampling=sampling, timeout=timeout, metadata=metadata,
                                   word_timestamps=word_timestamps),
            encoding=encoding, sample_rate=sample_rate)

    async def synthesize_stream(self, text: TextSource, voice: str = DEFAULT_VOICE,
                                **kwargs: Any) -> SynthesisResult:
        """``stream`` collected into one SynthesisResult (same keyword arguments)."""
        return await collect(self.stream(text, voice, **kwargs),
                             encoding=kwargs.get("encoding", Encoding.PCM16),
                             sample_rate=kwargs.get("sample_rate"))

    # -- service info ------------------------------------------------------------------------

    async def list_voices(self, *, timeout: float | None = _UNSET,
                          metadata: Metadata | None = None) -> VoiceList:
        return _convert.voice_list(await _unary(self._stub.ListVoices, pb.ListVoicesRequest(),
                                                self._call_kwargs(timeout, metadata)))

    async def status(self, *, timeout: float | None = _UNSET,
                     metadata: Metadata | None = None) -> ServerStatus:
        stub, _ = self._info_stubs()
        return _convert.server_status(await _unary(stub.GetStatus, pb.GetStatusRequest(),
                                                   self._call_kwargs(timeout, metadata)))

    async def health(self, service: str = "", *, timeout: float | None = _UNSET,
                     metadata: Metadata | None = None) -> str:
        _, check = self._info_stubs()
        return await _unary(check, service, self._call_kwargs(timeout, metadata))


async def collect(events: AsyncIterable[Event], *, encoding: Encoding | str = Encoding.PCM16,
                  sample_rate: int | None = None) -> SynthesisResult:
    """Gather an async stream of events into a SynthesisResult."""
    builder = _convert.ResultBuilder(encoding, sample_rate)
    async for ev in events:
        builder.add(ev)
    return builder.result()


async def _items(text: TextSource) -> AsyncIterator[Any]:
    if isinstance(text, str):
        yield text
    elif hasattr(text, "__aiter__"):
        async for item in text:  # type: ignore[union-attr]
            yield item
    else:
        for item in text:  # type: ignore[union-attr]
            yield item


async def _unary(method, request, kwargs):
    try:
        return await method(request, **kwargs)
    except grpc.RpcError as e:
        raise TTSError.from_rpc_error(e) from None
