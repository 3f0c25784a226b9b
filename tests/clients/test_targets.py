"""Target parsing and spreading sessions over replicas with round_robin."""

import json
import time

import pytest

from orpheus_tts_client import Client
from orpheus_tts_client._target import channel_options, resolve_target


@pytest.mark.parametrize("target, expected", [
    ("localhost:50051", "localhost:50051"),
    ("dns:///tts.internal:50051", "dns:///tts.internal:50051"),
    ("10.0.0.1:50051, 10.0.0.2:50052", "ipv4:10.0.0.1:50051,10.0.0.2:50052"),
    ("localhost:1,127.0.0.1:2", "ipv4:127.0.0.1:1,127.0.0.1:2"),
    ("[::1]:1,[::1]:2", "ipv6:[::1]:1,[::1]:2"),
    ("ipv4:10.0.0.1:1,10.0.0.2:2", "ipv4:10.0.0.1:1,10.0.0.2:2"),
    ("unix:///run/tts.sock", "unix:///run/tts.sock"),
])
def test_targets_map_to_grpc_targets(target, expected):
    assert resolve_target(target) == expected


def test_bad_target_lists_are_refused_with_a_reason():
    with pytest.raises(ValueError, match="host:port"):
        resolve_target("10.0.0.1,10.0.0.2:1")
    with pytest.raises(ValueError, match="empty"):
        resolve_target("  ")


def test_lb_policy_goes_into_the_service_config():
    opts = dict(channel_options("round_robin", [("grpc.max_receive_message_length", 1 << 24)]))
    assert json.loads(opts["grpc.service_config"]) == {"loadBalancingConfig": [{"round_robin": {}}]}
    assert opts["grpc.max_receive_message_length"] == 1 << 24
    assert channel_options(None) == []


def _spread(client, servers, attempts=200):
    for _ in range(attempts):
        client.synthesize("Hi.")
        if all(s.servicer.num_calls for s in servers):
            break
        time.sleep(0.005)  # let the second subchannel finish connecting
    return [s.servicer.num_calls for s in servers]


def test_comma_target_with_round_robin_spreads_sessions_over_both_replicas(fake_pair):
    a, b = fake_pair
    with Client(f"{a.target},localhost:{b.port}") as tts:
        assert tts.lb_policy == "round_robin"
        counts = _spread(tts, fake_pair)
        assert all(counts), counts
        # once both are connected, successive sessions alternate
        before = [s.servicer.num_calls for s in fake_pair]
        for _ in range(10):
            list(tts.stream(["Hi."]))
        after = [s.servicer.num_calls for s in fake_pair]
    assert [x - y for x, y in zip(after, before)] == [5, 5]


def test_pick_first_keeps_every_session_on_one_replica(fake_pair):
    a, b = fake_pair
    with Client(f"{a.target},{b.target}", lb_policy="pick_first") as tts:
        for _ in range(6):
            tts.synthesize("Hi.")
    counts = sorted(s.servicer.num_calls for s in fake_pair)
    assert counts == [0, 6]
