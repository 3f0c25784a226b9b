"""TLS (and mTLS) server credentials from PEM files, re-read when the files change.

grpc's dynamic SSL credentials ask a fetcher for the certificate configuration at each new
handshake; the fetcher here stats the files (mtime, size, inode: a Kubernetes Secret's
symlink swap counts) and returns a new configuration only when they changed and the new pair
loads, so connections (and the calls on them) made with the old certificate go on, new
connections get the new one, and a half-written rotation keeps the old pair until it is whole.
"""

from __future__ import annotations

import os
import ssl
import threading

import grpc
import structlog

log = structlog.get_logger("orpheus_svc.tls")


class TlsFilesError(ValueError):
    """A TLS file is missing or unusable; the message names the setting and the file."""


def _read(path: str, setting: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise TlsFilesError(f"{setting} {path}: cannot read ({exc.strerror or exc})") from None
    if b"-----BEGIN" not in data:
        raise TlsFilesError(f"{setting} {path}: not a PEM file")
    return data


def _stamp(paths: list[str]) -> tuple:
    out = []
    for p in paths:
        try:
            st = os.stat(p)
            out.append((st.st_mtime_ns, st.st_size, st.st_ino, st.st_dev))
        except OSError:
            out.append(None)
    return tuple(out)


class CertificateFiles:
    """The server's key pair (and the client CA for mTLS), re-read on change."""

    def __init__(self, cert_file: str, key_file: str, client_ca_file: str | None = None) -> None:
        self.cert_file, self.key_file, self.client_ca_file = cert_file, key_file, client_ca_file
        self._paths = [p for p in (cert_file, key_file, client_ca_file) if p]
        self._lock = threading.Lock()
        self._stamp = _stamp(self._paths)
        self._failed: tuple | None = None
        self.initial = self._configuration()
        self.reloads = 0

    def _configuration(self):
        cert = _read(self.cert_file, "server.tls_cert_file")
        key = _read(self.key_file, "server.tls_key_file")
        ca = _read(self.client_ca_file, "server.tls_client_ca_file") if self.client_ca_file \
            else None
        # grpc reports a bad pair only as failed handshakes; check it here for a clear error
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            ctx.load_cert_chain(self.cert_file, self.key_file)
            if self.client_ca_file:
                ctx.load_verify_locations(self.client_ca_file)
        except (ssl.SSLError, OSError) as exc:
            raise TlsFilesError(f"server.tls_cert_file/tls_key_file {self.cert_file}, "
                                f"{self.key_file}: not a matching certificate and key ({exc})") \
                from None
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

    def fetch(self):
        """grpc's certificate-configuration fetcher: a new configuration or None (no change)."""
        stamp = _stamp(self._paths)
        if stamp == self._stamp or stamp == self._failed:
            return None
        with self._lock:
            if stamp == self._stamp:
                return None
            try:
                config = self._configuration()
            except TlsFilesError as exc:
                self._failed = stamp  # a rotation mid-write; retried when the files change
                log.error("tls files not reloaded; keeping the previous certificate",
                          error=str(exc))
                return None
            self._stamp, self._failed = stamp, None
            self.reloads += 1
            log.info("tls certificate reloaded", cert_file=self.cert_file)
            return config

    def uvicorn_ssl(self) -> dict:
        """The same files for the HTTP edge (uvicorn reads them once, at start-up)."""
        out = {"ssl_certfile": self.cert_file, "ssl_keyfile": self.key_file}
        if self.client_ca_file:
            out.update(ssl_ca_certs=self.client_ca_file, ssl_cert_reqs=ssl.CERT_REQUIRED)
        return out

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.dynamic_ssl_server_credentials(
            self.initial, self.fetch,
            require_client_authentication=bool(self.client_ca_file))
