"""Client tests (Python client + CLI) against an in-process fake server; no torch."""
