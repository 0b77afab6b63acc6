"""What /proc says of the benchmark's processes: the tree under a pid, CPU seconds, threads, niceness."""

from __future__ import annotations

import os
from pathlib import Path


def descendants(pid: int) -> list[int]:
    """Every process under `pid` (children, theirs, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:                       # ended while listed
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found.update(kids)
        todo += kids
    return sorted(found)


def process_cpu_s(pid: int) -> float:
    """CPU seconds (utime + stime) of process `pid` so far; 0 if it has ended."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def threads(pid: int) -> int | None:
    """The threads process `pid` has now (None: it has ended)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    return next((int(line.split()[1]) for line in lines if line.startswith("Threads:")), None)


def cpu_by_side(server_pid: int) -> dict:
    """CPU seconds so far of the server process, of its children (the decode workers, any branch-parallel
    ranks) and of this benchmark's browsers (every other process under this one), from /proc: what a Run
    costs each side (processes that ended meanwhile are not counted)."""
    children = descendants(server_pid)
    browsers = [p for p in descendants(os.getpid()) if p != server_pid and p not in children]
    return {"server": process_cpu_s(server_pid), "workers": sum(map(process_cpu_s, children)),
            "browsers": sum(map(process_cpu_s, browsers))}


def lower_browsers(server_pid: int, nice: int) -> int:
    """Give the benchmark's own processes (Playwright's driver, Chromium and its zygotes; renderers opened
    later inherit it) the niceness `nice`, the server and its children left as they are: on a Space the
    visitors' browsers run on their own machines, here they share the server's two cores. Returns how many."""
    spare = {server_pid, *descendants(server_pid)}
    lowered = 0
    for pid in [p for p in descendants(os.getpid()) if p not in spare]:
        try:
            os.setpriority(os.PRIO_PROCESS, pid, nice)
            lowered += 1
        except OSError:                       # ended meanwhile
            pass
    return lowered
