"""Failover over replicas: client-side health checking and retries of refused calls.

The replicas here are in-process fakes with the real grpc.health.v1 servicer (Check and
Watch), so a test can switch a replica to NOT_SERVING the way orpheus-svc does while it
loads or drains. tests/e2e/test_replicas.py does the same against real servers.
"""

from __future__ import annotations

import asyncio
import json
import time

import grpc
import pytest

from orpheus_tts_client import AsyncClient, Client, TTSError
from orpheus_tts_client._target import TTS_SERVICE, channel_options, service_config

from .replicas import RefusingServicer


def test_service_config_watches_tts_health_and_retries_refused_calls():
    config = service_config("round_robin", health_check=True, retries=2)
    assert config["loadBalancingConfig"] == [{"round_robin": {}}]
    assert config["healthCheckConfig"] == {"serviceName": "orpheus.tts.v1.TTSService"}
    streaming, method = config["methodConfig"]
    # gRPC retries every method but StreamingSynthesize (the clients retry it: see _retry);
    # a method's own entry wins over the service's
    assert streaming == {"name": [{"service": "orpheus.tts.v1.TTSService",
                                   "method": "StreamingSynthesize"}]}
    assert method["name"] == [{"service": "orpheus.tts.v1.TTSService"}]
    assert method["retryPolicy"]["maxAttempts"] == 3
    assert method["retryPolicy"]["retryableStatusCodes"] == ["UNAVAILABLE"]
    # off switches; no policy at all leaves gRPC's defaults
    assert service_config("round_robin") == {"loadBalancingConfig": [{"round_robin": {}}]}
    assert service_config(None, health_check=True) is None
    with pytest.raises(ValueError, match="retries"):
        service_config("round_robin", retries=5)


def test_clients_check_health_over_replicas_and_retry_by_default():
    with Client("127.0.0.1:1,127.0.0.1:2") as tts:
        assert tts.health_check is True and tts.retries == 2
        assert dict(channel_options("round_robin", health_check=True, retries=2)) \
            == dict(tts._options)
        config = json.loads(dict(tts._options)["grpc.service_config"])
        assert "healthCheckConfig" in config and "methodConfig" in config
    with Client("dns:///tts.internal:50051") as tts:
        assert tts.health_check is True
    # one host:port: no choice of replica, so no health check (the server's own message
    # for a refusal reaches the caller); retries still apply
    with Client("127.0.0.1:1") as tts:
        config = json.loads(dict(tts._options)["grpc.service_config"])
        assert tts.health_check is False and "healthCheckConfig" not in config
        assert "methodConfig" in config
    with Client("127.0.0.1:1", health_check=True) as tts:
        assert "healthCheckConfig" in json.loads(dict(tts._options)["grpc.service_config"])


def test_round_robin_skips_a_replica_that_is_not_serving_until_it_serves(replicas):
    loading, ready = replicas("loading", serving=False), replicas("ready")
    with Client(f"{loading.target},{ready.target}", retries=0, timeout=10) as tts:
        tts.wait_ready(10)
        for _ in range(6):
            tts.synthesize("Hi.")
        assert (loading.sessions(), ready.sessions()) == (0, 6)
        loading.set_serving(True)  # model loaded: it takes sessions again
        for _ in range(200):
            tts.synthesize("Hi.")
            if loading.sessions():
                break
            time.sleep(0.01)
        assert loading.sessions() > 0


def test_without_health_checks_a_not_serving_replica_still_gets_sessions(replicas):
    loading, ready = replicas("loading", serving=False), replicas("ready")
    with Client(f"{loading.target},{ready.target}", health_check=False, retries=0,
                timeout=10) as tts:
        for _ in range(200):
            tts.synthesize("Hi.")
            if loading.sessions():
                break
            time.sleep(0.01)
    assert loading.sessions() > 0


def test_health_and_status_still_answer_when_no_replica_is_serving(replicas):
    loading = replicas("loading", serving=False)
    with Client(loading.target, health_check=True, timeout=5) as tts:
        assert tts.health() == "NOT_SERVING"
        assert tts.health(TTS_SERVICE) == "NOT_SERVING"
        assert tts.status().backend == "fake"
        with pytest.raises(TTSError) as exc:
            tts.synthesize("Hi.", timeout=2)
        assert exc.value.code == grpc.StatusCode.UNAVAILABLE
    assert loading.sessions() == 0  # the refusal came from the client's balancer


@pytest.mark.parametrize("streaming", [False, True])
def test_a_call_refused_with_unavailable_is_retried_on_the_other_replica(replicas, streaming):
    # A replica that still reports SERVING but refuses (the instant between draining and the
    # client hearing of it): every session succeeds on the other, the text included.
    draining = replicas("draining", servicer_cls=RefusingServicer)
    ready = replicas("ready")
    with Client(f"{draining.target},{ready.target}", timeout=10) as tts:
        tts.wait_ready(10)
        done = 0
        for _ in range(100):
            if streaming:
                res = tts.synthesize_stream(["Hello ", "there."])
            else:
                res = tts.synthesize("Hello there.")
            assert [s.text for s in res.segments] == ["Hello there."]
            done += 1
            if draining.servicer.refused and done >= 4:
                break
            time.sleep(0.01)
    assert draining.servicer.refused > 0
    assert ready.sessions() == done
    if streaming:
        assert all(c.texts == ["Hello ", "there."] for c in ready.servicer.calls
                   if c.method == "StreamingSynthesize")


def test_with_retries_off_the_refusal_reaches_the_caller(replicas):
    draining = replicas("draining", servicer_cls=RefusingServicer)
    ready = replicas("ready")
    codes = set()
    with Client(f"{draining.target},{ready.target}", retries=0, timeout=10) as tts:
        tts.wait_ready(10)
        for _ in range(100):
            try:
                tts.synthesize("Hi.")
            except TTSError as e:
                codes.add(e.code)
                break
            time.sleep(0.01)
    assert codes == {grpc.StatusCode.UNAVAILABLE}


def test_async_client_skips_a_not_serving_replica_and_still_reports_its_health(replicas):
    loading, ready = replicas("loading", serving=False), replicas("ready")

    async def main():
        async with AsyncClient(f"{loading.target},{ready.target}", retries=0, timeout=10) as tts:
            await tts.wait_ready(10)
            for _ in range(4):
                await tts.synthesize("Hi.")
        async with AsyncClient(loading.target, health_check=True, timeout=5) as tts:
            return await tts.health(), (await tts.status()).backend

    assert asyncio.run(asyncio.wait_for(main(), 30)) == ("NOT_SERVING", "fake")
    assert (loading.sessions(), ready.sessions()) == (0, 4)
