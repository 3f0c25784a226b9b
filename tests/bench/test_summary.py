"""Results hygiene (issue 16): the summary keeps every run-level figure and drops the
per-session records; raw results go outside the repository by default; the committed
summaries still hold the figures BENCHMARKS.md quotes."""

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from orpheus_bench import cli, summary
from orpheus_bench.metrics import SessionTrace, aggregate, session_metrics, slo_check

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"


def level(c):
    traces = [SessionTrace(index=i, t_start=0.0, t_end=2.0,
                           arrivals=[(0.05 + k * 0.1, 2400) for k in range(10)]) for i in range(4)]
    sm = [session_metrics(t) for t in traces]
    r = {"label": "scaling", "concurrency": c, "requests": 4, "input": "whole",
         "text_set": "conversational", **aggregate(sm, 2.0)}
    r["server"] = {"cpu_util": 0.5, "cpu_s_per_audio_s": 0.002, "tokens_per_s": 1000.0,
                   "threads": [{"tid": 1, "name": "engine", "cpu_s": 0.4}]}
    r["load"] = {"cpu_util_per_proc": [0.1], "maybe_saturated": False}
    r["sim"] = {"steps": 50, "host_bound_steps": 3, "host_excess_s": 0.01,
                "step_ms": {"n": 10, "p50": 12.0, "p95": 14.0, "p99": 15.0, "max": 16.0}}
    r["slo"] = slo_check(r)
    r["sessions_detail"] = [{"i": m.index, "code": m.code, "audio_s": m.audio_s,
                             "rtf": m.rtf, "tokens": 100} for m in sm]
    r["traces"] = [t.to_dict() for t in traces]
    return r


def doc():
    return {"tool": "orpheus-bench", "version": "0.1.0",
            "meta": {"argv": ["orpheus-bench", "scaling"], "pace": "none"},
            "runs": [level(8), level(16)], "tuning": {"max_passing_concurrency": 16}}


def test_summary_keeps_the_run_figures_and_drops_per_session_records():
    d = doc()
    s = summary.summarize_doc(d, raw={"path": "/elsewhere/x.raw.json"})
    assert s["summary"] is True and s["raw"] == {"path": "/elsewhere/x.raw.json"}
    assert s["meta"] == d["meta"] and s["tuning"] == d["tuning"]
    for r, full in zip(s["runs"], d["runs"]):
        assert "sessions_detail" not in r and "traces" not in r
        for key in ("ttfb_ms", "ttfb_text_ms", "underruns", "audio_s_per_wall_s", "server",
                    "load", "slo", "sim", "concurrency", "success_rate"):
            assert r[key] == full[key]
        assert r["sim"]["host_bound_steps"] == 3 and r["sim"]["step_ms"]["p99"] == 15.0
        assert r["row"].split()[2] == str(full["concurrency"])
        # derived from the per-session records, so checkable without them
        assert r["per_session"]["open_calls_mean"] == pytest.approx(
            sum(x["rtf"] * x["audio_s"] for x in full["sessions_detail"]) / full["wall_s"], abs=1e-4)
        assert r["per_session"]["tokens"]["n"] == 4


def test_summary_file_is_valid_json_and_far_smaller(tmp_path):
    raw = tmp_path / "run.json"
    raw.write_text(json.dumps(doc(), indent=1))
    out = summary.summarize_file(raw)
    assert out == tmp_path / "run.summary.json"
    s = json.loads(out.read_text())
    assert s["raw"]["derived_from"]["sha256"] and s["raw"]["derived_from"]["bytes"] == raw.stat().st_size
    assert out.stat().st_size < raw.stat().st_size / 2
    assert s["runs"][1]["concurrency"] == 16


def test_log_digest_counts_events_and_keeps_the_non_session_lines(tmp_path):
    log = tmp_path / "server.log"
    lines = [{"event": "serving", "level": "info"}]
    lines += [{"event": "session finished", "session_id": f"s{i}", "level": "info",
               "timestamp": f"t{i}"} for i in range(50)]
    lines += [{"event": "boom", "level": "error", "session_id": "s9"}, {"event": "stopped", "level": "info"}]
    log.write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json\n")
    d = summary.summarize_log(log)
    assert d["lines"] == 54 and d["events"]["session finished"] == 50
    assert d["first"] == "t0" and d["last"] == "t49"
    kept = [json.loads(x)["event"] if x.startswith("{") else x for x in d["notable"]]
    assert kept == ["serving", "boom", "stopped", "not json"]


