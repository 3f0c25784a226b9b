"""`orpheus-svc serve --help` shows the security settings where users look first (issue 29
item 9): TLS, mTLS and API keys as flags, and an epilogue naming the settings and the page
that explains them. The flags are shortcuts for the same settings `--set` reaches."""

import pytest

from orpheus_svc.app.cli import build_parser, main
from orpheus_svc.config import load_config


def _help(capsys, *argv) -> str:
    with pytest.raises(SystemExit):
        build_parser().parse_args([*argv, "--help"])
    return capsys.readouterr().out


def test_serve_help_names_tls_mtls_and_api_keys(capsys):
    text = " ".join(_help(capsys, "serve").split())  # argparse wraps lines
    for flag in ("--tls-cert", "--tls-key", "--tls-client-ca", "--api-keys-file"):
        assert flag in text
    for setting in ("server.tls_cert_file", "server.tls_key_file", "server.tls_client_ca_file",
                    "server.api_keys_file", "docs/security.md"):
        assert setting in text
    assert "plaintext" in text  # what you get without them


def test_security_flags_set_the_server_settings(tmp_path, capsys):
    cert, key, ca, keys = (tmp_path / n for n in ("c.pem", "k.pem", "ca.pem", "keys.yaml"))
    assert main(["config", "--tls-cert", str(cert), "--tls-key", str(key),
                 "--tls-client-ca", str(ca), "--api-keys-file", str(keys)]) == 0
    printed = tmp_path / "printed.yaml"
    printed.write_text(capsys.readouterr().out)
    s = load_config(printed, environ={}).server
    assert (s.tls_cert_file, s.tls_key_file, s.tls_client_ca_file, s.api_keys_file) == (
        str(cert), str(key), str(ca), str(keys))
