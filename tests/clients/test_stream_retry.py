"""StreamingSynthesize retries done by the clients (orpheus_tts_client._retry).

gRPC's own retryPolicy replay lost a text fragment in 9-18 of 3,000 retried streaming calls
(grpcio 1.85.3; BENCHMARKS.md, "Retried streaming calls"), so the clients retry
StreamingSynthesize themselves. These tests drive a replica that refuses a
session after it has read the config and the first text, while the caller is still sending:
the retry must carry every fragment, in order, exactly once.
"""

from __future__ import annotations

import asyncio
import threading
import time

import grpc
import pytest

from orpheus_tts_client import FLUSH, AsyncClient, Client, TTSError
from orpheus_tts_client._aio_session import _SETTLE_S, _WRITE_RACE, AsyncSession, _StatusWatch
from orpheus_tts_client._retry import END, Attempts, ReplayInput, accepted, backoff_s
from orpheus_tts_client.proto.v1 import tts_pb2 as pb

from .replicas import DRAINING, EndlessServicer, FlakyServicer

# -- the rule and the backoff (pure) -----------------------------------------------------------


def test_a_call_counts_as_accepted_once_a_response_or_the_session_header_arrived():
    assert not accepted(False, None)
    assert not accepted(False, (("content-type", "application/grpc"),))
    assert accepted(False, (("orpheus-session-id", "abc"),))
    assert accepted(True, ())


def test_backoff_is_grpcs_doubling_random_wait_capped_at_one_second():
    assert [backoff_s(a, rand=lambda: 1.0) for a in (2, 3, 4, 5, 6, 7, 9)] \
        == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert backoff_s(3, rand=lambda: 0.5) == 0.05


def test_only_unavailable_before_acceptance_is_retried_within_attempts_and_deadline():
    now = [0.0]
    # without a resume policy, a call the server accepted is never tried again
    assert Attempts(retries=2, timeout=10.0).next_wait(unavailable=True, was_accepted=True) is None
    a = Attempts(retries=2, timeout=10.0, clock=lambda: now[0])
    assert a.next_wait(unavailable=False, was_accepted=False) is None
    assert a.next_wait(unavailable=True, was_accepted=False) is not None
    a.advance()
    now[0] = 4.0
    assert a.timeout() == 6.0  # a deadline covers every attempt
    assert a.may_retry(True, False)
    a.advance()
    assert not a.may_retry(True, False)  # 3 attempts made: retries used up
    draw = [1.0]
    b = Attempts(retries=4, timeout=1.0, clock=lambda: now[0], rand=lambda: draw[0])
    now[0] += 0.99  # 10 ms left
    assert b.next_wait(True, False) is None  # a 50 ms wait would pass the deadline
    draw[0] = 0.1
    assert b.next_wait(True, False) == pytest.approx(0.005)  # a 5 ms one would not
    now[0] += 1.0
    assert b.next_wait(True, False) is None and b.timeout() == 0.0
    assert Attempts(retries=0, timeout=None).next_wait(True, False) is None


def test_replay_input_gives_a_new_attempt_every_item_again_in_order():
    log = ReplayInput(iter(["a", "", "b", "c"]), convert=lambda x: x.upper() or None)
    assert [log.get(1, i) for i in range(3)] == ["A", "B", "C"]  # "" -> None: skipped
    assert log.get(1, 3) is END
    log.begin(2)
    assert log.get(1, 0) is END  # the earlier attempt's reader is done
    assert [log.get(2, i) for i in range(4)] == ["A", "B", "C", END]


def test_replay_input_keeps_an_item_a_stale_reader_took_for_the_next_attempt():
    items: list = []
    more = threading.Semaphore(0)
    blocked = threading.Event()

    def source():
        while True:
            blocked.set()
            more.acquire()
            item = items.pop(0)
            if item is None:
                return
            yield item

    log = ReplayInput(source())
    items.append("Hello ")
    more.release()
    assert log.get(1, 0) == "Hello "
    blocked.clear()
    stale: list = []
    t1 = threading.Thread(target=lambda: stale.append(log.get(1, 1)))
    t1.start()  # attempt 1's thread waits in the source for the next item
    assert blocked.wait(5)
    log.begin(2)
    assert log.get(2, 0) == "Hello "  # the replay does not wait for the stale reader
    second: list = []
    t2 = threading.Thread(target=lambda: second.append(log.get(2, 1)))
    t2.start()  # waits behind the stale reader for item 1
    items.extend(["there.", None])
    more.release()
    t1.join(5)
    t2.join(5)
    assert not t1.is_alive() and not t2.is_alive()
    assert stale == [END] and second == ["there."]  # taken by attempt 1, sent by attempt 2
    more.release()
    assert log.get(2, 2) is END


