"""No text lost when a replica dies mid-session (issue 36): real server processes, real
SIGKILL, the Python clients (blocking and asyncio) and the Go client, unmodified.

Four sim-backend replicas pace their audio at real time (engine.max_ahead_seconds), so a
session's second segment is still being spoken when the test kills the replica serving it.
Three sessions run at once, one per client; each pushes five sentences while its audio
plays (the next one as each segment starts). Once all three are playing their second
segment, every replica serving one of them is killed. Each session resumes on a survivor
and its caller gets the ended segment once, the cut one again from its start, every later
one once, with contiguous sequence numbers and offsets, and a summary that says it resumed
once. Then, with resume bounded, a session whose every replica is killed gets the error.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import grpc
import pytest
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc

from orpheus_tts_client import (
    AsyncClient, AudioChunk, Client, Resume, Sampling, SegmentEnd, SegmentStart, TTSError,
)
from tests.clients.test_resume import check_resumed_stream

from .server_proc import ServerProcess
from .test_replicas import build_go_live_tests

GO_CLIENT = Path(__file__).resolve().parents[2] / "clients" / "go"
# as the Go test's liveResumeSentences: the second about 2 s of audio at the sim's pace
SENTENCES = ["Hello there. ", "This second sentence runs a good while longer. ",
             "Short third. ", "And a fourth. ", "The fifth."]
GO_READY = "ORPHEUS-RESUME-READY"  # the Go test's LiveResumeReady
WAIT = 60  # seconds any step may take on a loaded machine before the test fails


@pytest.fixture(scope="module")
def replicas(tmp_path_factory):
    logs = tmp_path_factory.mktemp("resume")
    build = build_go_live_tests(logs / "orpheus.test")  # compiles while the replicas load
    servers = [ServerProcess(logs, "engine.backend=sim", "engine.max_ahead_seconds=0.5",
                             name=f"replica-{i}") for i in range(4)]
    try:
        errors: list[BaseException] = []

        def wait(srv):
            try:
                srv.wait_serving()
            except Exception as exc:  # noqa: BLE001 - re-raised below
                errors.append(exc)

        threads = [threading.Thread(target=wait, args=(s,)) for s in servers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        go_tests = None
        if build is not None:
            output, _ = build.communicate(timeout=180)
            assert build.returncode == 0, output
            go_tests = logs / "orpheus.test"
        yield servers, go_tests
    finally:
        if build is not None and build.poll() is None:
            build.kill()
        for s in servers:
            s.stop()


def target(servers) -> str:
    return ",".join(s.addr for s in servers)


def serving(servers) -> list[ServerProcess]:
    """The live replicas with a session open."""
    out = []
    for srv in servers:
        if srv.proc.poll() is not None:
            continue
        stub = tts_pb2_grpc.TTSServiceStub(srv.channel)
        if stub.GetStatus(pb.GetStatusRequest(), timeout=5).active_sessions > 0:
            out.append(srv)
    return out


class Pusher:
    """Pushes the next sentence as each segment starts to play (not again when a cut
    segment starts over), and half-closes after the last."""

    def __init__(self) -> None:
        self.next = 1

    def due(self, ev) -> tuple[str | None, bool]:
        """(the sentence to send now, whether to end the input after it)."""
        if isinstance(ev, SegmentStart) and ev.segment_index == self.next - 1 \
                and self.next < len(SENTENCES):
            self.next += 1
            return SENTENCES[self.next - 1], self.next == len(SENTENCES)
        return None, False


def is_ready(ev, seen: list) -> bool:
    """The second segment's first audio: the moment to kill its replica (once)."""
    if isinstance(ev, AudioChunk) and ev.segment_index == 1 and not seen:
        seen.append(True)
        return True
    return False


def sync_session(addrs: str, ready: threading.Barrier) -> list:
    with Client(addrs, timeout=WAIT) as tts:
        with tts.session(sampling=Sampling(seed=1)) as s:
            s.send(SENTENCES[0])
            events, pusher, seen = [], Pusher(), []
            for ev in s:
                events.append(ev)
                text, last = pusher.due(ev)
                if text:
                    s.send(text)
                    if last:
                        s.end()
                if is_ready(ev, seen):
                    ready.wait(WAIT)
            return events


