"""The CUDA-IPC path end to end over ZMQ, without a GPU: lmcache-server runs
--gpu-backend emulated, and emulated GPU workers (gpu_worker.py) register paged
KV caches in shared memory through the reference's register_kv_cache frames
(real pickles of RawCudaIPCWrapper in msgpack ext 1), store a prompt through
the server's gather, and retrieve it through its scatter into other blocks of
another worker. Bytes are checked block by block; locks, leases and mappings
are checked to balance after each case, including a worker killed mid-store.

The same flows with the CUDA backend need a GPU (docs/performance.md says how
to run them there).
"""

import os
import signal
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest

from mp_client import (INVALID_ARGUMENT, NOT_REGISTERED, OP_END_SESSION, OP_LOOKUP,
                       OP_QUERY_PREFETCH_STATUS,
                       Client, ServerStartError, free_tcp_port, make_key, new_instance_id,
                       random_tokens, server_binary, start_server, stats)
from gpu_worker import OP_RETRIEVE, OP_STORE, OP_UNREGISTER_KV_CACHE, Worker, wait_server_event

NOT_FOUND = 200
CHUNK = 64
BLOCK = 16
EVENT_TIMEOUT_MS = 1500
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    binary = server_binary()
    tmp = tmp_path_factory.mktemp("gpu")
    url = f"ipc://{tmp / 'lmc.sock'}"
    args = ["--l1-size-gb", "0.25", "--chunk-size", str(CHUNK), "--port", str(free_tcp_port()),
            "--http-port", "0", "--drain-timeout-seconds", "0", "--gpu-backend", "emulated",
            "--gpu-event-timeout-ms", str(EVENT_TIMEOUT_MS)]
    try:
        srv = start_server(binary, url, tmp / "server.log", args)
    except ServerStartError as e:
        pytest.fail(str(e))
    yield srv
    rc = srv.stop(timeout=60)
    assert rc == 0, f"lmcache-server exited with {rc}:\n{srv.log()}"



@pytest.fixture
def clients(server, zmq_ctx):
    made = []

    def make():
        made.append(Client(zmq_ctx, server.url))
        return made[-1]

    yield make
    for c in made:
        c.close()


@pytest.fixture
def workers():
    made = []

    def make(layout="NHD", **geometry):
        made.append(Worker(f"lmc_test_{uuid.uuid4().hex[:12]}", layout, **geometry))
        return made[-1]

    yield make
    for w in made:
        w.close()


def registered(worker, client, model):
    reply = worker.register(client, new_instance_id(), model)
    assert reply.error is None, reply
    assert reply.value is None
    return worker


def fill_blocks(worker, ids, rng):
    for layer in range(worker.layers):
        t = worker.layer(layer)
        for b in ids:
            view = t[b] if worker.layout == "MLA" else t[:, b]
            view[...] = rng.integers(0, 2**16, size=view.shape, dtype=np.uint16)


