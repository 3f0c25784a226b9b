"""Summarise a `py-spy record --format raw --threads` file into the tables of
bench/results/profile-before/*.txt (issue 16): per thread the top functions by own and
cumulative share, and the share per area of the serving path.

    PYTHONPATH=bench python -m orpheus_bench.pyspy_summary PROFILE.txt [--top 15] [--title T]

The raw file stays outside the repository; only this summary is committed. Shares are of
all samples in the file (with `--gil`: of the samples where some thread held the GIL).
"""

from __future__ import annotations

import argparse
import collections
import re
import sys

FRAME = re.compile(r"^(?P<fn>.*?) \((?P<file>[^():]*?)(?::(?P<line>\d+))?\)$")

# Scheduler methods charged to "schedule". The admission queue and the parking lot
# (core/admission.py, core/parking.py) match no area: a sample in them goes to the
# Scheduler method that called them.
SCHEDULE_FNS = {"schedule", "_priority", "deadline_priority", "_admit", "_unpark",
                "_park", "_forget_idle_sessions", "", "add", "cancel"}

# (area, predicate on (function, file)) tried from the leaf frame upwards; the first frame
# that matches decides the sample's area. Generic stdlib frames (threading, queue, enum,
# dataclasses...), numpy and the pure core outside the scheduler (generation, playout,
# grammar) match nothing, so a sample in them is charged to its caller: SessionPlayout.slack
# under Scheduler._priority is "schedule", FrameParser.feed under Scheduler.update "update".
AREAS = [
    ("idle: sleep / wait / select", lambda f, p: (
        (p.endswith("threading.py") and f in ("Condition.wait", "Event.wait", "Thread._wait_for_tstate_lock"))
        or (p.endswith("queue.py") and f == "Queue.get")
        or p.endswith("selectors.py")
        or (p.endswith("engine/sim/backend.py") and f in ("SimBackend._write_stats_file",)))),
    ("prometheus_client (metrics)", lambda f, p: "prometheus_client" in p or p.endswith(("socketserver.py", "http/server.py"))),
    ("gRPC + protobuf", lambda f, p: "grpc" in p or "protobuf" in p or "_pb2" in p or p.endswith("server/servicer.py")),
    ("event routing (handle, router, call_soon_threadsafe)", lambda f, p: p.endswith(("engine/handle.py", "core/events.py")) or f.endswith("call_soon_threadsafe")),
    ("session + segmenting + encoding", lambda f, p: p.endswith(("server/session.py", "server/segmenter.py", "core/sentences.py", "audio/pcm.py", "audio/g711.py", "audio/containers.py", "core/prompt.py", "core/text.py", "core/normalize.py")) or f.startswith("sim_encode") or "/server/" in p and "servicer" not in p and not p.endswith(("state.py", "metrics.py"))),
    ("server state / metrics (loop side)", lambda f, p: p.endswith(("server/state.py", "server/metrics.py"))),
    ("engine -> flusher hand-off (Flusher.push / drop)", lambda f, p: p.endswith("audio/flusher.py") and f in ("Flusher.push", "Flusher.drop")),
    ("scheduler: stats() every step", lambda f, p: p.endswith("core/scheduler.py") and f.startswith("Scheduler.stats")),
    ("scheduler: schedule (priority keys, sort, rows)", lambda f, p: p.endswith("core/scheduler.py") and f.split(".")[-1].split("<")[0] in SCHEDULE_FNS),
    ("scheduler: update (tokens -> frames, playout)", lambda f, p: p.endswith("core/scheduler.py")),
    ("sim codec (fake SNAC: latents, modelled time)", lambda f, p: "engine/sim/" in p and f.startswith("SimCodec")),
    ("sim backend step (the simulated GPU's host side)", lambda f, p: "engine/sim/" in p and not f.startswith("sim_encode")),
    ("flusher: planning / windows / decode", lambda f, p: p.endswith(("audio/flusher.py", "audio/streams.py", "audio/decoder.py", "audio/windows.py", "audio/codec.py"))),
    ("engine loop (drain, step glue)", lambda f, p: p.endswith("engine/loop.py") or p.endswith("runtime.py")),
    ("asyncio machinery", lambda f, p: "asyncio/" in p),
    ("logging", lambda f, p: "logging/" in p),
]


# Leaf frames where a thread sleeps or blocks (py-spy's idle filter lets them through on this
# VM): the sim's modelled GPU step and SNAC time, the stats writer, pollers, the selector.
SLEEP_LEAVES = [("SimBackend.step", "backend.py:269"), ("SimCodec.decode_latents", "backend.py:401"),
                ("EpollSelector.select", ""), ("SimBackend._write_stats_file", ""),
                ("Thread.run", "threading.py:982"), ("_worker", "thread.py:81"),
                ("Condition.wait", ""), ("Queue.get", "")]


def activity(path, ticks):
    """Per thread: share of sampling ticks with a sample, and with a non-sleeping leaf."""
    seen, asleep = collections.Counter(), collections.Counter()
    for line in open(path):
        stack, _, n = line.rstrip("\n").rpartition(" ")
        frames = stack.split(";")
        t = frames[0].split(": ", 1)[-1]
        seen[t] += int(n)
        if any(a in frames[-1] and b in frames[-1] for a, b in SLEEP_LEAVES):
            asleep[t] += int(n)
    out = ["| Thread | ticks with a sample | of which not asleep |", "|---|---|---|"]
    for t, n in seen.most_common():
        out.append(f"| {t} | {100 * n / ticks:.0f}% | {100 * (n - asleep[t]) / ticks:.0f}% |")
    return "\n".join(out) + "\n"


