"""API keys and per-key limits, shared by the gRPC interceptor and the HTTP edge (no grpc).

    keys.py      KeyStore, KeyLimiter, the key file and the bearer parsing (pure logic)
    __main__.py  `python -m orpheus_svc.security`: new-key, hash

Import keys directly; this package imports nothing itself.
"""
