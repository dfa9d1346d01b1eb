"""Fixtures the Python tests share."""

import pytest
import zmq


@pytest.fixture(scope="module")
def zmq_ctx():
    """One ZMQ context per test module, terminated after its clients closed."""
    ctx = zmq.Context()
    yield ctx
    ctx.term()
