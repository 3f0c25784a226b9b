"""The pure parts of scripts/k8s-check.sh: its test-only overlay changes nothing but the image
pull policy, its session rule tells a whole (or resumed) session from one that lost audio,
and its DNS stand-in for the headless Service answers as CoreDNS would."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys

import yaml

from orpheus_tts_client import AudioChunk, SegmentEnd, SegmentStart, Summary
from tests.deploy.test_manifests import KUSTOMIZATIONS, ROOT, _kustomize

sys.path.insert(0, str(ROOT / "scripts" / "k8s"))
import headless_dns  # noqa: E402
from k8s_sessions import check_events  # noqa: E402


def _render(path) -> list[dict]:
    out = subprocess.run([_kustomize(), "build", str(path)], check=True, capture_output=True,
                         text=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def test_the_check_overlay_is_cpu_demo_with_the_image_never_pulled():
    shipped = _render(KUSTOMIZATIONS["cpu-demo"])
    checked = _render(ROOT / "scripts" / "k8s" / "overlay")
    deployment = [d for d in checked if d["kind"] == "Deployment"]
    assert len(deployment) == 1
    (container,) = deployment[0]["spec"]["template"]["spec"]["containers"]
    assert container["imagePullPolicy"] == "Never"
    container["imagePullPolicy"] = "IfNotPresent"  # as shipped: the only difference
    assert checked == shipped


def _events(segments: int, frames: int, cut: int | None = None) -> list:
    """A session's events; with cut, segment `cut` is spoken twice (a resume after its first
    chunk), its second SegmentStart at the offset the caller had reached."""
    ev, seq, off = [], 0, 0
    for i in range(segments):
        ev.append(SegmentStart(segment_index=i, text="x", sample_offset=off))
        for j in range(frames):
            ev.append(AudioChunk(audio=b"", segment_index=i, sequence_number=seq,
                                 sample_offset=off, num_samples=2048))
            seq, off = seq + 1, off + 2048
            if i == cut and j == 0:
                ev.append(SegmentStart(segment_index=i, text="x", sample_offset=off))
        ev.append(SegmentEnd(segment_index=i, text="x", num_samples=0, num_tokens=0,
                              finish_reason="stop"))
    ev.append(Summary(session_id="s", time_to_first_audio_ms=1, audio_ms=1, num_tokens=1,
                      num_segments=segments, num_samples=off, wall_ms=1,
                      resumes=0 if cut is None else 1))
    return ev


def test_a_whole_session_and_a_resumed_one_pass_and_a_lost_chunk_fails():
    whole = check_events(_events(3, 4), 3)
    assert whole.ok and whole.resumes == 0 and whole.samples == 3 * 4 * 2048
    resumed = check_events(_events(3, 4, cut=1), 3)
    assert resumed.ok and resumed.resumes == 1, resumed.error
    lost = _events(3, 4)
    del lost[3]  # one chunk of segment 0
    assert not check_events(lost, 3).ok
    short = _events(2, 4)
    assert not check_events(short, 3).ok  # a segment never ended
    assert not check_events(_events(3, 4)[:-1], 3).ok  # no summary


def _query(name: str, qtype: int) -> bytes:
    q = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    return struct.pack("!HHHHHH", 7, 0x0100, 1, 0, 0, 0) + q + struct.pack("!HH", qtype, 1)


def test_the_dns_stand_in_answers_ready_endpoints_only_for_its_name():
    slices = {"items": [{"addressType": "IPv4", "endpoints": [
        {"addresses": ["10.244.77.5"], "conditions": {"ready": True}},
        {"addresses": ["10.244.77.6"], "conditions": {"ready": False}},
        {"addresses": ["10.244.77.4"]}]}]}
    addrs = headless_dns.ready_addresses(slices)
    assert addrs == ["10.244.77.4", "10.244.77.5"]
    name = "orpheus-svc-headless.default.svc.cluster.local"
    a = headless_dns.answer(_query(name, 1), name, addrs)
    qid, flags, _, an, _, _ = struct.unpack("!HHHHHH", a[:12])
    assert (qid, flags & 0xF, an) == (7, 0, 2)
    assert a[-4:] == socket.inet_aton("10.244.77.5")
    aaaa = headless_dns.answer(_query(name, 28), name, addrs)
    assert struct.unpack("!HHHHHH", aaaa[:12])[3] == 0  # NOERROR, no records
    other = headless_dns.answer(_query("example.com", 1), name, addrs)
    assert struct.unpack("!HHHHHH", other[:12])[1] & 0xF == 3  # NXDOMAIN
