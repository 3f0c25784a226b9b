"""Make `orpheus_bench` importable from the source tree when it is not installed."""

import sys
from pathlib import Path

try:
    import orpheus_bench  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
