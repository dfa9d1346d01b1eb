"""Fixtures the Python tests share."""

import pytest
import zmq


@pytest.fixture(scope="module")
def zmq_ctx():
    """One ZMQ context per test module. Destroyed with linger 0: a failed test
    leaves its sockets open, and term() would wait on them forever."""
    ctx = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)
