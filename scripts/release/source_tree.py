"""Copy the files a clean clone would have (plus uncommitted edits and new files git does not
ignore) to another directory, and build from there.

    python source_tree.py DEST

Building in the checkout lets leftovers of earlier builds (an `*.egg-info/SOURCES.txt` lists
every file an earlier sdist held) put files into the sdist that the packaging config no
longer ships; a wheel built that way hides the very omission the wheel tests look for.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def copy_tree(dest: Path) -> int:
    names = subprocess.run(["git", "ls-files", "-z", "-c", "-o", "--exclude-standard"],
                           cwd=ROOT, check=True, capture_output=True).stdout.split(b"\0")
    count = 0
    for raw in sorted(set(names)):
        rel = raw.decode()
        src = ROOT / rel
        if not rel or not src.is_file() or src.is_symlink():  # deleted, or a local link (.tools)
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)
        count += 1
    return count


if __name__ == "__main__":
    print(f"source_tree: {copy_tree(Path(sys.argv[1]))} files")
