"""Helpers of scripts/mutation.sh (mutmut 3's files, read and patched as JSON).

    mutation_stats.py widen STATS_JSON GLOB      every function of the modules GLOB names is
                                                 credited with every test that ran any of them
    mutation_stats.py drop STATS_JSON TEST ...   no mutant runs these tests (node ids)
    mutation_stats.py estimate GROUP_DIR DRAWN   a partly run group's estimated score from a
                                                 random draw (DRAWN: its mutants' names)
    mutation_stats.py summary OUT GROUP ...      the score per module, as a Markdown table
                                                 (mutation-equivalent.txt: survivors judged
                                                 equivalent, with why)
    mutation_stats.py names GROUP_DIR STATUS ... the mutants of a group's run with one of these
                                                 statuses (survived, "no tests", ...), a line each
    mutation_stats.py sample GROUP_DIR N         N of the group's mutants not run yet, drawn at
                                                 random (seeded: the same draw for the same set)

`widen` is for functions that run once per pytest session (while a session fixture builds
the server): mutmut credits a function to the tests during which it ran, so those would be
checked against the first test alone.
"""

from __future__ import annotations

import fnmatch
import json
import sys
from collections import Counter
from pathlib import Path

# mutmut's exit codes (mutmut/stats.py status_by_exit_code)
KILLED, SURVIVED, NO_TESTS, TIMEOUT = {1, 3}, {0}, {5, 33}, {24, -24, 36, 152, 255}


def _module_of(mangled: str) -> str:
    """'orpheus_svc.http.limits.xǁBoundedH11ǁf__mutmut_3' -> 'orpheus_svc/http/limits.py'."""
    head = mangled.split("__mutmut_")[0]
    parts = head.split(".")
    return "/".join(parts[:-1]) + ".py"


def widen(stats_path: str, pattern: str) -> None:
    path = Path(stats_path)
    stats = json.loads(path.read_text())
    by_function = stats["tests_by_mangled_function_name"]
    mine = [f for f in by_function if fnmatch.fnmatch(_module_of(f), pattern)]
    tests = sorted({t for f in mine for t in by_function[f]})
    for f in mine:
        by_function[f] = tests
    path.write_text(json.dumps(stats, indent=4))
    print(f"widened {len(mine)} functions of {pattern} to {len(tests)} tests each")


def drop(stats_path: str, tests: list[str]) -> None:
    path = Path(stats_path)
    stats = json.loads(path.read_text())
    by_function = stats["tests_by_mangled_function_name"]
    gone = set(tests)
    for f in by_function:
        by_function[f] = [t for t in by_function[f] if t not in gone]
    path.write_text(json.dumps(stats, indent=4))
    print(f"no mutant runs {len(gone)} tests: " + ", ".join(sorted(gone)))


def _status(code) -> str:
    if code in KILLED:
        return "killed"
    if code in TIMEOUT:
        return "timeout"
    if code in SURVIVED:
        return "survived"
    if code in NO_TESTS:
        return "no tests"
    return "not checked" if code is None else "other"


EQUIVALENT = Path(__file__).with_name("mutation-equivalent.txt")


def equivalent() -> dict[str, str]:
    """Survivors judged equivalent (no behaviour changes), from mutation-equivalent.txt:
    a mutant's name, then why, a line each ('#' starts a comment line)."""
    if not EQUIVALENT.exists():
        return {}
    out = {}
    for line in EQUIVALENT.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, why = line.strip().partition(" ")
            out[name] = why.strip()
    return out


BY_HAND = Path(__file__).with_name("mutation-by-hand.txt")


def by_hand() -> dict[str, str]:
    """Survivors mutmut cannot activate (import-time code), applied by hand: name -> killed
    or equivalent (mutation-by-hand.txt)."""
    if not BY_HAND.exists():
        return {}
    out = {}
    for line in BY_HAND.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, verdict = line.split()[:2]
            out[name] = verdict
    return out


