"""One streaming session to ADDR (scripts/k8s-check.sh: a session open while the server's
process is paused). Exit 0 and one line when it ended with all its audio."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from orpheus_tts_client import Client  # noqa: E402
from k8s_sessions import run_session  # noqa: E402

with Client(sys.argv[1], timeout=600) as tts:
    out = run_session(tts, seed=1)
print(f"{'whole' if out.ok else 'FAILED'}: {out.segments} segments, {out.samples} samples in "
      f"{out.ended - out.started:.1f} s {out.error}")
sys.exit(0 if out.ok else 1)
