import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pytest
import torch

# CI machines have two cores and other work running; one thread keeps timings of tests sane.
torch.set_num_threads(1)


@pytest.fixture
def offline(monkeypatch):
    """No connection leaves this process: a harness that tried the hub would fail the test."""
    def refuse(*args, **kwargs):
        raise OSError("network disabled in this test")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
