"""/proc CPU parsing and listener lookup on this very process."""

import os
import socket

from orpheus_bench import procstat


def test_parses_comm_with_spaces_and_parentheses():
    line = "123 (my (odd) name) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1 0"
    comm, cpu = procstat._parse_stat(line)
    assert comm == "my (odd) name"
    assert cpu == (250 + 50) / procstat.CLK_TCK


def test_sample_of_this_process_grows_with_work():
    a = procstat.sample(os.getpid())
    x = 0
    while procstat.sample(os.getpid()).cpu_s - a.cpu_s < 0.05:
        x += sum(range(10000))
    b = procstat.sample(os.getpid())
    d = procstat.delta(a, b)
    assert d["cpu_s"] >= 0.05 and d["threads"]
    assert a.threads  # at least the main thread


def test_finds_the_process_listening_on_a_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        assert procstat.find_listener_pid(s.getsockname()[1]) == os.getpid()
    finally:
        s.close()
