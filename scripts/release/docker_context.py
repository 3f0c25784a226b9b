"""The build context a Dockerfile needs, and nothing else (scripts/image-check.sh).

    python docker_context.py DOCKERFILE WHEEL_DIR OUT

Reads the Dockerfile's COPY instructions (those without --from), finds each source in the
repository (`dist/*.whl` in WHEEL_DIR: the wheels just built) and copies it to OUT at the same
relative path. Fails naming a source that matches nothing, and unless `dist/` then holds
exactly one orpheus-svc and one orpheus-tts-client wheel: the image installs those files, so
what it runs is what the wheel smoke tested. tests/deploy/test_dockerfiles.py runs the
same checks on the committed Dockerfiles without building.
"""

from __future__ import annotations

import glob
import shlex
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUR_WHEELS = ("orpheus_svc-", "orpheus_tts_client-")


def copy_sources(dockerfile: Path) -> list[str]:
    """The context paths of every COPY without --from (continuation lines joined)."""
    text = dockerfile.read_text().replace("\\\n", " ")
    sources = []
    for line in text.splitlines():
        words = shlex.split(line, comments=True) if line.strip() else []
        if not words or words[0].upper() != "COPY":
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        if any(w.startswith("--from") for w in words[1:]):
            continue
        sources += args[:-1]
    return sources


def resolve(source: str, wheel_dir: Path) -> list[tuple[Path, str]]:
    """(file on disk, path in the context) for one COPY source."""
    if source.startswith("dist/"):
        base, pattern = wheel_dir, source[len("dist/"):]
        prefix = "dist/"
    else:
        base, pattern, prefix = ROOT, source, ""
    found = sorted(Path(p) for p in glob.glob(str(base / pattern)))
    return [(p, prefix + str(p.relative_to(base))) for p in found]


def check_wheels(names: list[str]) -> None:
    wheels = [Path(n).name for n in names if n.startswith("dist/")]
    for prefix in OUR_WHEELS:
        ours = [w for w in wheels if w.startswith(prefix)]
        if len(ours) != 1:
            sys.exit(f"docker_context: dist/ must hold one {prefix}*.whl, has {ours}")


def assemble(dockerfile: Path, wheel_dir: Path, out: Path) -> list[str]:
    copied = []
    for source in copy_sources(dockerfile):
        pairs = resolve(source, wheel_dir)
        if not pairs:
            sys.exit(f"docker_context: {dockerfile.name}: COPY {source} matches nothing")
        for path, rel in pairs:
            dest = out / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            (shutil.copytree if path.is_dir() else shutil.copy2)(path, dest)
            copied.append(rel)
    check_wheels(copied)
    return copied


if __name__ == "__main__":
    df, wheels, target = (Path(a) for a in sys.argv[1:4])
    for rel in assemble(df, wheels, target):
        print(f"docker_context: {df.name}: {rel}")
