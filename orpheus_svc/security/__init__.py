"""API keys and per-key limits, shared by the gRPC interceptor and the HTTP edge (no grpc)."""

from .keys import (ADMIN, ApiKey, AuthResult, KeyFileError, KeyLimiter, KeyStore, Lease,
                   hash_key, parse_bearer, parse_keys)

__all__ = ["ADMIN", "ApiKey", "AuthResult", "KeyFileError", "KeyLimiter", "KeyStore", "Lease",
           "hash_key", "parse_bearer", "parse_keys"]
