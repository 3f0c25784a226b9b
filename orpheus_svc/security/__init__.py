"""API keys and per-key limits, shared by the gRPC interceptor and the HTTP edge (no grpc)."""

from .keys import (ApiKey, AuthResult, KeyFileError, KeyLimiter, KeyStore, Lease, hash_key,
                   parse_bearer, parse_keys)

__all__ = ["ApiKey", "AuthResult", "KeyFileError", "KeyLimiter", "KeyStore", "Lease",
           "hash_key", "parse_bearer", "parse_keys"]
