"""The pure parts of scripts/k8s-check.sh: its test-only overlays change nothing but the image
pull policy (and, for the scale step, KEDA's polling and the scale-down window), its session
rule tells a whole (or resumed) session from one that lost audio, its DNS stand-in for the
headless Service answers as CoreDNS would, and the scale step's report fails a step that lost
a session, did not scale either way, or never served a session from the pod it added."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys

import pytest
import yaml

from orpheus_tts_client import AudioChunk, SegmentEnd, SegmentStart, Summary
from tests.deploy.test_manifests import KUSTOMIZATIONS, ROOT, _kustomize

sys.path.insert(0, str(ROOT / "scripts" / "k8s"))
import headless_dns  # noqa: E402
import pod_state  # noqa: E402
import scale_report  # noqa: E402
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


def test_the_scale_overlay_is_cpu_demo_keda_with_faster_polling_and_scale_down():
    shipped = _render(ROOT / "deploy" / "k8s" / "overlays" / "cpu-demo-keda")
    checked = _render(ROOT / "scripts" / "k8s" / "overlay-keda")
    (deployment,) = [d for d in checked if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["imagePullPolicy"] == "Never"
    container["imagePullPolicy"] = "IfNotPresent"  # as shipped
    (so,) = [d for d in checked if d["kind"] == "ScaledObject"]
    assert so["spec"]["pollingInterval"] == 5
    down = so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
    assert down["stabilizationWindowSeconds"] == 45
    (shipped_so,) = [d for d in shipped if d["kind"] == "ScaledObject"]
    so["spec"]["pollingInterval"] = shipped_so["spec"]["pollingInterval"]
    down["stabilizationWindowSeconds"] = 600
    assert checked == shipped


def test_the_watchers_read_a_pod_as_ready_terminating_with_its_exit_code_or_neither():
    def pod(name, ready, deleting=False, exit_code=None):
        st = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
        if exit_code is not None:
            st["containerStatuses"] = [{"state": {"terminated": {"exitCode": exit_code}}}]
        meta = {"name": name, **({"deletionTimestamp": "x"} if deleting else {})}
        return {"metadata": meta, "status": st}
    row = {"ready": [], "terminating": {}}
    for p in (pod("a", True), pod("b", False), pod("c", True, deleting=True),
              pod("d", False, deleting=True, exit_code=0)):
        pod_state.add_pod(row, p)
    assert row == {"ready": ["a"], "terminating": {"c": None, "d": 0}}


def _row(t, desired, ready, sessions, terminating=None, value="2"):
    return {"t": t, "hpa": {"desired": desired, "current": len(ready), "value": value},
            "ready": ready, "terminating": terminating or {},
            "sessions": {p: [1.0, n] for p, n in sessions.items()}}


def _scale_run():
    """A scale step that passed: 2 pods, a third added at t=40 (first session at 70), group B
    stopped at 100, pod c removed (draining 100-110), 2 pods at the end."""
    rows = [_row(0, 2, ["a", "b"], {"a": 1, "b": 1}),
            _row(20, 3, ["a", "b"], {"a": 4, "b": 4, "c": 0}, value="2667m"),
            _row(40, 3, ["a", "b", "c"], {"a": 6, "b": 6, "c": 0}),
            _row(70, 3, ["a", "b", "c"], {"a": 8, "b": 8, "c": 1}),
            _row(150, 2, ["a", "b"], {"a": 9, "b": 9, "c": 2}, terminating={"c": None}),
            _row(160, 2, ["a", "b"], {"a": 9, "b": 9, "c": 2}, terminating={"c": 0}),
            _row(170, 2, ["a", "b"], {"a": 10, "b": 10})]
    ok = {"ok": True, "resumes": 0, "samples": 24000, "error": "", "client": 0}
    log = '{"event": "shutting down", "active_sessions": 1, "grace_s": 30.0}\n'
    return rows, [ok] * 3, [ok] * 5, {"c": log}


def test_the_scale_report_passes_a_whole_scale_out_and_in():
    rows, a, b, logs = _scale_run()
    lines, ok = scale_report.summarise(rows, 0.0, 100.0, a, b, logs)
    assert ok, lines
    text = "\n".join(lines)
    assert "8 started" in text and "0 failed" in text
    assert "asked for 3 pods at +20 s" in text and "up to 2.67 open calls" in text
    assert "c Ready at +40 s" in text and "at +70 s, 30 s after it was Ready" in text
    assert "2 pods at +50 s after group B stopped" in text
    assert "c terminating at +50 s for 10 s, exit codes [0], 'shutting down' with 1" in text
    assert scale_report.new_pod_first_session(rows) == ("c", 70)
    answer = {"data": {"result": [{"metric": {"pod": "b"}, "value": [1, "3"]},
                                  {"metric": {"pod": "a"}, "value": [1, "7.0"]}]}}
    assert scale_report.per_pod(answer) == "a 7, b 3"
    assert scale_report.quantity("2667m") == pytest.approx(2.667) and scale_report.quantity("3") == 3


def test_the_scale_report_fails_what_the_step_must_show():
    rows, a, b, logs = _scale_run()
    cut = dict(a[0], ok=False, error="UNAVAILABLE")
    assert not scale_report.summarise(rows, 0.0, 100.0, [cut] + a[1:], b, logs)[1]
    never_out = [dict(r, hpa=dict(r["hpa"], desired=2)) for r in rows]
    assert not scale_report.summarise(never_out, 0.0, 100.0, a, b, logs)[1]
    unserved = [dict(r, sessions={p: v for p, v in r["sessions"].items() if p != "c"})
                for r in rows]
    assert not scale_report.summarise(unserved, 0.0, 100.0, a, b, logs)[1]
    assert scale_report.new_pod_first_session(unserved) is None
    never_in = rows[:4]
    assert not scale_report.summarise(never_in, 0.0, 100.0, a, b, logs)[1]
    dropped = rows[:-1] + [_row(170, 2, ["a"], {"a": 10})]
    assert not scale_report.summarise(dropped, 0.0, 100.0, a, b, logs)[1]
    dipped = rows[:5] + [_row(155, 2, ["a"], {"a": 9})] + rows[5:]
    assert not scale_report.summarise(dipped, 0.0, 100.0, a, b, logs)[1]
    vanished = [dict(r, terminating={}) for r in rows]  # c never seen going
    assert not scale_report.summarise(vanished, 0.0, 100.0, a, b, logs)[1]
    assert not scale_report.summarise(rows, 0.0, 100.0, a, [], logs)[1]


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