def test_replay_input_drops_sent_items_once_accepted_and_only_for_the_current_attempt():
    log = ReplayInput(iter("abcd"))
    assert [log.get(1, i) for i in range(3)] == ["a", "b", "c"]
    log.begin(2)
    assert log.get(2, 0) == "a"
    log.accept()  # "a", read by attempt 2, is dropped at once
    assert log.buffered() == 2
    assert log.get(1, 3) is END and log.buffered() == 2  # a stale reader drops nothing
    assert log.get(2, 1) == "b" and log.buffered() == 2
    assert log.get(2, 2) == "c" and log.buffered() == 1
    assert log.get(2, 3) == "d" and log.get(2, 4) is END


def test_input_read_whole_before_the_server_accepts_is_dropped_at_accept():
    """The gRPC thread may send every item and END before the first answer arrives (a
    loaded machine did, in CI): accept() must drop them, as no later read will."""
    log = ReplayInput(iter("abc"))
    assert [log.get(1, i) for i in range(4)] == ["a", "b", "c", END]
    assert log.buffered() == 3  # kept for a replay until the server accepts
    log.accept()
    assert log.buffered() == 0


def test_replay_input_without_retries_keeps_nothing_and_reraises_source_errors():
    def gen():
        yield "a"
        yield "b"
        raise OSError("pipe closed")

    log = ReplayInput(gen(), keep=False)
    assert log.get(1, 0) == "a" and log.get(1, 1) == "b" and log.buffered() == 1
    for _ in range(2):
        with pytest.raises(OSError, match="pipe closed"):
            log.get(1, 2)
    assert isinstance(log.error, OSError)


# -- the clients against refusing replicas -----------------------------------------------------


def _texts(servicer: FlakyServicer) -> list[list[str]]:
    return [c.texts for c in servicer.streaming_calls()]


def _sync_session_with_sends_during_the_retry(target: str, flaky: FlakyServicer,
                                              retries: int = 2):
    """Send the first fragment, read on another thread, send the rest once the replica has
    refused the first attempt (its gRPC thread is then blocked waiting for more input)."""
    with Client(target, timeout=10, retries=retries) as tts:
        s = tts.session()
        s.send("Hello ")
        events: list = []
        errors: list = []

        def read():
            try:
                events.extend(s)
            except TTSError as e:
                errors.append(e)

        reader = threading.Thread(target=read)
        reader.start()
        assert flaky.refused.wait(5)
        for item in ("there. ", FLUSH, "How are", " you?"):
            try:
                s.flush() if item is FLUSH else s.send(item)
            except TTSError as e:
                errors.append(e)
                break
        else:
            s.end()
        reader.join(10)
        assert not reader.is_alive()
        return [e.text for e in events if type(e).__name__ == "SegmentEnd"], errors


async def _async_session_with_sends_during_the_retry(target: str, flaky: FlakyServicer,
                                                     retries: int = 2):
    async with AsyncClient(target, timeout=10, retries=retries) as tts:
        s = tts.session()
        await s.send("Hello ")
        events: list = []

        async def read():
            async for ev in s:
                events.append(ev)

        reader = asyncio.ensure_future(read())
        while not flaky.refused.is_set():
            await asyncio.sleep(0.005)
        errors: list = []
        try:
            await s.send("there. ")
            await s.flush()
            await s.send("How are")
            await s.send(" you?")
            await s.end()
        except TTSError as e:
            errors.append(e)
        try:
            await asyncio.wait_for(reader, 10)
        except TTSError as e:
            errors.append(e)
        return [e.text for e in events if type(e).__name__ == "SegmentEnd"], errors


