"""A stand-in for the ZeroGPU boundary of the `spaces` package (0.51: spaces/zero/wrappers.py).

What it keeps from the real one: a decorated call runs in another process, on a pickled copy of
its arguments; what it returns or yields is pickled back, item by item for a generator; closing the
caller's generator sets a stop flag that the worker checks after computing its next item; an
exception reaches the caller as "ZeroGPU worker error" with only its class name. Stricter than the
real one: the worker is a *spawn* process (ZeroGPU forks, and so inherits the server's memory; here
nothing crosses but the pickled values), arguments and results must also be JSON-able (our
contract: plain values), and the model must be loaded before the first call and be the same object
after every call (the model loads once per process, never inside a GPU call).
"""

from __future__ import annotations

import importlib
import inspect
import json
import multiprocessing as mp
import os
import pickle
import threading
import traceback


class WorkerError(RuntimeError):
    pass


def load_app_model(model_dir: str) -> None:
    """Worker setup: what app.py does at import on a ZeroGPU Space (the model, loaded once)."""
    from pathlib import Path

    import torch

    from app.serving.model_cache import MODELS
    torch.set_num_threads(1)
    MODELS.default = Path(model_dir)
    MODELS.get()


def _plain(value, what: str) -> None:
    try:
        json.dumps(value)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{what} is not a plain (JSON-able) value: {err}") from None


def _serve(conn, stop, env: dict, setup: tuple) -> None:
    os.environ.update(env)
    module, name, args = setup
    getattr(importlib.import_module(module), name)(*args)
    from app.serving.model_cache import MODELS
    models = set(MODELS.held())
    conn.send_bytes(pickle.dumps(("ready", None)))
    while True:
        message = conn.recv_bytes()
        if not message:
            return
        (module, name), args, kwargs = pickle.loads(message)
        fn = getattr(importlib.import_module(module), name)
        try:
            result = fn(*args, **kwargs)
            if inspect.isgenerator(result):
                stop.clear()
                for item in result:          # as spaces does: compute the next item, then look at the flag
                    if stop.is_set():
                        result.close()
                        break
                    _plain(item, f"an item yielded by {name}")
                    conn.send_bytes(pickle.dumps(("item", item)))
                reply = ("end", None)
            else:
                _plain(result, f"the result of {name}")
                reply = ("ok", result)
            if set(MODELS.held()) != models:
                raise RuntimeError(f"{name} loaded a model: models load before any GPU call (app.serving.model_cache.preload)")
        except Exception as err:  # noqa: BLE001 - every error crosses back, like spaces' ExceptionResult
            reply = ("error", (type(err).__name__, traceback.format_exc()))
        conn.send_bytes(pickle.dumps(reply))


class FakeZeroGPU:
    """One worker process (like one GPU slot); `GPU` decorates like spaces.GPU."""

    def __init__(self, env: dict | None = None, setup: tuple = ("fake_spaces", "load_app_model", ())):
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._stop = ctx.Event()
        self._lock = threading.Lock()
        self.process = ctx.Process(target=_serve, args=(child, self._stop, dict(env or {}), setup), daemon=True)
        self.process.start()
        if not self._conn.poll(300):
            raise TimeoutError("the fake ZeroGPU worker did not start")
        assert pickle.loads(self._conn.recv_bytes())[0] == "ready"
        self.calls = 0

    def _send(self, fn, args, kwargs) -> None:
        _plain([list(args), kwargs], f"the arguments of {fn.__name__}")
        self.calls += 1
        self._conn.send_bytes(pickle.dumps(((fn.__module__, fn.__name__), args, kwargs)))

    def _recv(self):
        kind, value = pickle.loads(self._conn.recv_bytes())
        if kind == "error":
            name, text = value
            print(text)
            raise WorkerError(f"ZeroGPU worker error: {name}")
        return kind, value

    def GPU(self, fn):  # noqa: N802 - the name spaces uses
        if inspect.isgeneratorfunction(fn):
            def handler(*args, **kwargs):
                with self._lock:
                    self._send(fn, args, kwargs)
                    while True:
                        kind, value = self._recv()
                        if kind == "end":
                            return
                        try:
                            yield value
                        except GeneratorExit:
                            self._stop.set()          # the worker stops after its next item
                            while self._recv()[0] != "end":
                                pass
                            raise
        else:
            def handler(*args, **kwargs):
                with self._lock:
                    self._send(fn, args, kwargs)
                    return self._recv()[1]
        handler.__wrapped__ = fn
        return handler

    def close(self) -> None:
        self._conn.send_bytes(b"")
        self.process.join(10)
        if self.process.is_alive():
            self.process.kill()