def summary(out: str, groups: list[str]) -> None:
    """Caught = killed + killed by hand (mutation-by-hand.txt) + timeout (a mutant that hangs
    the tests is caught); % of the mutants run; the last column leaves the equivalent
    survivors (mutation-equivalent.txt, and those by hand) out of the count."""
    same = equivalent()
    hand = by_hand()
    for name, verdict in hand.items():
        if verdict == "equivalent":
            same[name] = "by hand"
    rows, total = [], Counter()
    for group in groups:
        for meta in sorted(Path(out, group, "mutants").rglob("*.py.meta")):
            codes = json.loads(meta.read_text())["exit_code_by_key"]
            if not codes:
                continue
            count = Counter("equivalent" if _status(c) == "survived" and k in same
                            else "by hand" if _status(c) == "survived" and k in hand
                            else _status(c) for k, c in codes.items())
            module = str(meta.relative_to(Path(out, group, "mutants")))[:-len(".meta")]
            rows.append((module, count, len(codes)))
            total.update(count)
            total["all"] += len(codes)
    if not rows:
        print("no mutation results under", out)
        return
    print("| Module | Mutants | Run | Killed | Killed by hand | Timeout | Survived | Equivalent | "
          "No tests | Caught % | Caught % (not equivalent) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")

    def pct(part, whole):
        return f"{100 * part / whole:.0f}%" if whole else "-"

    def line(name, c, n):
        caught = c["killed"] + c["by hand"] + c["timeout"]
        run = n - c["not checked"] - c["other"]
        print(f"| {name} | {n} | {run} | {c['killed']} | {c['by hand']} | {c['timeout']} | "
              f"{c['survived']} | "
              f"{c['equivalent']} | {c['no tests']} | {pct(caught, run)} | "
              f"{pct(caught, run - c['equivalent'])} |")

    for module, count, n in rows:
        line(f"`{module.removeprefix('orpheus_svc/')}`", count, n)
    line("**all**", total, total["all"])


def names(group_dir: str, statuses: list[str]) -> None:
    wanted = set(statuses)
    for meta in sorted(Path(group_dir, "mutants").rglob("*.py.meta")):
        for key, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            if _status(code) in wanted:
                print(key)


def sample(group_dir: str, n: str) -> None:
    import random
    unchecked = sorted(key for meta in Path(group_dir, "mutants").rglob("*.py.meta")
                       for key, code in json.loads(meta.read_text())["exit_code_by_key"].items()
                       if code is None)
    for key in sorted(random.Random(38).sample(unchecked, min(int(n), len(unchecked)))):
        print(key)


def estimate(group_dir: str, sample_file: str) -> None:
    """A group's caught rate where only part ran: the mutants run outside the draw counted
    as they are, the draw's rate (SAMPLE_FILE: its names, a line each) applied to the draw
    and to the mutants not run."""
    same, hand = equivalent(), by_hand()
    drawn = set(Path(sample_file).read_text().split())
    inside, outside = Counter(), Counter()
    for meta in Path(group_dir, "mutants").rglob("*.py.meta"):
        for key, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            status = _status(code)
            if status == "survived" and (key in same or hand.get(key) == "equivalent"):
                status = "equivalent"
            elif status == "survived" and hand.get(key) == "killed":
                status = "killed"
            (inside if key in drawn else outside)[status] += 1

    def caught(c):
        return c["killed"] + c["timeout"]

    run_in = sum(inside.values()) - inside["not checked"]
    run_out = sum(outside.values()) - outside["not checked"]
    rest = outside["not checked"] + inside["not checked"]
    print(f"draw: {run_in} run, {caught(inside)} caught, {inside['equivalent']} equivalent, "
          f"{inside['survived'] + inside['no tests']} not caught")
    print(f"outside the draw: {run_out} run, {caught(outside)} caught; {rest} not run")
    if run_in:
        rate = caught(inside) / run_in
        total = caught(outside) + rate * (run_in + rest)
        print(f"estimate: {total:.0f} of {run_in + run_out + rest} caught "
              f"({100 * total / (run_in + run_out + rest):.1f}%)")


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "widen":
        widen(*args)
    elif command == "drop":
        drop(args[0], args[1:])
    elif command == "names":
        names(args[0], args[1:])
    elif command == "sample":
        sample(*args)
    elif command == "estimate":
        estimate(*args)
    elif command == "summary":
        summary(args[0], args[1:])
    else:
        sys.exit(__doc__)
