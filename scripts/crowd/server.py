"""The app in a child process of the benchmark (so its CPU and RSS are the server's alone, its decode workers
included: app/serving/decode_pool.py), and what /proc and its /config say of it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from .procs import descendants, process_cpu_s, threads

ROOT = Path(__file__).resolve().parents[2]
ENTRY = ROOT / "scripts" / "bench_crowd.py"          # `--serve-port` runs serve_child


def serve_child(port: int, model: str) -> None:
    """What the child runs: the app on 127.0.0.1:`port`, `model` (a bundled name or a folder; "" the
    default) as every session's model, loaded before the first page opens."""
    sys.path.insert(0, str(ROOT))
    from app import build_demo, serve
    from app.serving.model_cache import MODELS  # the one name below the app's top level this benchmark needs
    try:
        MODELS.default = MODELS.folder(model)
    except ValueError as err:
        raise SystemExit(f"--model: {err}") from None
    MODELS.get()
    serve("127.0.0.1", port, build_demo())


def _die_with_parent(cpus: set[int] | None = None) -> None:
    """In the server child before it runs: it dies with this process (PR_SET_PDEATHSIG), on `cpus` if given."""
    import ctypes
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    if cpus:
        os.sched_setaffinity(0, cpus)


def child_env(changes: dict) -> dict:
    """This process's environment with `changes` (a None value: that variable unset), no analytics."""
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", **changes}
    return {k: v for k, v in env.items() if v is not None}


class Server:
    """The app in a child process (its own process group, killed with it) and its /proc figures. `env`: what
    the child's environment adds, changes or (None) unsets (LOPA_DECODE_WORKERS, SPACE_ID: app/serving/decode_pool.py);
    `cpus`: the cores it may run on (its workers inherit them)."""

    def __init__(self, model: str, log: Path, cpus: set[int] | None = None, env: dict | None = None):
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/"
        self.log = log
        self.config: dict = {}
        # The child also dies if this process is killed outright (PR_SET_PDEATHSIG); loopback only, so
        # no analytics call leaves it.
        self.proc = subprocess.Popen([sys.executable, str(ENTRY), "--serve-port", str(self.port), "--model", model],
                                     stdout=log.open("w"), stderr=subprocess.STDOUT,
                                     env=child_env(env or {}),
                                     start_new_session=True, preexec_fn=lambda: _die_with_parent(cpus), cwd=ROOT)

    def wait_ready(self, bound_s: float) -> None:
        end = time.monotonic() + bound_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited ({self.proc.returncode}): {self.log_tail(300).strip()}")
            try:
                with urllib.request.urlopen(self.url + "config", timeout=5) as answer:
                    self.config = json.load(answer)
                    return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"the server did not answer within {bound_s:.0f} s: {self.log_tail()}")

    def settle_cpu(self, bound_s: float = 180.0, window_s: float = 2.0) -> float:
        """Wait until the server and its children (decode workers starting, a model warming up) spend under 10%
        of a core for `window_s` seconds, at most bound_s; returns the seconds waited."""
        start = time.monotonic()
        while time.monotonic() - start < bound_s:
            before = self.cpu_s()
            time.sleep(window_s)
            if self.cpu_s() - before < 0.1 * window_s:
                break
        return time.monotonic() - start

    def log_tail(self, n: int = 1500) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.is_file() else ""

    def cpu_s(self) -> float:
        """CPU seconds of the server and its children (the decode workers), utime + stime."""
        return sum(map(process_cpu_s, [self.proc.pid, *descendants(self.proc.pid)]))

    def workers(self) -> list[int]:
        """The server's child processes: its decode workers (and any branch-parallel ranks)."""
        return descendants(self.proc.pid)

    def threads(self) -> dict:
        """Threads now: the server process's, and each child's."""
        return {"server": threads(self.proc.pid), "workers": [threads(p) for p in self.workers()]}

    def status_mb(self, field: str) -> float:
        """A /proc status figure in MB: VmRSS summed over the server and its children (the decode workers,
        app/serving/decode_pool.py; any branch-parallel ranks), anything else the server process's own (VmHWM)."""
        pids = [self.proc.pid] + (descendants(self.proc.pid) if field == "VmRSS" else [])
        total = 0.0
        for pid in pids:
            try:
                lines = Path(f"/proc/{pid}/status").read_text().splitlines()
            except OSError:                   # a child that ended meanwhile
                if pid == self.proc.pid:
                    return float("nan")
                continue
            total += next((int(line.split()[1]) / 1024 for line in lines if line.startswith(field + ":")), 0.0)
        return total

    def reset_peak(self) -> bool:
        """Start the kernel's peak-RSS counter (VmHWM) afresh: it then sees transients between samples."""
        try:
            Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")
            return True
        except OSError:
            return False

    def min_rss_mb(self, seconds: float, every: float = 1.0) -> float:
        """The least RSS over `seconds` of samples: what the process holds once freed memory is returned."""
        samples, end = [], time.monotonic() + seconds
        while True:
            samples.append(self.status_mb("VmRSS"))
            if time.monotonic() + every > end:
                return min(samples)
            time.sleep(every)

    def stop(self) -> None:
        if self.proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
                try:
                    os.killpg(self.proc.pid, sig)
                    self.proc.wait(wait)
                    break
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    continue
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)                    # anything it started
        except ProcessLookupError:
            pass

    def event_names(self) -> dict[int, str]:
        """fn_index -> the handler a request runs: its name and what triggers it (`#elem.event`, or the
        handler it follows), so a request from an idle page names the event chain that sent it."""
        ids = {c["id"]: (c.get("props") or {}).get("elem_id") or c.get("type", c["id"])
               for c in self.config.get("components", [])}
        deps = {d.get("id", i): d for i, d in enumerate(self.config.get("dependencies", []))}
        names = {}
        for fn, dep in deps.items():
            after = deps.get(dep.get("trigger_after"), {}).get("api_name")
            triggers = [f"after {after}" if event == "then" else f"#{ids.get(target, target)}.{event}"
                        for target, event in dep.get("targets", [])]
            names[fn] = f"{dep.get('api_name') or fn} ({', '.join(triggers[:2])}{', ...' if len(triggers) > 2 else ''})"
        return names

    def first_prompt(self) -> str:
        """The text the page's prompt box opens with (the first example)."""
        return next(((c.get("props") or {}).get("value") or "" for c in self.config.get("components", [])
                     if (c.get("props") or {}).get("elem_id") == "prompt"), "")
