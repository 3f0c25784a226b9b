"""Helpers of the process-fault tests (test_process_faults.py): calls run in threads, each on
its own connection, and the processes a server started."""

from __future__ import annotations

import os
import re
import threading
import time
import urllib.request

import grpc
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc

from .rpc import FLUSH, requests

LONG = "A rather long sentence that keeps the model busy for a while. " * 3


class Call:
    """One StreamingSynthesize call on its own connection, read by a thread. With `idle`,
    the text is flushed and the request stream stays open (an idle call) until it is set."""

    def __init__(self, addr: str, text: str = LONG, seed: int | None = None,
                 idle: threading.Event | None = None) -> None:
        self.channel = grpc.insecure_channel(addr, options=[("grpc.use_local_subchannel_pool", 1)])
        stub = tts_pb2_grpc.TTSServiceStub(self.channel)
        sampling = pb.SamplingOptions(seed=seed) if seed is not None else None

        def held():
            yield from requests([text, FLUSH], sampling=sampling)
            idle.wait(120)
        self.call = stub.StreamingSynthesize(
            held() if idle is not None else requests([text], sampling=sampling))
        self.responses: list = []
        self.error: grpc.RpcError | None = None
        self.first_audio = threading.Event()
        self.done = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for r in self.call:
                self.responses.append(r)
                if r.WhichOneof("response") == "audio":
                    self.first_audio.set()
        except grpc.RpcError as exc:
            self.error = exc
        finally:
            self.done.set()
            self.channel.close()

    @property
    def ok(self) -> bool:
        return self.done.is_set() and self.error is None

    def code(self):
        return grpc.StatusCode.OK if self.error is None else self.error.code()


def start_calls(addr: str, n: int, **kw) -> list[Call]:
    calls = [Call(addr, **kw) for _ in range(n)]
    for c in calls:
        assert c.first_audio.wait(60) or c.done.wait(0), "a call never got audio"
    return calls


def wait_done(calls: list[Call], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    for c in calls:
        assert c.done.wait(max(0.0, deadline - time.monotonic())), "a call never ended"


def metric(port: int, name: str, labels: str = "") -> float | None:
    """One sample of a front-end's /metrics (None when absent or unreachable)."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    except OSError:
        return None
    m = re.search(rf"^{re.escape(name + labels)} (\S+)$", text.decode(), re.M)
    return float(m.group(1)) if m else None


def wait_for(pred, timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what or pred}")


def child_pids(logs: str) -> set[int]:
    """Every process the split topology's parent said it started."""
    pids = set()
    m = re.search(r"engine pid (\d+), front-end pids \[([0-9, ]+)\]", logs)
    if m:
        pids.add(int(m.group(1)))
        pids.update(int(p) for p in m.group(2).split(","))
    pids.update(int(p) for p in re.findall(r"front-end \d+ restarted: pid (\d+)", logs))
    return pids


def alive(pid: int) -> bool:
    """Running (a zombie, which only waits for its parent's wait, is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