def leaf_lines(path):
    """Samples per leaf frame with its line number: the hottest lines."""
    lines = collections.Counter()
    for line in open(path):
        stack, _, n = line.rstrip("\n").rpartition(" ")
        frames = stack.split(";")
        if len(frames) > 1:
            fm = FRAME.match(frames[-1])
            key = (short(fm.group("fn"), fm.group("file")) if fm else frames[-1])
            if fm and fm.group("line"):
                key = key[:-1] + ":" + fm.group("line") + ")"
            lines[(frames[0].split(": ", 1)[-1], key)] += int(n)
    return lines


def parse(path):
    for line in open(path):
        line = line.rstrip("\n")
        if not line:
            continue
        stack, _, n = line.rpartition(" ")
        frames = stack.split(";")
        thread = frames[0]
        m = re.match(r"thread \((\d+)\): ?(.*)", thread)
        tname = m.group(2) if m and m.group(2) else thread
        parsed = []
        for fr in frames[1:]:
            fm = FRAME.match(fr)
            parsed.append((fm.group("fn"), fm.group("file")) if fm else (fr, ""))
        yield tname, parsed, int(n)


def thread_group(name: str) -> str:
    if name == "MainThread":
        return "asyncio loop (MainThread)"
    if name.startswith("engine-core"):
        return "engine thread (engine-core)"
    if "flusher" in name:
        return "flusher thread"
    if "serve_forever" in name or "prometheus" in name.lower():
        return "prometheus"
    return "other: " + re.sub(r"-\d+", "-N", name)


def area_of(frames) -> str:
    for fn, path in reversed(frames):
        for name, pred in AREAS:
            if pred(fn, path):
                return name
    return "other"


def short(fn, path):
    path = re.sub(r"^.*?/site-packages/", "", path)
    path = re.sub(r"^.*?/(orpheus_svc/)", r"\1", path)
    path = re.sub(r"^.*?/lib/python3\.\d+/", "", path)
    return f"{fn} ({path})"


def summarise(path, top, title):
    total = 0
    per_thread = collections.Counter()
    own = collections.defaultdict(collections.Counter)
    cum = collections.defaultdict(collections.Counter)
    areas = collections.Counter()
    areas_t = collections.defaultdict(collections.Counter)
    for tname, frames, n in parse(path):
        g = thread_group(tname)
        total += n
        per_thread[g] += n
        if frames:
            own[g][short(*frames[-1])] += n
        for key in {short(*f) for f in frames}:
            cum[g][key] += n
        a = area_of(frames)
        areas[a] += n
        areas_t[g][a] += n
    out = [f"### {title}", "", f"{total} samples.", "", "| Thread | Share of samples |", "|---|---|"]
    for g, n in per_thread.most_common():
        out.append(f"| {g} | {100 * n / total:.1f}% |")
    out += ["", "| Area | Share | by thread |", "|---|---|---|"]
    for a, n in areas.most_common():
        by = ", ".join(f"{g.split(' ')[0]} {100 * areas_t[g][a] / total:.1f}%"
                       for g in per_thread if areas_t[g][a])
        out.append(f"| {a} | {100 * n / total:.1f}% | {by} |")
    for g, n in per_thread.most_common():
        if n / total < 0.01:
            continue
        out += ["", f"#### {g}: {100 * n / total:.1f}% of samples", "",
                "| Function (own time: the leaf frame) | Own | | Function (cumulative) | Cum |",
                "|---|---|---|---|---|"]
        o = sorted(own[g].items(), key=lambda kv: (-kv[1], kv[0]))[:top]
        # frames on (nearly) every stack of the thread (bootstrap, run_forever) say nothing
        c = [kv for kv in sorted(cum[g].items(), key=lambda kv: (-kv[1], kv[0]))
             if kv[1] < 0.97 * n][:top]
        for i in range(max(len(o), len(c))):
            l = f"{o[i][0]} | {100 * o[i][1] / total:.1f}%" if i < len(o) else " | "
            r = f"{c[i][0]} | {100 * c[i][1] / total:.1f}%" if i < len(c) else " | "
            out.append(f"| {l} | | {r} |")
    out += ["", f"#### Hottest lines (leaf frame and line), all threads", "", "| Thread | Line | Share |", "|---|---|---|"]
    for (t, key), n in leaf_lines(path).most_common(top):
        out.append(f"| {t} | {key} | {100 * n / total:.1f}% |")
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("profile")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--title", default=None)
    ap.add_argument("--ticks", type=int, default=0,
                    help="rate x duration of the recording: print per-thread activity instead")
    a = ap.parse_args(argv)
    if a.ticks:
        sys.stdout.write(activity(a.profile, a.ticks))
        return 0
    sys.stdout.write(summarise(a.profile, a.top, a.title or a.profile))
    return 0


if __name__ == "__main__":
    sys.exit(main())
