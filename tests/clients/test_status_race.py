"""A replica that ends a session while the client is still writing (a draining or dying
replica) must reach the asyncio client's caller as the server's own status, with every
message it sent before it: grpc.aio sets a placeholder status (INTERNAL "Internal error from
Core") when such a write fails, and unless the session reads on past it, the server's status
and last messages never arrive (orpheus_tts_client._aio_session._responses).

The race is run many times beside a CPU hog, which widens it: every try must come out right.
scripts/test-client-compat.sh runs this file on the lowest grpcio the client declares too.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import grpc
import pytest
from orpheus_tts_client.proto.v1 import tts_pb2 as pb

from orpheus_tts_client import AsyncClient, AudioChunk, SegmentStart, TTSError

from .fake_server import FakeTTSServicer, chunk_pcm

TRIES = 200
CHUNKS = 6  # audio messages the replica sends before it goes away
GOING = "the replica is going away"


class GoingAwayServicer(FakeTTSServicer):
    """Accepts a session, answers its first text with a segment start and CHUNKS chunks,
    then ends the call with UNAVAILABLE while the client goes on writing."""

    def StreamingSynthesize(self, request_iterator, context):
        next(request_iterator)  # the config
        context.send_initial_metadata((("orpheus-session-id", "going"),))
        next(request_iterator)  # the first text
        yield pb.StreamingSynthesizeResponse(segment_start=pb.SegmentStart(text="x"))
        for i in range(CHUNKS):
            yield pb.StreamingSynthesizeResponse(audio=pb.AudioChunk(
                audio=chunk_pcm(i, 64), segment_index=0, sequence_number=i,
                sample_offset=64 * i, num_samples=64))
        context.abort(grpc.StatusCode.UNAVAILABLE, GOING)


@pytest.fixture
def cpu_hog():
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    yield
    hog.kill()
    hog.wait()


async def _one(tts: AsyncClient) -> tuple[str, int]:
    """One session: a task writes text without pause while this one reads. Returns the
    caller's outcome (the status's code and details) and the events it saw."""
    seen = 0
    async with tts.session() as s:
        async def write():
            try:
                for i in range(400):
                    await s.send(f"word {i} ")
            except TTSError:
                pass  # the writer meets the end of the call too; the reader reports it

        writer = asyncio.create_task(write())
        try:
            async for ev in s:
                seen += isinstance(ev, (AudioChunk, SegmentStart))
            outcome = "no error"
        except TTSError as e:
            outcome = f"{e.code.name}: {e.details}"
        await writer
    return outcome, seen


def test_a_replica_ending_a_session_under_a_write_reaches_the_caller_as_its_status(
        replicas, cpu_hog):
    replica = replicas("going", servicer_cls=GoingAwayServicer)

    async def main():
        async with AsyncClient(replica.target, timeout=20) as tts:
            return [await _one(tts) for _ in range(TRIES)]

    results = asyncio.run(main())
    wrong = [r for r in results if r != (f"UNAVAILABLE: {GOING}", 1 + CHUNKS)]
    assert not wrong, f"{len(wrong)} of {TRIES} tries: {sorted(set(wrong))}"
