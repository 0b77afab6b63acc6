"""The server decodes on LOPA_TORCH_THREADS torch threads (default 1: app.server_threads says why), set
before the app is served; a bad value stops the server with a message naming the variable."""

import pytest
import torch

import app


def test_the_server_thread_count_is_one_unless_the_variable_says(monkeypatch):
    monkeypatch.delenv("LOPA_TORCH_THREADS", raising=False)
    assert app.server_threads() == 1
    monkeypatch.setenv("LOPA_TORCH_THREADS", "3")
    assert app.server_threads() == 3
    for bad in ("0", "two", "-1", "1e3", "999"):
        monkeypatch.setenv("LOPA_TORCH_THREADS", bad)
        with pytest.raises(SystemExit, match="LOPA_TORCH_THREADS must be a whole number"):
            app.server_threads()


def test_serve_sets_the_threads_before_it_launches(monkeypatch):
    seen, before = [], torch.get_num_threads()

    class Page:
        def launch(self, **kwargs):
            seen.append((torch.get_num_threads(), kwargs["server_port"]))

    monkeypatch.setenv("LOPA_TORCH_THREADS", "1" if before != 1 else "2")
    try:
        app.serve("127.0.0.1", 1234, Page())
        assert seen == [(app.server_threads(), 1234)]
    finally:
        torch.set_num_threads(before)
