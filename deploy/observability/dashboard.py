"""Writes dashboard.json, the orpheus-svc Grafana dashboard (python3 dashboard.py).

The dashboard is data; this script is where it is edited, so that every panel is written
the same way (datasource variable, per-replica filter, rate window) and the JSON stays
reviewable. tests/deploy/test_observability.py fails when dashboard.json is not what this
writes, and tests/telemetry/test_dashboard.py runs every panel's query against a real
Prometheus scraping a real server. What each panel shows: docs/observability.md.

One row per question an operator asks:
  1. Why was a call's first audio slow?    (queue, prefill, steps, codec; a call: its trace)
  2. Is the fleet keeping up?              (per replica, and the fleet's sums)
  3. Wake me when it stops keeping up      (each alert's signal, at its threshold)
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).with_name("dashboard.json")
DS = {"type": "prometheus", "uid": "${datasource}"}
J = 'job=~"$job"'
JI = 'job=~"$job", instance=~"$instance"'
W = "$__rate_interval"
REAL_TIME_STEP_S = 0.01219  # 1 / 82.03 tokens/s: ipc/histograms.py REAL_TIME_STEP_S


def q(hist: str, quantile: float, sel: str, by: str = "") -> str:
    group = f"sum by ({by + ', ' if by else ''}le)"
    return f"histogram_quantile({quantile}, {group} (rate({hist}_bucket{{{sel}}}[{W}])))"


def panel(title, targets, unit="short", desc="", thresholds=None, w=8, h=8, max_=None):
    steps = [{"color": "green", "value": None}]
    if thresholds is not None:
        steps.append({"color": "red", "value": thresholds})
    defaults = {"unit": unit, "thresholds": {"mode": "absolute", "steps": steps},
                "custom": {"thresholdsStyle": {"mode": "line" if thresholds is not None else "off"}}}
    if max_ is not None:
        defaults["max"] = max_
    return {"type": "timeseries", "title": title, "description": desc, "datasource": DS,
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"},
                        "tooltip": {"mode": "multi"}},
            "targets": [{"datasource": DS, "expr": e, "legendFormat": l, "refId": chr(65 + i)}
                        for i, (e, l) in enumerate(targets)],
            "_w": w, "_h": h}


def text(title, content, w=8, h=8):
    return {"type": "text", "title": title, "options": {"mode": "markdown", "content": content},
            "_w": w, "_h": h}


ROWS = [
    ("Why was a call's first audio slow? (queue, prefill, steps, codec)", [
        panel("Time to first audio (fleet)", [
            (q("orpheus_time_to_first_audio_seconds", p, J), f"p{int(p * 100)}")
            for p in (0.5, 0.95, 0.99)], "s", thresholds=0.5,
            desc="First text received to first audio sent, server side. SLO: p95 under 0.5 s."),
        panel("Queue: wait for a KV slot (p95)", [
            (q("orpheus_admission_wait_seconds", 0.95, f'{J}, segment="first"'), "first segments"),
            (q("orpheus_admission_wait_seconds", 0.95, f'{J}, segment="later"'), "later segments")],
            "s", desc="From a generation's arrival at the engine to its KV slot."),
        panel("Prefill: admission to first token (p95)", [
            (q("orpheus_first_token_seconds", 0.95, f'{J}, segment="first"'), "first segments"),
            (q("orpheus_first_token_seconds", 0.95, f'{J}, segment="later"'), "later segments")],
            "s", desc="The prompt's prefill and the steps it waited for its first token."),
        panel("Steps: engine step period", [
            (q("orpheus_engine_step_seconds", 0.5, J), "p50"),
            (q("orpheus_engine_step_seconds", 0.99, J), "p99")], "s", thresholds=REAL_TIME_STEP_S,
            desc="Time per engine step; above the red line (12.19 ms) every running session "
                 "gets less than real time."),
        panel("Codec: windows per SNAC call (p50) and batch per step (p50)", [
            (q("orpheus_codec_batch_windows", 0.5, J), "windows per codec call"),
            (q("orpheus_engine_batch_size", 0.5, J), "generations per step")],
            desc="How much each codec call and each step carries."),
        text("One call: its trace", (
            "Time to first audio of one call, part by part, is in its trace (tracing on: "
            "`OTEL_TRACES_EXPORTER=otlp`). Search your tracing backend for "
            "`orpheus.session_id` (the session id the client got in its summary and the "
            "`orpheus-session-id` header): the call span's segments show `admission_wait`, "
            "`prefill`, then the `first_token`, `first_audio` and `end` events; the rest up "
            "to the client is the network. docs/observability.md.")),
    ]),
    ("Is the fleet keeping up? (per replica, then the fleet)", [
        panel("Time to first audio p95 by replica", [
            (q("orpheus_time_to_first_audio_seconds", 0.95, JI, "instance"), "{{instance}}")],
            "s", thresholds=0.5),
        panel("Late audio: share of audio sent late, by replica", [
            (f"sum by (instance) (rate(orpheus_late_audio_seconds_total{{{JI}}}[{W}])) / "
             f"sum by (instance) (rate(orpheus_audio_seconds_total{{{JI}}}[{W}]))", "{{instance}}")],
            "percentunit", thresholds=0.01,
            desc="Audio sent after its listener's playout deadline: the server's view of an underrun."),
        panel("KV slots in use by replica", [
            (f"orpheus_slots_used{{{JI}}} / (orpheus_slots_used{{{JI}}} + orpheus_slots_free{{{JI}}})",
             "{{instance}}")], "percentunit", thresholds=0.9, max_=1),
        panel("Generations waiting for a slot by replica", [
            (f"orpheus_generations_waiting{{{JI}}}", "{{instance}}")]),
        panel("Engine step period p50 by replica", [
            (q("orpheus_engine_step_seconds", 0.5, JI, "instance"), "{{instance}}")], "s",
            thresholds=REAL_TIME_STEP_S),
        panel("Sessions by replica", [
            (f"orpheus_sessions_active{{{JI}}}", "{{instance}} active"),
            (f"orpheus_underrun_risk_sessions{{{JI}}}", "{{instance}} under 250 ms buffered")]),
        panel("Serving by replica", [(f"orpheus_serving{{{JI}}}", "{{instance}}")], max_=1),
        panel("Refused and failed by replica (per second)", [
            (f"rate(orpheus_rejected_total{{{JI}}}[{W}])", "{{instance}} refused: full"),
            (f"rate(orpheus_failed_generations_total{{{JI}}}[{W}])", "{{instance}} failed")]),
        panel("Fleet: audio streamed (seconds per second) and slots in use", [
            (f"sum(rate(orpheus_audio_seconds_total{{{J}}}[{W}]))", "audio s/s"),
            (f"sum(orpheus_slots_used{{{J}}})", "slots used"),
            (f"sum(orpheus_slots_used{{{J}}} + orpheus_slots_free{{{J}}})", "slots")]),
    ]),
    ("Wake me when it stops keeping up (each alert's signal and threshold)", [
        panel("OrpheusTimeToFirstAudioHigh: p95 over 5 min", [
            (f"job:orpheus_time_to_first_audio_seconds:p95_5m{{{J}}}", "{{job}}")], "s",
            thresholds=0.5),
        panel("OrpheusLateAudio: late share over 5 min", [
            (f"job:orpheus_late_audio:ratio_5m{{{J}}}", "{{job}}")], "percentunit",
            thresholds=0.01),
        panel("OrpheusSlotsNearlyFull: slots in use", [
            (f"instance:orpheus_slots_used:ratio{{{JI}}}", "{{instance}}")], "percentunit",
            thresholds=0.9, max_=1),
        panel("OrpheusQueueGrowing: waiting generations' trend (per second)", [
            (f"instance:orpheus_generations_waiting:deriv_10m{{{JI}}}", "{{instance}}")],
            thresholds=0),
        panel("OrpheusReplicaNotServing: serving and scraped", [
            (f"orpheus_serving{{{JI}}}", "{{instance}} serving"),
            (f"up{{{JI}}}", "{{instance}} scraped")], max_=1),
        panel("OrpheusStepPastRealTime: share of steps over 12.19 ms", [
            (f"instance:orpheus_engine_steps_past_real_time:ratio_5m{{{JI}}}", "{{instance}}")],
            "percentunit", thresholds=0.5, max_=1),
    ]),
]


def variable(name, query, label, multi=False):
    return {"name": name, "label": label, "type": "query", "datasource": DS,
            "query": {"query": query, "refId": name}, "definition": query, "refresh": 2,
            "multi": multi, "includeAll": multi, "allValue": ".*" if multi else None,
            "current": {}, "sort": 1}


def dashboard() -> dict:
    panels, y, pid = [], 0, 1
    for title, row in ROWS:
        panels.append({"type": "row", "title": title, "id": pid, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        pid, y, x = pid + 1, y + 1, 0
        for p in row:
            w, h = p.pop("_w"), p.pop("_h")
            if x + w > 24:
                x, y = 0, y + h
            p.update(id=pid, gridPos={"h": h, "w": w, "x": x, "y": y})
            panels.append(p)
            pid, x = pid + 1, x + w
        y += 8
    return {
        "title": "orpheus-svc", "uid": "orpheus-svc", "tags": ["orpheus-svc", "tts"],
        "description": "Streaming TTS: time to first audio, late audio, slots, queue, steps. "
                       "docs/observability.md explains each panel.",
        "editable": True, "schemaVersion": 39, "version": 1, "refresh": "30s",
        "time": {"from": "now-3h", "to": "now"}, "timezone": "", "graphTooltip": 1,
        "templating": {"list": [
            {"name": "datasource", "label": "Prometheus", "type": "datasource",
             "query": "prometheus", "current": {}, "hide": 0},
            variable("job", "label_values(orpheus_serving, job)", "Fleet (job)"),
            variable("instance", 'label_values(orpheus_serving{job=~"$job"}, instance)',
                     "Replica", multi=True),
        ]},
        "panels": panels, "annotations": {"list": []}, "links": [],
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
    print(f"wrote {OUT}")
