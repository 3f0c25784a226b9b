"""engine_builder.grammar_smoke (run by scripts/gpu-smoke.sh) against a real server on the
sim backend: it passes on grammar-valid audio and fails with the reason otherwise."""

import pytest

from engine_builder.grammar_smoke import main
from tests.e2e.server_proc import ServerProcess


@pytest.fixture(scope="module")
def sim_server(tmp_path_factory):
    srv = ServerProcess(tmp_path_factory.mktemp("logs"), "engine.backend=sim",
                        "engine.max_sessions=8", "engine.max_batch_size=8", name="grammar-smoke")
    try:
        srv.wait_serving()
        yield srv
    finally:
        srv.stop()


def test_the_check_passes_on_a_server_whose_tokens_keep_the_grammar(sim_server, capsys):
    assert main(["--target", sim_server.addr, "--requests", "2", "--min-tokens", "300"]) == 0
    out = capsys.readouterr().out
    assert "grammar_violations 0 -> 0: ok" in out


def test_the_check_fails_when_calls_produce_too_few_tokens(sim_server, capsys):
    assert main(["--target", sim_server.addr, "--requests", "1",
                 "--min-tokens", "1000000"]) == 1
    assert "tokens < --min-tokens 1000000" in capsys.readouterr().err


def test_no_server_is_exit_2(capsys):
    assert main(["--target", "127.0.0.1:9", "--requests", "1"]) == 2