def _run(client: str, target: str, flaky: FlakyServicer, retries: int = 2):
    if client == "sync":
        return _sync_session_with_sends_during_the_retry(target, flaky, retries)
    return asyncio.run(_async_session_with_sends_during_the_retry(target, flaky, retries))


@pytest.mark.parametrize("client", ["sync", "async"])
def test_a_refused_session_is_sent_again_with_every_fragment_in_order(replicas, client):
    replica = replicas("flaky", servicer_cls=FlakyServicer, refusals=2)
    flaky = replica.servicer
    segments, errors = _run(client, replica.target, flaky)
    assert errors == []
    assert segments == ["Hello there.", "How are you?"]
    # two refused attempts (each read the config and the first text), then the whole input
    assert _texts(flaky) == [["Hello "], ["Hello "], ["Hello ", "there. ", "How are", " you?"]]
    served = flaky.streaming_calls()[-1]
    assert served.kinds == ["config", "text", "text", "flush", "text", "text"]


@pytest.mark.parametrize("client", ["sync", "async"])
@pytest.mark.parametrize("mode", ["accepted", "responded"])
def test_a_session_the_server_accepted_is_never_sent_again(replicas, client, mode):
    replica = replicas("flaky", servicer_cls=FlakyServicer, refusals=1, mode=mode)
    segments, errors = _run(client, replica.target, replica.servicer)
    assert [(e.code, e.details) for e in errors][:1] == [(grpc.StatusCode.UNAVAILABLE, DRAINING)]
    assert _texts(replica.servicer) == [["Hello "]]  # one attempt only


@pytest.mark.parametrize("client", ["sync", "async"])
@pytest.mark.parametrize("retries", [0, 2])
def test_retries_end_after_the_set_number_with_the_servers_status(replicas, client, retries):
    replica = replicas("flaky", servicer_cls=FlakyServicer, refusals=10)
    segments, errors = _run(client, replica.target, replica.servicer, retries=retries)
    assert segments == []
    assert [(e.code, e.details) for e in errors][-1:] == [(grpc.StatusCode.UNAVAILABLE,
                                                           DRAINING)]
    assert len(replica.servicer.streaming_calls()) == retries + 1


@pytest.mark.parametrize("client", ["sync", "async"])
def test_other_refusals_are_not_retried(replicas, client):
    replica = replicas("fake")
    with pytest.raises(TTSError) as err:
        if client == "sync":
            with Client(replica.target, timeout=10) as tts:
                tts.synthesize_stream(["Hi ", "there."], voice="nobody")
        else:
            async def main():
                async with AsyncClient(replica.target, timeout=10) as tts:
                    async for _ in tts.stream(["Hi ", "there."], voice="nobody"):
                        pass
            asyncio.run(main())
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert replica.sessions() == 1


def test_cancel_during_a_retry_ends_the_session_quietly(replicas):
    replica = replicas("flaky", servicer_cls=FlakyServicer, refusals=10)
    with Client(replica.target, timeout=10, retries=4) as tts:
        s = tts.session()
        s.send("Hello ")
        assert replica.servicer.refused.wait(5)
        threading.Timer(0.05, s.cancel).start()
        assert list(s) == []
        assert s.done
        with pytest.raises(TTSError) as err:
            s.send("more")
        assert err.value.code == grpc.StatusCode.CANCELLED


def test_async_cancel_during_a_retry_ends_the_session_quietly(replicas):
    replica = replicas("flaky", servicer_cls=FlakyServicer, refusals=10)

    async def main():
        async with AsyncClient(replica.target, timeout=10, retries=4) as tts:
            s = tts.session()
            await s.send("Hello ")
            reader = asyncio.ensure_future(_collect(s))
            while not replica.servicer.refused.is_set():
                await asyncio.sleep(0.005)
            asyncio.get_running_loop().call_later(0.05, s.cancel)
            events = await asyncio.wait_for(reader, 5)
            with pytest.raises(TTSError) as err:
                await s.send("more")
            return events, s.done, err.value.code

    assert asyncio.run(main()) == ([], True, grpc.StatusCode.CANCELLED)


async def _collect(session) -> list:
    return [ev async for ev in session]


