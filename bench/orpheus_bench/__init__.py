"""orpheus-bench: load generator and capacity benchmark for an orpheus-svc server over gRPC.

    orpheus-bench single  --target localhost:50051
    orpheus-bench scaling --concurrent 8,16,64 --requests 128 --output results.json
    orpheus-bench tuning  --text-set conversational --input streaming --plot plots/
    orpheus-bench all

Modules: metrics (pure: percentiles, playout/underrun accounting), texts (deterministic
text sets), load (asyncio gRPC sessions, one worker process), runner (levels, worker
processes, server CPU and status deltas), report (JSON, table, plots), cli.
"""

__version__ = "0.1.0"