def test_raw_goes_outside_the_repository_by_default(monkeypatch, tmp_path):
    monkeypatch.delenv(summary.RAW_ENV, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    output = RESULTS / "capacity-x" / "conversational-whole.summary.json"
    raw = summary.default_raw_path(output)
    assert not raw.resolve().is_relative_to(REPO)
    assert raw == tmp_path / "home" / ".cache" / "orpheus-bench" / "raw" / "capacity-x" / \
        "conversational-whole.raw.json"
    assert not summary.inside_git_worktree(raw)
    monkeypatch.setenv(summary.RAW_ENV, str(tmp_path / "mine"))
    assert summary.default_raw_path(output, gz=True) == \
        tmp_path / "mine" / "capacity-x" / "conversational-whole.raw.json.gz"


def test_cli_writes_the_summary_to_output_and_the_raw_elsewhere(monkeypatch, tmp_path):
    """The CLI's save path, with a fake server: --output gets the summary, the raw document
    goes to the raw directory (gzipped with --raw-gzip); nothing raw next to the summary."""
    monkeypatch.setenv(summary.RAW_ENV, str(tmp_path / "raw"))
    monkeypatch.setattr(cli, "status", lambda target: {"serving": True, "backend": "sim"})
    monkeypatch.setattr(cli, "machine", lambda: {})

    class FakeRunner:
        def __init__(self, opts):
            pass

        def warmup(self, n):
            pass

        def scaling(self, levels, requests, rounds, duration, on_result):
            for c in levels:
                on_result(level(c))

    monkeypatch.setattr(cli, "Runner", FakeRunner)
    out = tmp_path / "repo" / "results" / "run.summary.json"
    assert cli.main(["scaling", "--concurrent", "8,16", "--output", str(out), "--raw-gzip",
                     "--warmup", "0"]) == 0
    s = json.loads(out.read_text())
    assert [r["concurrency"] for r in s["runs"]] == [8, 16]
    assert all("sessions_detail" not in r for r in s["runs"])
    raw = tmp_path / "raw" / "results" / "run.raw.json.gz"
    assert s["raw"]["path"] == str(raw)
    full = json.loads(gzip.decompress(raw.read_bytes()))
    assert len(full["runs"][0]["sessions_detail"]) == 4
    assert sorted(p.name for p in out.parent.iterdir()) == ["run.summary.json"]
    assert cli.main(["scaling", "--concurrent", "8", "--output", str(out), "--no-raw",
                     "--warmup", "0"]) == 0
    assert json.loads(out.read_text()).get("raw") is None


def test_no_raw_results_are_committed():
    """What bench/results holds: summaries, tables, the plots the docs show, a few small
    benchmark JSONs named here; no per-session records, no server logs (the committed files: a local
    run may leave ignored raw files here)."""
    try:
        listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "bench/results"],
                                capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    files = [REPO / f for f in listed if (REPO / f).exists()]
    assert files
    for p in files:
        assert p.suffix in (".json", ".txt", ".png"), p
        if p.suffix == ".json" and not p.name.endswith(".summary.json"):
            assert p.name in ("engine_batching.json", "soak-10000.json", "loss-3000.json",
                              "before-gpu-torch.json", "before-profile.json",
                              "after-gpu-torch.json", "floor-10ms-work0.json",
                              "floor-10ms-work1.json",
                              # the graph engine's GPU check (issue 28 names summary.json)
                              "summary.json", "gpu-engine.json", "run1-summary.json",
                              "run1-gpu-engine.json",
                              # issue 33: the seed guard's verdict, the CPU invariance cost
                              "verdict.json", "invariance-cost-cpu.json",
                              "lora-cost-cpu.json",  # issue 34: bench/lora_cost.py
                              # the A/B scripts' reports (tracing-ab.sh, run-ahead-ab.sh)
                              "report.json",
                              "table.json"), p  # bench/reference_ttfb.py (issue 43)
        if p.name.endswith(".summary.json"):
            text = p.read_text()
            assert '"sessions_detail"' not in text and '"traces"' not in text, p
    shown = "".join((REPO / f).read_text() for f in ["BENCHMARKS.md"])
    for png in (p for p in files if p.suffix == ".png"):
        assert str(png.relative_to(REPO)) in shown, png


