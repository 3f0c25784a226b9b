"""Link the dependencies that wheels declare, from an environment that has them, into one
directory that a fresh virtual environment adds to its path (scripts/wheel-smoke.sh).

    python wheel_deps.py OUT WHEEL[EXTRAS] ...        (run with the environment's python)

The closure starts from the wheels' own METADATA (Requires-Dist, with the extras asked for),
not from this environment's view of the checkout, and follows each installed distribution's
requirements with their markers. Every requirement must be installed here at a version its
specifier admits, or this fails naming it: the same promise `pip install WHEEL` keeps, without
downloading torch again. Only the closure is linked (one symlink per top-level name the
distribution installed), so a module the wheels use but do not declare is not importable.
"""

from __future__ import annotations

import importlib.metadata as md
import re
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _wheel_requires(spec: str) -> tuple[str, list[str], set[str]]:
    path, _, extras = spec.partition("[")
    extras_set = {e.strip() for e in extras.rstrip("]").split(",") if e.strip()}
    with zipfile.ZipFile(path) as whl:
        meta_name = next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(whl.read(meta_name).decode())
    return _norm(meta["Name"]), meta.get_all("Requires-Dist") or [], extras_set


def _wanted(req: Requirement, extras: set[str]) -> bool:
    if req.marker is None:
        return True
    return any(req.marker.evaluate({"extra": e}) for e in (extras or {""}))


def closure(wheels: list[str]) -> dict[str, md.Distribution]:
    """Installed distributions the wheels need, by normalised name (the wheels' own excluded)."""
    own, todo = set(), []
    for spec in wheels:
        name, requires, extras = _wheel_requires(spec)
        own.add(name)
        todo += [(Requirement(r), extras, name) for r in requires]
    found: dict[str, md.Distribution] = {}
    seen: set[tuple[str, frozenset]] = set()
    while todo:
        req, extras, parent = todo.pop()
        if not _wanted(req, extras):
            continue
        name = _norm(req.name)
        if name in own or (name, frozenset(req.extras)) in seen:
            continue
        seen.add((name, frozenset(req.extras)))
        try:
            dist = md.distribution(req.name)
        except md.PackageNotFoundError:
            sys.exit(f"wheel_deps: {parent} requires {req}, which is not installed in {sys.prefix}")
        if not req.specifier.contains(dist.version, prereleases=True):
            sys.exit(f"wheel_deps: {parent} requires {req}; {sys.prefix} has {dist.version}")
        found[name] = dist
        todo += [(Requirement(r), set(req.extras), name) for r in dist.requires or []]
    return found


def link(dists: dict[str, md.Distribution], out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    tops: set[Path] = set()
    for dist in dists.values():
        for f in dist.files or []:
            if f.parts and f.parts[0] != "..":  # '..': console scripts in bin/
                tops.add(Path(dist.locate_file(f.parts[0])))
    for top in sorted(tops):
        if top.exists() and not (out / top.name).exists():
            (out / top.name).symlink_to(top)
    return len(tops)


def main(argv: list[str]) -> int:
    out, wheels = Path(argv[0]), argv[1:]
    dists = closure(wheels)
    n = link(dists, out)
    print(f"wheel_deps: {len(dists)} distributions ({n} top-level names) linked into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
