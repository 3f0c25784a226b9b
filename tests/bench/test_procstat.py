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



def test_a_sample_counts_the_live_child_processes():
    """The split topology's engine and front-ends are children of an idle parent: their
    CPU is the server's."""
    import subprocess
    import sys

    burn = ("import sys, time\nsys.stdin.readline()\nt = time.process_time()\n"
            "while time.process_time() - t < 0.3: pass\nprint('done', flush=True)\n"
            "time.sleep(30)")
    child = subprocess.Popen([sys.executable, "-c", burn], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        before = procstat.sample(os.getpid())
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "done"  # 0.3 s of CPU burnt, still alive
        after = procstat.sample(os.getpid())
        assert child.pid in procstat._descendants(os.getpid())
        assert child.pid in after.threads  # its main thread, among the server's threads
        assert after.cpu_s - before.cpu_s >= 0.25  # 0.3 s, read in 10 ms ticks; this
        # process itself only waits meanwhile
    finally:
        child.kill()
        child.wait()