def _run(path, concurrency):
    s = json.loads((RESULTS / path).read_text())
    return next(r for r in s["runs"] if r["concurrency"] == concurrency), s


@pytest.mark.parametrize("path,c,p50,p95,p99,underruns,cores", [
    # BENCHMARKS.md, Capacity: conversational whole at each concurrency
    ("capacity-quiet/conversational-whole.summary.json", 64, 20, 23, 24, 0, 0.12),
    ("capacity-quiet/conversational-whole.summary.json", 512, 37, 50, 61, 0, 0.58),
    ("capacity-quiet/conversational-whole.summary.json", 640, 63, 115, 148, 0, 0.64),
    ("capacity-quiet/conversational-whole.summary.json", 704, 102, 167, 203, 31, 0.66),
    ("capacity-quiet/conversational-whole.summary.json", 1024, 1076, 1958, 2139, 23814, 0.72),
    # 32 KV slots
    ("capacity-quiet-32slots/conversational-whole.summary.json", 160, 40, 100, 126, 0, 0.37),
    # longform, the three code states
    ("capacity-quiet-longform-noparking/longform-whole-256.summary.json", 256, 30, 471, 610, 9, 0.90),
    ("capacity-quiet-longform/longform-whole.summary.json", 384, 37, 517, 690, 122, 0.86),
    ("capacity-quiet-longform-v2/longform-whole-256-320.summary.json", 256, 25, 39, 47, 0, 0.70),
    ("capacity-quiet-longform-v2/longform-whole.summary.json", 512, 39, 200, 270, 8317, 0.82),
    # conversational re-check, scheduling policy, demo
    ("capacity-quiet-ab/old-0.summary.json", 640, 107, 229, 305, 16, 0.75),
    ("capacity-quiet-ab/final-512-576.summary.json", 576, 47, 69, 83, 0, 0.62),
    ("policy-quiet/fifo.summary.json", 96, 1742, 2418, 2640, 0, 0.28),
    ("policy-quiet/round_robin.summary.json", 96, 97, 188, 216, 3996, 0.47),
    ("demo-quiet-after/scaling-c8-r16.summary.json", 8, 521, 858, 867, 165, 1.78),
    # issue 16, fourth round: one turn with the collector off; six turns, main
    ("hostpath-gil4/nogc-1.summary.json", 512, 46, 66, 78, 0, 0.49),
    ("hostpath-gil4/head-6r.summary.json", 512, 54, 81, 108, 8, 0.66),
    # issue 16, fifth round: batch state as arrays, before and after (six turns)
    ("hostpath-arrays5/before-6r-2.summary.json", 512, 59, 81, 103, 29, 0.72),
    ("hostpath-arrays5/after-6r-2.summary.json", 512, 50, 61, 71, 0, 0.57),
    ("hostpath-arrays5/after-split1-6r.summary.json", 512, 53, 64, 77, 1, 0.68),
    # sixth round: the collector at the engine's pace
    ("hostpath-gc6/before-1.summary.json", 512, 49, 57, 63, 0, 0.49),
    ("hostpath-gc6/gcp-2.summary.json", 512, 48, 53, 55, 0, 0.40),
    ("hostpath-gc6/gcp-768p.summary.json", 768, 48, 53, 57, 0, 0.40),
    ("hostpath-gc6/gcp-split2.summary.json", 512, 51, 61, 68, 0, 0.61),
    # seventh round: a slow, noisy window (the same build at 135 and 1,644 ms p95)
    ("hostpath-review7/before-256-1.summary.json", 256, 112, 312, 420, 117, 0.87),
    ("hostpath-review7/head-256-3.summary.json", 256, 74, 135, 163, 1, 0.84),
    ("hostpath-review7/head-256-4.summary.json", 256, 106, 1644, 1999, 14, 0.86),
    ("hostpath-review7/head-512-1.summary.json", 512, 110, 452, 718, 33, 0.93),
    ("hostpath-review7/prev-512-2.summary.json", 512, 111, 337, 462, 22, 0.92),
    ("hostpath-review7/final-512-2.summary.json", 512, 103, 367, 731, 31, 0.92),
    # eighth round: the front-end reniced in the split topology (slow window, 192 sessions)
    ("split-nice8/single-192-1.summary.json", 192, 63, 257, 478, 13, 0.81),
    ("split-nice8/split-192-2.summary.json", 192, 82, 237, 302, 76, 0.85),
    ("split-nice8/split-nice-192-1.summary.json", 192, 2716, 4344, 4579, 0, 0.90),
    ("split-nice8/split-nice3-192-2.summary.json", 192, 75, 1292, 1361, 8, 0.85),
    ("split-nice8/single-192-b2.summary.json", 192, 52, 91, 147, 0, 0.71),
    ("split-nice8/split-own-256-2.summary.json", 256, 64, 109, 147, 14, 0.97),
    ("split-nice8/single-256-3.summary.json", 256, 90, 246, 353, 7, 0.86),
])
def test_committed_summaries_hold_the_figures_benchmarks_md_quotes(path, c, p50, p95, p99,
                                                                   underruns, cores):
    r, _ = _run(path, c)
    t = r["ttfb_ms"]
    assert (round(t["p50"]), round(t["p95"]), round(t["p99"])) == (p50, p95, p99)
    assert r["underruns"]["events_total"] == underruns
    assert round(r["server"]["cpu_util"], 2) == cores