async def async_session(addrs: str, ready: threading.Barrier) -> list:
    async with AsyncClient(addrs, timeout=WAIT) as tts:
        async with tts.session(sampling=Sampling(seed=1)) as s:
            await s.send(SENTENCES[0])
            events, pusher, seen = [], Pusher(), []
            async for ev in s:
                events.append(ev)
                text, last = pusher.due(ev)
                if text:
                    await s.send(text)
                    if last:
                        await s.end()
                if is_ready(ev, seen):
                    await asyncio.get_running_loop().run_in_executor(None, ready.wait, WAIT)
            return events


def check_session(events: list) -> None:
    summary = check_resumed_stream(events, cut_segment=1, segments=len(SENTENCES))
    assert summary.resumes == 1
    assert [e.text for e in events if isinstance(e, SegmentEnd)] == [s.strip() for s in SENTENCES]


@pytest.mark.timeout(240)
def test_sessions_resume_on_another_replica_when_theirs_is_killed(replicas):
    servers, go_tests = replicas
    addrs = target(servers)
    parties = 3 if go_tests is not None else 2
    ready = threading.Barrier(parties + 1)  # every session at its second segment, and us
    results: dict[str, object] = {}

    def run(name, fn):
        try:
            results[name] = fn()
        except BaseException as exc:  # noqa: BLE001 - checked below
            results[name] = exc
            ready.abort()

    threads = [threading.Thread(target=run, args=("sync", lambda: sync_session(addrs, ready))),
               threading.Thread(target=run, args=("async", lambda: asyncio.run(
                   async_session(addrs, ready))))]
    go = None
    if go_tests is not None:  # the Go client, likewise, in its own process
        go = subprocess.Popen(
            [str(go_tests), "-test.run", "^TestLiveResumeAfterReplicaKilled$", "-test.v",
             "-test.count=1"], cwd=GO_CLIENT / "orpheus", stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "ORPHEUS_RESUME_REPLICAS": addrs})
        go_lines: list[str] = []

        def read_go():
            for line in go.stdout:
                go_lines.append(line)
                if line.strip() == GO_READY:
                    ready.wait(WAIT)

        threads.append(threading.Thread(target=read_go))
    for t in threads:
        t.start()
    try:
        ready.wait(WAIT)
    except threading.BrokenBarrierError:
        pass  # a session failed or never got there: its result says why
    victims = serving(servers) if not ready.broken else []
    for srv in victims:
        srv.signal(signal.SIGKILL)
    for t in threads:
        t.join(WAIT)
    for name in ("sync", "async"):
        if isinstance(results.get(name), BaseException):
            raise results[name]
    assert 1 <= len(victims) < len(servers), "the replicas serving the sessions were not found"
    assert all(v.wait_exit(10) == -signal.SIGKILL for v in victims)
    check_session(results["sync"])
    check_session(results["async"])
    if go is not None:
        assert go.wait(WAIT) == 0 and "--- PASS" in "".join(go_lines), "".join(go_lines)


@pytest.mark.timeout(120)
def test_a_session_whose_every_replica_dies_gets_the_error_within_its_resume_bounds(replicas):
    servers, _ = replicas
    with Client(target(servers), timeout=WAIT, resume=Resume(max_attempts=2)) as tts:
        with tts.session() as s:
            s.send(SENTENCES[0] + SENTENCES[1])
            s.end()
            events = iter(s)
            while not isinstance(next(events), AudioChunk):
                pass
            killed = time.monotonic()
            for srv in servers:
                if srv.proc.poll() is None:
                    srv.signal(signal.SIGKILL)
            with pytest.raises(TTSError) as err:
                for _ in events:
                    pass
    assert err.value.code == grpc.StatusCode.UNAVAILABLE
    # two resume attempts (their backoff is under 0.2 s), well inside the 10 s resume window
    assert time.monotonic() - killed < 5
