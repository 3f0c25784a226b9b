"""OS-level thread names, so that `top -H`, `ps -L`, py-spy and /proc tell the threads apart.

CPython (3.11) names its threads for Python only: to the kernel, every thread of the server
is "python", and so is every process of the split topology. The long-lived threads take
their Python name as their OS name when they start (`os_named`), and the split topology's
processes name their main threads (orpheus-engine, orpheus-fe-N). Linux keeps at most
15 bytes. A leaf module; elsewhere than Linux it does nothing.
"""

from __future__ import annotations

import functools
import threading
from typing import Callable, TypeVar

T = TypeVar("T")
#: The kernel keeps this many bytes of a thread's name (TASK_COMM_LEN - 1).
MAX_OS_NAME = 15


def name_os_thread(name: str | None = None) -> bool:
    """Give the calling thread `name` (default: its Python name) at the OS level, cut to
    MAX_OS_NAME bytes. Returns whether the kernel took it (False off Linux)."""
    name = name or threading.current_thread().name
    raw = name.encode("utf-8", "replace")[:MAX_OS_NAME]
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "wb") as f:
            f.write(raw)
    except OSError:
        return False
    return True


def os_named(target: Callable[..., T]) -> Callable[..., T]:
    """`target`, naming its thread at the OS level first: threading.Thread(target=os_named(f))."""
    @functools.wraps(target)
    def run(*args, **kwargs) -> T:
        name_os_thread()
        return target(*args, **kwargs)
    return run
