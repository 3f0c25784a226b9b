"""OS-level thread names (orpheus_svc/threads.py)."""

import sys
import threading

import pytest

from orpheus_svc.threads import MAX_OS_NAME, name_os_thread, os_named

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")


def _os_name() -> str:
    with open(f"/proc/self/task/{threading.get_native_id()}/comm") as f:
        return f.read().strip()


@linux
def test_a_thread_started_with_os_named_carries_its_python_name_to_the_os():
    seen = []
    t = threading.Thread(target=os_named(lambda x: seen.append((x, _os_name()))), args=(7,),
                         name="engine-core")
    t.start()
    t.join()
    assert seen == [(7, "engine-core")]


@linux
def test_a_long_name_is_cut_to_what_the_kernel_keeps():
    seen = []

    def run():
        seen.append((name_os_thread("orpheus-a-very-long-thread-name"), _os_name()))
    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert seen == [(True, "orpheus-a-very-long-thread-name"[:MAX_OS_NAME])]


def test_os_named_returns_what_the_target_returns_and_keeps_its_name():
    def work(a, b=1):
        return a + b
    wrapped, got = os_named(work), []
    t = threading.Thread(target=lambda: got.append(wrapped(2, b=3)))  # not the main thread
    t.start()
    t.join()
    assert got == [5] and wrapped.__name__ == "work"
