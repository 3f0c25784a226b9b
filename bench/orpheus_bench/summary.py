"""Compact summaries of orpheus-bench results, and where the raw details go.

Why: a run's raw JSON carries one record per session (and with --traces every audio chunk),
and the server's log one line per session; a capacity study makes megabytes of both. The
repository keeps only what a reader of BENCHMARKS.md needs to check a figure: per level the
settings, the table row, the percentiles and the host figures (server CPU, its busiest
threads, the load generator's CPU, how busy the machine was, and for a sim server whether
the GPU model or the host set the pace). That is the summary. The raw file goes outside the
repository by default (raw_dir()), or gzipped when asked.

    python -m orpheus_bench.summary RAW.json [RAW.json ...]    # writes RAW.summary.json each
    python -m orpheus_bench.summary --log server.log ...       # digest of server logs

A summary made from an existing raw file records the file's name, size and sha256 under
"derived_from", so a figure can be traced to the raw file in git history.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .metrics import summarize

RAW_ENV = "ORPHEUS_BENCH_RAW"
SUMMARY_SUFFIX = ".summary.json"
# Per-session and per-chunk records: raw only.
RAW_ONLY_KEYS = ("sessions_detail", "traces")


def raw_dir() -> Path:
    """Where raw per-session results and server logs go by default: $ORPHEUS_BENCH_RAW, else
    $XDG_CACHE_HOME/orpheus-bench/raw (~/.cache/...), else the temp dir. Never the repository."""
    env = os.environ.get(RAW_ENV)
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME")
    if not cache:
        try:
            cache = Path.home() / ".cache"
        except RuntimeError:  # no home directory
            return Path(tempfile.gettempdir()) / "orpheus-bench-raw"
    return Path(cache) / "orpheus-bench" / "raw"


def summary_path(output: str | os.PathLike) -> Path:
    """x.json -> x.summary.json (x.summary.json stays as it is)."""
    p = Path(output)
    if p.name.endswith(SUMMARY_SUFFIX):
        return p
    stem = p.name[:-5] if p.name.endswith(".json") else p.name
    return p.with_name(stem + SUMMARY_SUFFIX)


def default_raw_path(output: str | os.PathLike, gz: bool = False) -> Path:
    """The raw file for a summary written to `output`: <raw_dir>/<output's folder>/<stem>.raw.json
    (the folder name keeps runs of different studies apart)."""
    p = Path(output)
    stem = p.name
    for suffix in (SUMMARY_SUFFIX, ".json"):
        if stem.endswith(suffix):
            stem = stem[:-len(suffix)]
            break
    folder = p.resolve().parent.name or "results"
    return raw_dir() / folder / (stem + ".raw.json" + (".gz" if gz else ""))


def write_raw(path: str | os.PathLike, doc: dict) -> None:
    """The whole document, gzipped when the name ends in .gz; replaced atomically."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    data = (json.dumps(doc, indent=1, default=str) + "\n").encode()
    tmp = p.with_name(p.name + ".tmp")
    if p.name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    tmp.write_bytes(data)
    tmp.replace(p)


def read_json(path: str | os.PathLike) -> dict:
    p = Path(path)
    data = p.read_bytes()
    if p.name.endswith(".gz"):
        data = gzip.decompress(data)
    return json.loads(data)


def open_calls_mean(details: list[dict], wall_s: float) -> float | None:
    """Mean number of open calls over the level, from the client side: the sum of each
    session's time to its last audio (rtf x audio seconds) over the level's wall time."""
    if not details or not wall_s:
        return None
    return sum((d.get("rtf") or 0.0) * (d.get("audio_s") or 0.0) for d in details) / wall_s


def summarize_run(r: dict) -> dict:
    """One level: everything but the per-session records, plus the table row and figures
    derived from the per-session records (so they stay checkable without them)."""
    out = {k: v for k, v in r.items() if k not in RAW_ONLY_KEYS}
    details = r.get("sessions_detail") or []
    if details:
        out["per_session"] = {
            "audio_s": _round(summarize([d.get("audio_s") for d in details])),
            "tokens": _round(summarize([d.get("tokens") for d in details])),
            "open_calls_mean": _r(open_calls_mean(details, r.get("wall_s") or 0.0)),
        }
    try:
        from .report import row
        out["row"] = row(r)
    except (KeyError, TypeError):
        pass
    return out


def summarize_doc(doc: dict, raw: dict | None = None) -> dict:
    """The summary of a whole orpheus-bench document. `raw`: where the raw file is (or was)."""
    if doc.get("tool") != "orpheus-bench":
        raise ValueError("not an orpheus-bench document (no tool: orpheus-bench)")
    out = {k: v for k, v in doc.items() if k != "runs"}
    out["summary"] = True
    try:
        from .report import HEADER
        out["table_header"] = HEADER
    except ImportError:
        pass
    if raw:
        out["raw"] = raw
    out["runs"] = [summarize_run(r) for r in doc.get("runs", [])]
    return out


