"""Fixtures the Python tests share."""

import os

import pytest


@pytest.fixture(scope="module")
def zmq_ctx():
    """One ZMQ context per test module. Destroyed with linger 0: a failed test
    leaves its sockets open, and term() would wait on them forever."""
    import zmq  # here, not at the top: test_gpu_torch.py imports PyTorch before zmq

    ctx = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


@pytest.fixture
def binary():
    """The lmcache-server under test (LMCACHE_SERVER_BINARY)."""
    from mp_client import server_binary

    path = server_binary()
    if not os.access(path, os.X_OK):
        pytest.fail(f"lmcache-server binary not found: {path} (set LMCACHE_SERVER_BINARY)")
    return path
