"""The rollout's result (scripts/k8s-check.sh): CLIENTS.json WATCH.json DNS.log [OLD-POD.log...]
(the replaced pods' own JSON logs) -> lines for
the results file; exit 1 when a session failed or was never run, or the ready pods ever
dropped below one."""

import json
import sys
from collections import Counter

clients = json.load(open(sys.argv[1]))
watch = json.load(open(sys.argv[2]))
dns = [l.split(None, 1) for l in open(sys.argv[3]).read().splitlines()]
c = Counter("failed" if not o["ok"] else "resumed" if o["resumes"] else "finished" for o in clients)
t0 = watch[0]["t"] if watch else 0
during = [o for o in clients if watch and o["ended"] >= t0]
print(f"rollout sessions: {len(clients)} started, {c['finished']} finished on their pod, "
      f"{c['resumed']} resumed on another (resumes {sum(o['resumes'] for o in clients)}), "
      f"{c['failed']} failed; {len(during)} ended during or after the rollout; "
      f"{sum(o['samples'] for o in clients if o['ok']) / 24000:.0f} s of audio received")
for o in clients:
    if not o["ok"]:
        print(f"  FAILED client {o['client']}: {o['error']}")
min_ready = min((len(r["ready"]) for r in watch), default=0)
exits = {}
for r in watch:
    for name, code in r["terminating"].items():
        if code is not None:
            exits[name] = code
first_term = {}
last_seen = {}
for r in watch:
    for name in r["terminating"]:
        first_term.setdefault(name, r["t"])
        last_seen[name] = r["t"]
drains = {n: last_seen[n] - first_term[n] for n in first_term}
pdb = [r["pdb"] for r in watch if r["pdb"].get("currentHealthy") is not None]
print(f"rollout pods: ready pods never below {min_ready}; old pods terminating for "
      + ", ".join(f"{v:.0f} s" for v in drains.values())
      + f" (SIGTERM to gone), exit codes {sorted(set(exits.values())) or 'not seen'}; PDB currentHealthy "
      f"min {min((p['currentHealthy'] for p in pdb), default='-')}, desiredHealthy "
      f"{max((p['desiredHealthy'] for p in pdb), default='-')}; the DNS stand-in answered "
      f"{len(dns)} address sets")
for path in sys.argv[4:]:
    recs = []
    for line in open(path).read().splitlines():
        try:
            recs.append(json.loads(line))
        except ValueError:
            pass
    down = [r for r in recs if r.get("event") == "shutting down"]
    pod = path.rsplit("old-", 1)[-1].removesuffix(".log")
    print(f"  old pod {pod}: " + (
        f"'shutting down' with {down[0].get('active_sessions')} sessions open, grace "
        f"{down[0].get('grace_s')} s; last log event: {recs[-1].get('event')!r}" if down
        else f"no 'shutting down' in its log ({len(recs)} JSON lines)"))
sys.exit(0 if clients and not c["failed"] and min_ready >= 1 else 1)
