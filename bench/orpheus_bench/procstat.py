"""CPU time of the server process from /proc (Linux), and finding it by its listening port.

/proc/<pid>/stat fields 14 and 15 are utime and stime in clock ticks (sysconf CLK_TCK,
usually 100 Hz, so figures are good to 10 ms per thread). They include every thread of
the process: the asyncio/gRPC loop, grpc's poller threads, the engine and flusher.
/proc/<pid>/task/<tid>/stat gives the same per thread; the thread's name (comm) is
whatever the process set, often just the program name. A sample covers the process and
its live descendants: the split topology (server.topology: split) runs the engine and the
gRPC front-ends as child processes of an idle parent.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _fields(text: str) -> tuple[str, list[str]]:
    # comm is in parentheses and may contain spaces or ')': split at the last ')'.
    lpar, rpar = text.index("("), text.rindex(")")
    return text[lpar + 1:rpar], text[rpar + 2:].split()


def _parse_stat(text: str) -> tuple[str, float]:
    comm, fields = _fields(text)
    # fields[0] is field 3 (state); utime = field 14, stime = field 15.
    utime, stime = int(fields[11]), int(fields[12])
    return comm, (utime + stime) / CLK_TCK


def _descendants(pid: int) -> list[int]:
    """Live processes below `pid` (children, their children...), from each one's ppid
    (stat field 4)."""
    children: dict[int, list[int]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ppid = int(_fields((proc / "stat").read_text())[1][1])
        except (OSError, ValueError, IndexError):
            continue  # ended meanwhile
        children.setdefault(ppid, []).append(int(proc.name))
    found, todo = [], list(children.get(pid, ()))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(children.get(child, ()))
    return found


@dataclass(frozen=True)
class CpuSample:
    pid: int
    cpu_s: float                         # whole process, user + system
    threads: dict[int, tuple[str, float]]  # tid -> (comm, cpu_s)


def sample(pid: int) -> CpuSample:
    """CPU seconds used so far by `pid` and its live descendants, and by each of their
    threads (a descendant that ended between two samples takes its CPU with it)."""
    _, total = _parse_stat(Path(f"/proc/{pid}/stat").read_text())
    threads: dict[int, tuple[str, float]] = {}
    for proc in [pid] + _descendants(pid):
        if proc != pid:
            try:
                total += _parse_stat(Path(f"/proc/{proc}/stat").read_text())[1]
            except (OSError, ValueError):
                continue  # ended meanwhile
        try:
            for task in Path(f"/proc/{proc}/task").iterdir():
                try:
                    threads[int(task.name)] = _parse_stat((task / "stat").read_text())
                except (OSError, ValueError):
                    continue  # the thread ended meanwhile
        except OSError:
            pass
    return CpuSample(pid, total, threads)


def delta(before: CpuSample, after: CpuSample, top: int = 6) -> dict:
    """CPU used between two samples: total and the busiest threads."""
    per = []
    for tid, (comm, cpu) in after.threads.items():
        used = cpu - before.threads.get(tid, (comm, 0.0))[1]
        if used > 0:
            per.append({"tid": tid, "name": comm, "cpu_s": round(used, 3)})
    per.sort(key=lambda x: -x["cpu_s"])
    return {"cpu_s": after.cpu_s - before.cpu_s, "threads": per[:top]}


def _listen_inodes(port: int) -> set[str]:
    inodes = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            local, state, inode = cols[1], cols[3], cols[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A = LISTEN
                inodes.add(inode)
    return inodes


def find_listener_pid(port: int) -> int | None:
    """The pid of the process (of this user) listening on TCP `port`, or None."""
    inodes = {f"socket:[{i}]" for i in _listen_inodes(port)}
    if not inodes:
        return None
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                try:
                    if os.readlink(fd) in inodes:
                        return int(proc.name)
                except OSError:
                    continue
        except OSError:
            continue
    return None


def machine_ticks() -> tuple[float, float] | None:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat's cpu line."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    vals = [int(v) for v in first[1:]]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)  # idle + iowait
    total = sum(vals[:8])  # guest time is already inside user
    return (total - idle) / CLK_TCK, total / CLK_TCK


def machine_busy_cores(before, after) -> float | None:
    """Cores' worth of CPU the whole machine used between two machine_ticks() samples."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    ncpu = os.cpu_count() or 1
    return (after[0] - before[0]) / (after[1] - before[1]) * ncpu