def file_ref(path: str | os.PathLike) -> dict:
    """Name, size, sha256 and (if tracked) the git commit holding the file: enough to find it."""
    p = Path(path)
    data = p.read_bytes()
    ref = {"path": _repo_relative(p), "bytes": len(data),
           "sha256": hashlib.sha256(data).hexdigest()}
    commit = _git_last_commit(p)
    if commit:
        ref["git_commit"] = commit
    return ref


def summarize_file(raw_path: str | os.PathLike, out_path: str | os.PathLike | None = None) -> Path:
    """Write the summary of an existing raw file next to it (x.json -> x.summary.json)."""
    raw_path = Path(raw_path)
    out = Path(out_path) if out_path else summary_path(raw_path)
    doc = summarize_doc(read_json(raw_path), raw={"derived_from": file_ref(raw_path)})
    write_summary(out, doc)
    return out


def dumps(doc: dict) -> str:
    """JSON with one line per top-level key and per key of each run or log: small diffs and
    few lines, still one json.loads away."""
    def one(v) -> str:
        return json.dumps(v, default=str, separators=(", ", ": "))

    def obj(d: dict, pad: str) -> str:
        items = [f"{pad} {json.dumps(k)}: {one(v)}" for k, v in d.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"

    lines = []
    for k, v in doc.items():
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            inner = ",\n".join("  " + obj(x, "  ") for x in v)
            lines.append(f" {json.dumps(k)}: [\n{inner}\n ]")
        else:
            lines.append(f" {json.dumps(k)}: {one(v)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def write_summary(path: str | os.PathLike, doc: dict) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(dumps(doc))
    tmp.replace(p)


def summarize_log(path: str | os.PathLike, keep: int = 20) -> dict:
    """A server log (structlog JSON lines) in a few lines: counts per event and level, the
    first and last timestamps, and the lines that are not per-session chatter (startup,
    warnings, errors, shutdown; at most `keep`)."""
    events: dict[str, int] = {}
    levels: dict[str, int] = {}
    notable: list[str] = []
    first = last = None
    n = 0
    for line in Path(path).read_text(errors="replace").splitlines():
        if not line.strip():
            continue
        n += 1
        try:
            rec = json.loads(line)
        except ValueError:
            rec = {"event": line[:200], "level": "text"}
        ev = str(rec.get("event", ""))[:80]
        lvl = str(rec.get("level", ""))
        events[ev] = events.get(ev, 0) + 1
        levels[lvl] = levels.get(lvl, 0) + 1
        ts = rec.get("timestamp")
        if ts:
            first = first or ts
            last = ts
        if (lvl not in ("info", "debug") or "session_id" not in rec) and len(notable) < keep:
            notable.append(line[:400])
    top = dict(sorted(events.items(), key=lambda kv: -kv[1])[:20])
    return {"log": Path(path).name, "lines": n, "first": first, "last": last,
            "levels": dict(sorted(levels.items())), "events": top, "notable": notable}


def _r(v, nd=4):
    return None if v is None else round(v, nd)


def _round(d: dict) -> dict:
    return {k: (_r(v) if isinstance(v, float) else v) for k, v in d.items()}


def _repo_root(p: Path) -> Path | None:
    for d in [p.resolve().parent, *p.resolve().parent.parents]:
        if (d / ".git").exists():
            return d
    return None


def _repo_relative(p: Path) -> str:
    root = _repo_root(p)
    if root is None:
        return str(p)
    try:
        return str(p.resolve().relative_to(root))
    except ValueError:
        return str(p)


def _git_last_commit(p: Path) -> str | None:
    root = _repo_root(p)
    if root is None:
        return None
    try:
        res = subprocess.run(["git", "-C", str(root), "log", "-1", "--format=%H", "--",
                              _repo_relative(p)], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() or None


def inside_git_worktree(path: str | os.PathLike) -> bool:
    """Whether `path` (existing or not) lies inside a git work tree."""
    return _repo_root(Path(path)) is not None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m orpheus_bench.summary", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("raw", nargs="*", help="raw orpheus-bench JSON files (.json or .json.gz)")
    p.add_argument("--log", nargs="*", default=[], help="server logs to digest")
    p.add_argument("--log-output", help="where the log digests go (default: "
                                        "server-logs.summary.json next to the first log)")
    args = p.parse_args(argv)
    for f in args.raw:
        print(summarize_file(f))
    if args.log:
        out = Path(args.log_output) if args.log_output else \
            Path(args.log[0]).with_name("server-logs.summary.json")
        doc = {"summary": True, "logs": [{**summarize_log(f), "derived_from": file_ref(f)}
                                         for f in args.log]}
        write_summary(out, doc)
        print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