def lookup_count(client, tokens, request_id, model):
    key = make_key(tokens, 0, len(tokens) // CHUNK * CHUNK, request_id, worker_id=None, model=model)
    assert client.call(OP_LOOKUP, key, 1) is None
    return client.call(OP_QUERY_PREFETCH_STATUS, request_id)


def expect_balanced(client, timeout_s=10.0):
    """No lock, lease, staged copy or transfer left once in-flight work ended."""
    deadline = time.monotonic() + timeout_s
    while True:
        s = stats(client)
        l1, gpu = s["l1"], s["gpu"]
        held = (l1["locked_objects"], l1["read_leases"], l1["write_leases"], l1["staging_objects"],
                gpu["transfers_in_flight"], gpu["closing_contexts"])
        if held == (0, 0, 0, 0, 0, 0):
            return s
        assert time.monotonic() < deadline, f"still held after {timeout_s} s: l1={l1} gpu={gpu}"
        time.sleep(0.02)


def store(worker, client, tokens, request_id, model, ids, event):
    key = make_key(tokens, 0, len(tokens), request_id, model=model)
    return client.request(OP_STORE, key, worker.instance_id, [[int(i) for i in ids]], event)


def retrieve(worker, client, tokens, request_id, model, ids, event, skip=0):
    key = make_key(tokens, 0, len(tokens), request_id, model=model)
    return client.request(OP_RETRIEVE, key, worker.instance_id, [[int(i) for i in ids]], event, skip)


@pytest.mark.parametrize("layout", ["NHD", "HND", "MLA"])
def test_a_prompt_stored_from_one_worker_is_retrieved_into_another_workers_blocks(
        server, clients, workers, layout):
    rng = np.random.default_rng(7)
    model = f"gpu-emulated/{layout}"
    a_client, b_client, scheduler = clients(), clients(), clients()
    a = registered(workers(layout), a_client, model)
    b = registered(workers(layout), b_client, model)
    tokens = random_tokens(rng, 3 * CHUNK)
    blocks = 3 * CHUNK // BLOCK
    ids_a = rng.choice(a.blocks, size=blocks, replace=False)
    ids_b = rng.choice(b.blocks, size=blocks, replace=False)

    # The store is sent before the engine has written its KV: the server must
    # wait for the engine's event before it reads a byte.
    event, record = a.new_event()
    reply = store(a, a_client, tokens, f"s-{layout}", model, ids_a, event)
    assert reply.error is None, reply
    server_event, ok = reply.value
    assert ok is True and isinstance(server_event, bytes) and len(server_event) == 64
    time.sleep(0.3)
    fill_blocks(a, ids_a, rng)
    record()
    assert wait_server_event(server_event) is True

    request_id = f"r-{layout}"
    assert lookup_count(scheduler, tokens, request_id, model) == 3
    event, record = b.new_event()
    record()
    reply = retrieve(b, b_client, tokens, request_id, model, ids_b, event)
    assert reply.error is None, reply
    assert reply.value[1] is True
    assert wait_server_event(reply.value[0]) is True
    for layer in range(a.layers):
        for src, dst in zip(ids_a, ids_b):
            np.testing.assert_array_equal(b.block(layer, dst), a.block(layer, src),
                                          err_msg=f"layer {layer} block {src} -> {dst}")
    assert scheduler.call(OP_END_SESSION, request_id) is None
    s = expect_balanced(scheduler)
    assert s["gpu"]["contexts"] >= 2


def test_failures_fail_closed_and_leave_nothing_held(server, clients, workers):
    rng = np.random.default_rng(8)
    model = "gpu-emulated/failures"
    a_client, b_client, scheduler = clients(), clients(), clients()
    a = registered(workers(), a_client, model)
    b = registered(workers(), b_client, model)
    tokens = random_tokens(rng, 2 * CHUNK)
    ids = list(range(8))
    event, record = a.new_event()
    record()

    short = store(a, a_client, tokens, "short", model, ids[:7], event)
    assert short.error["code"] == INVALID_ARGUMENT and "need 8 block ids" in short.error["message"]
    assert short.value == [b"", False]
    foreign = store(a, a_client, tokens, "foreign", model, ids[:7] + [a.blocks], event)
    assert foreign.error["code"] == INVALID_ARGUMENT and "outside" in foreign.error["message"]
    assert lookup_count(scheduler, tokens, "after-refusals", model) == 0

    missing = retrieve(b, b_client, tokens, "missing", model, ids, event)
    assert missing.error["code"] == NOT_FOUND and missing.value == [b"", False]

    # An engine event that never completes: the transfer fails, nothing is published.
    stuck, _ = a.new_event()
    reply = store(a, a_client, tokens, "stuck", model, ids, stuck)
    assert reply.error is None and reply.value[1] is True
    assert wait_server_event(reply.value[0], timeout_s=EVENT_TIMEOUT_MS / 1000 + 5) is False
    assert lookup_count(scheduler, tokens, "after-stuck", model) == 0

    # skip_first_n_tokens skips whole blocks only: 2 blocks and 5 tokens skip 2 blocks.
    fill_blocks(a, ids, rng)
    event, record = a.new_event()
    record()
    reply = store(a, a_client, tokens, "skip", model, ids, event)
    assert wait_server_event(reply.value[0]) is True
    assert lookup_count(scheduler, tokens, "skip", model) == 2
    reply = retrieve(b, b_client, tokens, "skip", model, ids, event, skip=2 * BLOCK + 5)
    assert reply.error is None, reply
    assert wait_server_event(reply.value[0]) is True
    for layer in range(a.layers):
        for block in ids[:2]:
            assert not b.block(layer, block).any(), f"skipped block {block} was written"
        for block in ids[2:]:
            np.testing.assert_array_equal(b.block(layer, block), a.block(layer, block))
    for request_id in ("after-refusals", "missing", "after-stuck", "skip"):
        assert scheduler.call(OP_END_SESSION, request_id) is None

    stranger = Worker(f"lmc_test_{uuid.uuid4().hex[:12]}")
    try:
        stranger.instance_id = new_instance_id()
        reply = store(stranger, clients(), tokens, "stranger", model, ids, event)
        assert reply.error["code"] == NOT_REGISTERED
    finally:
        stranger.close()
    expect_balanced(scheduler)


WORKER_SCRIPT = """
import sys, time, zmq
sys.path.insert(0, {here!r})
from mp_client import Client, make_key, new_instance_id, random_tokens
from gpu_worker import OP_STORE, Worker
import numpy as np
ctx = zmq.Context()
client = Client(ctx, {url!r})
worker = Worker({name!r})
reply = worker.register(client, new_instance_id(), "gpu-emulated/crash")
assert reply.error is None, reply
tokens = random_tokens(np.random.default_rng({seed}), {tokens})
event, _ = worker.new_event()  # never recorded: the copy waits for it
reply = client.request(OP_STORE, make_key(tokens, 0, len(tokens), "crash", model="gpu-emulated/crash"),
                       worker.instance_id, [list(range({blocks}))], event)
assert reply.error is None, reply
print("stored", flush=True)
time.sleep(600)
"""


def test_workers_killed_mid_store_leave_no_mapping_lock_or_staged_object(server, clients):
    scheduler = clients()
    for round_ in range(4):
        name = f"lmc_test_{uuid.uuid4().hex[:12]}"
        script = WORKER_SCRIPT.format(here=HERE, url=server.url, name=name, seed=round_,
                                      tokens=2 * CHUNK, blocks=2 * CHUNK // BLOCK)
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        try:
            line = proc.stdout.readline()
            assert line.strip() == "stored", line + proc.stdout.read()
            # Its store waits on its event: its cache and its event segment are mapped.
            deadline = time.monotonic() + 5
            while True:
                gpu = stats(scheduler)["gpu"]
                if gpu["transfers_in_flight"] == 1 and gpu["mapped_allocations"] >= 2:
                    break
                assert time.monotonic() < deadline, gpu
                time.sleep(0.01)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for suffix in ("_kv", "_ev"):
                try:
                    os.unlink(f"/dev/shm/{name}{suffix}")
                except FileNotFoundError:
                    pass
        s = expect_balanced(scheduler, timeout_s=EVENT_TIMEOUT_MS / 1000 + 10)
        deadline = time.monotonic() + 10
        while s["gpu"]["mapped_allocations"] != 0 or s["gpu"]["contexts"] != 0:
            assert time.monotonic() < deadline, s["gpu"]
            time.sleep(0.05)
            s = stats(scheduler)
        assert s["l1"]["used_bytes"] == s["l1"]["resident_bytes"], s["l1"]


def test_unregister_closes_the_context_and_its_mappings(server, clients, workers):
    model = "gpu-emulated/unregister"
    client, scheduler = clients(), clients()
    w = registered(workers(), client, model)
    assert stats(scheduler)["gpu"]["mapped_allocations"] >= 1
    assert client.call(OP_UNREGISTER_KV_CACHE, w.instance_id) is None
    s = expect_balanced(scheduler)
    deadline = time.monotonic() + 10
    while s["gpu"]["contexts"] != 0 or s["gpu"]["mapped_allocations"] != 0:
        assert time.monotonic() < deadline, s["gpu"]
        time.sleep(0.05)
        s = stats(scheduler)
    tokens = random_tokens(np.random.default_rng(9), CHUNK)
    event, record = w.new_event()
    record()
    reply = store(w, client, tokens, "after", model, range(4), event)
    assert reply.error["code"] == NOT_REGISTERED
