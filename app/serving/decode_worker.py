"""A decode worker (app/serving/decode_pool.py starts it): `python -m app.serving.decode_worker FD WARM THREADS`. It warms the
model in folder WARM (none if empty), says it is ready on the socket FD, then serves the server's messages
until told to exit or until the server's end closes:

    ("jobs", [job, ...], ahead)  decode_rounds(jobs) (app/serving/boundary.py): ("chunks", [...]) for each pass, at most
                                 `ahead` passes beyond those the server took (it says ("next",) for each), then
                                 ("end",), or ("raise", message) for an exception the server raises in its place
    ("close",)             stop the decode under way, if any (it is kept, paused); answered ("closed",)
    ("forget", ids | None) drop what is kept of these runs (None: every kept decode)
    ("exit",)
"""

from __future__ import annotations

import gc
import os
import sys
from multiprocessing.connection import Connection


def serve(conn: Connection, warm: str, threads: int) -> None:
    import torch
    torch.set_num_threads(threads)
    from . import boundary
    from .model_cache import MODELS
    if warm:
        try:
            MODELS.warm_up(warm)
        except ValueError:            # the job that needs it says why, by name
            pass
    # What is loaded by now (torch, the app, the model) lives as long as the worker: out of the collector's reach
    # (gc.freeze), a full collection during a decode scans what the decodes made, not every module's objects (one
    # took 0.3-0.6 CPU s, once every 4-5 Runs of the bundled model: scripts/bench_crowd.py, gc.callbacks).
    gc.collect()
    gc.freeze()
    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message[0] == "exit":
            return
        if message[0] == "close":             # the decode it stops had ended already
            conn.send(("closed",))
        elif message[0] == "forget":
            if message[1] is None:
                boundary.forget_kept()
            else:
                boundary.forget_runs(message[1])
        elif message[0] == "jobs" and not serve_jobs(conn, boundary.decode_rounds(message[1]), message[2]):
            return


def serve_jobs(conn: Connection, passes, ahead: int) -> bool:
    """Send the passes of `passes`, at most `ahead` beyond those the server took; False when the server is gone.
    Running ahead spares each round a wait for the server (two visitors' streams share its interpreter)."""
    credit = ahead
    try:
        for chunks in passes:
            conn.send(("chunks", chunks))
            credit -= 1
            while credit <= 0 or conn.poll():
                reply = conn.recv()
                if reply[0] != "next":           # "close": the caller stopped (finally pauses the decode)
                    conn.send(("closed",))
                    return True
                credit += 1
        conn.send(("end",))
    except (EOFError, OSError):
        return False
    except Exception as err:                      # a bug in a single-process decode: the server raises it
        conn.send(("raise", f"{type(err).__name__}: {err}"))
    finally:
        passes.close()
    return True


if __name__ == "__main__":
    fd, warm, threads = sys.argv[1:4]
    serve(Connection(int(fd)), warm, int(threads))