def test_the_paced_runs_hold_the_host_bound_steps_benchmarks_md_quotes():
    got = [_run(f"hostpath-gc6/{name}.summary.json", 512)[0]["sim"]["host_bound_steps"]
           for name in ("before-1", "gcp-1", "arr-1", "gcp-2", "before-2", "gcp-3")]
    assert got == [49, 1, 24, 0, 47, 4]


def test_the_reniced_front_end_runs_hold_the_host_bound_steps_benchmarks_md_quotes():
    names = ["single-192-1", "split-192-1", "split-nice-192-1", "single-192-2", "split-192-2",
             "split-nice-192-2", "single-192-3", "split-192-3", "split-nice-192-3",
             "single-192-b1", "split-nice3-192-1", "single-192-b2", "split-nice3-192-2"]
    sims = [_run(f"split-nice8/{n}.summary.json", 192)[0]["sim"] for n in names]
    got = [(sim["host_bound_steps"], sim["steps"]) for sim in sims]
    assert got == [(584, 8559), (745, 8556), (203, 13043), (198, 8474), (744, 8657),
                   (131, 9889), (147, 8490), (364, 8481), (99, 9928), (96, 8495),
                   (167, 8662), (120, 8487), (292, 9028)]
    own = ["single-256-1", "split-own-256-1", "single-256-2", "split-own-256-2",
           "split-own-256-3", "single-256-3"]
    sims = [_run(f"split-nice8/{n}.summary.json", 256)[0]["sim"] for n in own]
    assert [(sim["host_bound_steps"], sim["steps"]) for sim in sims] == [
        (389, 9170), (166, 9037), (293, 9131), (126, 9053), (93, 9049), (754, 9216)]
    threads = {t["name"]: t["cpu_s"] for t in
               _run("split-nice8/split-own-256-3.summary.json", 256)[0]["server"]["threads"]}
    assert (threads["engine-core"], threads["snac-flusher"]) == (12.21, 11.21)


def test_the_late_wake_up_and_floor_figures_benchmarks_md_quotes_are_those_of_the_files():
    d = RESULTS / "split-nice8"
    got = []
    for n in ("wake-single-256-1", "wake-split-own-256-1", "wake-single-256-2",
              "wake-split-own-256-2"):
        sim = _run(f"split-nice8/{n}.summary.json", 256)[0]["sim"]
        got.append((sim["host_bound_steps"], sim["host_bound_by_wake_steps"],
                    round(sim["host_excess_s"], 2), round(sim["host_excess_wake_s"], 2),
                    sim["late_wakes"], round(sim["late_wake_s"], 2)))
    assert got == [(466, 178, 0.87, 0.34, 1122, 4.37), (110, 54, 0.30, 0.15, 433, 2.39),
                   (470, 172, 0.97, 0.36, 1224, 4.58), (183, 92, 0.46, 0.20, 561, 2.66)]
    floors = [json.loads((d / f"floor-10ms-work{w}.json").read_text()) for w in (0, 1)]
    assert [(f["steps"], f["work_ms"], f["host_bound_steps"], f["late_over_1ms"],
             f["late_over_5ms"], f["late_over_9ms"], round(f["late_max_ms"], 1))
            for f in floors] == [(14000, 0.0, 4, 186, 7, 4, 58.9), (14000, 1.0, 6, 231, 23, 4, 15.4)]


