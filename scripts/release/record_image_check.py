"""Write the image check's last result into docs/deploy.md, between its markers.

    python record_image_check.py DOC key=value ...   (scripts/image-check.sh passes them)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

BEGIN, END = "<!-- image-check:begin -->", "<!-- image-check:end -->"


def render(v: dict[str, str]) -> str:
    return "\n".join([
        BEGIN,
        f"Last run of `scripts/image-check.sh`: {v['date']}, orpheus-svc {v['version']}, "
        f"{v['tools']}, on a 2-core build machine without a registry.",
        "",
        "| Step | Result |",
        "|---|---|",
        "| base image (debootstrap bookworm + Python 3.11, `buildah from scratch`) | "
        + ("reused (0 s) |" if v["base_s"] == "0" else f"{v['base_s']} s (0 when reused) |"),
        f"| `buildah bud --layers` of `Dockerfile.cpu`, torch {v.get('torch', 'from PyPI')} | "
        f"**{v['build_s']} s** ({v.get('deps', 'deps stage not recorded')}) |",
        f"| image size | **{v['size']}** ({v['size_bytes']} bytes) in {v.get('layers', '?')} layers |",
        f"| `podman run --read-only`: user | uid {v['uid']} (not root); a write to the root "
        "filesystem is refused |",
        f"| health SERVING, GetStatus version, one `Synthesize` from the Python client | "
        f"{v['serving_s']} s after start |",
        "| SIGTERM | exit 0 |",
        f"| container storage after the build (base, deps stage and image) | {v['storage']} |",
        END,
    ])


def main(doc: str, *pairs: str) -> int:
    values = dict(p.split("=", 1) for p in pairs)
    path = Path(doc)
    text = path.read_text()
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise SystemExit(f"record_image_check: no {BEGIN} ... {END} in {doc}")
    path.write_text(pattern.sub(lambda _: render(values), text))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
