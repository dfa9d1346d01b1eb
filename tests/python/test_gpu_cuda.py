"""The CUDA-IPC path against the real CUDA backend: runs only where a CUDA
device is visible (it is skipped elsewhere, CI included, where
test_gpu_emulated.py runs the same flows on the emulation). One command on a
GPU machine, from the repository root after tools/dev.sh build release:

    LMCACHE_SERVER_BINARY=build/src/lmcache-server /usr/bin/python3 -m pytest -q tests/python/test_gpu_cuda.py

Two PyTorch-free workers (cuda_worker.py) share their cudaMalloc'd NHD caches
with the server through cudaIpcGetMemHandle; one stores a prompt through the
server's gather, the other retrieves it into different blocks through its
scatter, synchronised by interprocess events both ways; every block is
compared, then locks, transfers and mappings are checked to balance.
"""

import time
import uuid

import numpy as np
import pytest
import zmq

from cuda_worker import Cuda, CudaWorker
from mp_client import (INVALID_ARGUMENT, OP_END_SESSION, OP_LOOKUP, OP_QUERY_PREFETCH_STATUS,
                       Client, ServerStartError, free_tcp_port, make_key, new_instance_id,
                       random_tokens, server_binary, start_server, stats)

CHUNK = 256
BLOCK = 16


def cuda_or_skip():
    try:
        cuda = Cuda()
    except RuntimeError as e:
        pytest.skip(str(e))
    if cuda.device_count() == 0:
        pytest.skip("no CUDA device visible (test_gpu_emulated.py covers the path without one)")
    return cuda


@pytest.fixture(scope="module")
def cuda():
    return cuda_or_skip()


@pytest.fixture(scope="module")
def server(cuda, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cuda")
    args = ["--l1-size-gb", "2", "--chunk-size", str(CHUNK), "--port", str(free_tcp_port()),
            "--http-port", "0", "--drain-timeout-seconds", "0", "--gpu-backend", "cuda"]
    try:
        srv = start_server(server_binary(), f"ipc://{tmp / 'lmc.sock'}", tmp / "server.log", args)
    except ServerStartError as e:
        pytest.fail(str(e))
    yield srv
    assert srv.stop(timeout=60) == 0, srv.log()


@pytest.fixture(scope="module")
def ctx():
    c = zmq.Context()
    yield c
    c.destroy(linger=0)  # a failed test leaves sockets open: term() would wait on them


def test_a_prompt_stored_from_one_gpu_worker_is_retrieved_into_another(cuda, server, ctx):
    rng = np.random.default_rng(11)
    model = f"gpu-cuda/{uuid.uuid4().hex[:8]}"
    a_client, b_client, scheduler = Client(ctx, server.url), Client(ctx, server.url), Client(ctx, server.url)
    a, b = CudaWorker(cuda), CudaWorker(cuda)
    try:
        for w, c in ((a, a_client), (b, b_client)):
            reply = w.register(c, new_instance_id(), model)
            assert reply.error is None, (reply, server.log())
        tokens = random_tokens(rng, 2 * CHUNK)
        blocks = 2 * CHUNK // BLOCK
        ids_a = [int(i) for i in rng.choice(a.blocks, size=blocks, replace=False)]
        ids_b = [int(i) for i in rng.choice(b.blocks, size=blocks, replace=False)]
        for layer in range(a.layers):
            a.write_layer(layer, rng.integers(0, 2**16, size=a.shape, dtype=np.uint16))
        key = make_key(tokens, 0, len(tokens), "store", model=model)
        reply = a_client.request("store", key, a.instance_id, [ids_a], a.engine_event())
        assert reply.error is None and reply.value[1] is True, reply
        cuda.wait_ipc_event(reply.value[0])

        lookup_key = make_key(tokens, 0, len(tokens), "retrieve", worker_id=None, model=model)
        assert scheduler.call(OP_LOOKUP, lookup_key, 1) is None
        assert scheduler.call(OP_QUERY_PREFETCH_STATUS, "retrieve") == 2
        key = make_key(tokens, 0, len(tokens), "retrieve", model=model)
        reply = b_client.request("retrieve", key, b.instance_id, [ids_b], b.engine_event(), 0)
        assert reply.error is None and reply.value[1] is True, reply
        cuda.wait_ipc_event(reply.value[0])
        for layer in range(a.layers):
            src, dst = a.layer(layer), b.layer(layer)
            for i, j in zip(ids_a, ids_b):
                np.testing.assert_array_equal(dst[:, j], src[:, i], err_msg=f"layer {layer} block {i}->{j}")
        assert scheduler.call(OP_END_SESSION, "retrieve") is None

        short = a_client.request("store", make_key(tokens, 0, len(tokens), "short", model=model),
                                 a.instance_id, [ids_a[:-1]], a.engine_event())
        assert short.error["code"] == INVALID_ARGUMENT and short.value == [b"", False]

        deadline = time.monotonic() + 10
        while True:
            s = stats(scheduler)
            if s["gpu"]["transfers_in_flight"] == 0 and s["l1"]["read_leases"] == 0 \
                    and s["l1"]["write_leases"] == 0:
                break
            assert time.monotonic() < deadline, s
            time.sleep(0.02)
        assert s["gpu"]["mapped_allocations"] == 2
        for c in (a_client, b_client):
            c.close()
        deadline = time.monotonic() + 10
        while stats(scheduler)["gpu"]["mapped_allocations"] != 0:
            assert time.monotonic() < deadline, "the departed workers' mappings stayed open"
            time.sleep(0.05)
    finally:
        for c in (a_client, b_client, scheduler):
            c.close()
        a.close()
        b.close()