def test_committed_tuning_results_match_benchmarks_md():
    for path, passing, failing in [("capacity-quiet/conversational-whole.summary.json", 640, 704),
                                   ("capacity-quiet/conversational-streaming.summary.json", 480, 512),
                                   ("capacity-quiet-32slots/conversational-whole.summary.json", 160, 176)]:
        t = json.loads((RESULTS / path).read_text())["tuning"]
        assert (t["max_passing_concurrency"], t["first_failing_concurrency"]) == (passing, failing)
    r, _ = _run("capacity-quiet-32slots/conversational-whole.summary.json", 176)
    assert (r["succeeded"], r["requests"]) == (124, 352)
    assert r["per_session"]["open_calls_mean"] == pytest.approx(41.3, abs=0.05)


def test_the_stream_retry_result_holds_the_losses_benchmarks_md_quotes():
    r = json.loads((RESULTS / "stream-retry/loss-3000.json").read_text())
    assert r["calls_per_way"] == 3000 and r["grpcio"] == "1.85.3"
    assert (r["grpc"]["lost_fragment"], r["grpc"]["refusals"]) == (9, 2999)
    assert (r["client"]["lost_fragment"], r["client"]["refusals"]) == (0, 2998)
    assert (r["async_client"]["lost_fragment"], r["async_client"]["refusals"]) == (0, 2998)
    assert r["grpc"]["errors"] == r["client"]["errors"] == r["async_client"]["errors"] == 0


def test_the_stream_retry_benchmark_runs(tmp_path):
    out = tmp_path / "r.json"
    subprocess.run([sys.executable, str(RESULTS.parent / "stream_retry_loss.py"), "--calls", "3",
                    "--output", str(out)], check=True, capture_output=True, timeout=120)
    r = json.loads(out.read_text())
    for way in ("grpc", "client", "async_client"):
        assert r[way]["served"] == 3 and r[way]["errors"] == 0
        assert r[way]["refusals"] >= 1  # round_robin sent at least one to the draining one


def test_the_gpu_figures_benchmarks_md_quotes_are_those_of_the_files():
    # BENCHMARKS.md, "The torch backend on a GPU"
    d = RESULTS / "gpu-torch-h200"
    after = json.loads((d / "after-gpu-torch.json").read_text())
    steps = {name: [round(v["step_ms"][b], 1) for b in ("1", "8", "32", "64")]
             for name, v in after["attention"].items() if name != "section_s"}
    assert steps["shipped"] == [21.5, 21.6, 22.4, 21.5]
    assert steps["torch_choice_enable_gqa"] == [61.5, 54.6, 55.4, 56.4]
    assert "aten::_efficient_attention_forward" in after["attention"]["shipped"]["attention_ops"]
    assert "aten::_cudnn_attention_forward" in \
        after["attention"]["torch_choice_enable_gqa"]["attention_ops"]
    assert after["parity"]["llama_logits_rel_error_max"] < 1.6e-6
    before = json.loads((d / "before-gpu-torch.json").read_text())
    assert [round(v, 1) for v in before["decode"]["step_ms"].values()] == \
        [48.8, 50.9, 48.2, 50.9, 51.3, 50.5]
    profile = json.loads((d / "before-profile.json").read_text())["profile"]
    top = {b: profile[b]["top_host_ms_per_step"][0] for b in ("1", "64")}
    assert [t[0] for t in top.values()] == ["aten::_cudnn_attention_forward"] * 2
    assert [round(t[2]) for t in top.values()] == [37, 118]
    rtf = {name: round(_run(f"gpu-torch-h200/{name}-serve.summary.json", 1)[0]["rtf"]["p50"], 2)
           for name in ("before", "after")}
    assert rtf == {"before": 0.90, "after": 1.08}