@pytest.mark.parametrize("client", ["sync", "async"])
def test_leaving_a_session_after_the_reader_stopped_early_cancels_the_call(replicas, client):
    replica = replicas("endless", servicer_cls=EndlessServicer)
    if client == "sync":
        with Client(replica.target, timeout=30) as tts:
            with tts.session() as s:
                s.send("Hello there.")
                for _ in s:
                    break
                time.sleep(0.05)
            assert replica.servicer.ended.wait(5)  # while the channel is still open
        return

    async def main():
        async with AsyncClient(replica.target, timeout=30) as tts:
            async with tts.session() as s:
                await s.send("Hello there.")
                async for _ in s:
                    break
                await asyncio.sleep(0.05)  # the abandoned generator is closed meanwhile
            return await asyncio.get_running_loop().run_in_executor(
                None, replica.servicer.ended.wait, 5)

    assert asyncio.run(main())


@pytest.mark.parametrize("retries", [0, 2])
def test_a_finished_session_keeps_no_input_for_a_replay(fake, retries):
    with Client(fake.target, timeout=10, retries=retries) as tts:
        with tts.session() as s:
            for i in range(50):
                s.send(f"Sentence {i}. ")
            s.end()
            assert any(type(ev).__name__ == "Summary" for ev in s)
            assert s._input.buffered() == 0

    async def main():
        async with AsyncClient(fake.target, timeout=10, retries=retries) as tts:
            async with tts.session() as s:
                for i in range(50):
                    await s.send(f"Sentence {i}. ")
                await s.end()
                await _collect(s)
                return s._log

    log = asyncio.run(main())
    assert log is None if retries == 0 else len(log) == 0


# -- the async session's `done` while a write race hides the server's status ----------------

class _EndedCall:
    """A grpc.aio call stand-in that has ended: its status can be replaced, as grpc.aio
    replaces _WRITE_RACE with the server's status moments after a racing write failed."""

    def __init__(self) -> None:
        self.status: tuple = (None, None)
        self._callbacks: list = []

    def end(self, code, details) -> None:
        self.status = (code, details)
        for cb in self._callbacks:
            cb(self)

    def add_done_callback(self, cb) -> None:
        self._callbacks.append(cb)

    def done(self) -> bool:
        return self.status[0] is not None

    async def code(self):
        return self.status[0]

    async def details(self):
        return self.status[1]

    async def initial_metadata(self):
        return ()  # refused before the server accepted the call


def test_a_write_race_status_is_settling_until_the_server_status_or_the_settle_time():
    now = [100.0]
    call = _EndedCall()
    watch = _StatusWatch(call, clock=lambda: now[0])
    assert not watch.settling()  # not ended
    call.end(*_WRITE_RACE)
    assert watch.settling()
    now[0] += _SETTLE_S * 0.9
    assert watch.settling()
    now[0] += _SETTLE_S * 0.2
    assert not watch.settling() and watch.known() == _WRITE_RACE  # taken as the status

    call2, now[0] = _EndedCall(), 200.0
    watch2 = _StatusWatch(call2, clock=lambda: now[0])
    call2.end(*_WRITE_RACE)
    call2.status = (grpc.StatusCode.UNAVAILABLE, "draining")  # the server's, moments later
    assert not watch2.settling() and watch2.known()[0] == grpc.StatusCode.UNAVAILABLE


def test_an_async_session_is_not_done_while_a_refusal_may_hide_behind_a_write_race():
    async def main():
        calls = []

        def open_call(timeout):
            calls.append(_EndedCall())
            return calls[-1]

        s = AsyncSession(open_call, pb.StreamingSynthesizeRequest(), "pcm16", 24000,
                         retries=2, timeout=30)
        call = calls[0]
        call.end(*_WRITE_RACE)
        seen = [s.done]  # the server's status may still be a refusal that is retried
        call.status = (grpc.StatusCode.UNAVAILABLE, "draining")
        seen.append(s.done)  # refused before acceptance, attempts left: reading retries it
        call.status = (grpc.StatusCode.INVALID_ARGUMENT, "bad voice")
        seen.append(s.done)  # not retried: done
        return seen

    assert asyncio.run(main()) == [False, False, True]
