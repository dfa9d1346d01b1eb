"""The CUDA-IPC path end to end over ZMQ, without a GPU: lmcache-server runs
--gpu-backend emulated, and emulated vLLM workers (gpu_worker.py) register
their paged KV caches exactly as the LMCache MP connector does (seven
frames; CudaIPCWrapper pickles with PyTorch's 66-byte versioned handles;
the tensors, shapes and strides vLLM allocates in each version, layer views
into one allocation included; several KV groups), store a prompt through
the server's gather, and retrieve it through its scatter into other blocks
of another worker. Bytes are checked block by block; locks, leases, mappings
and PyTorch's IPC refcounters are checked to balance after each case.

The same flows with the CUDA backend need a GPU (test_gpu_cuda.py).
"""

import os
import signal
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest

from mp_client import (INVALID_ARGUMENT, MODEL, NOT_REGISTERED, OP_END_SESSION, OP_LOOKUP,
                       OP_QUERY_PREFETCH_STATUS, Client, ServerStartError, free_tcp_port,
                       make_key, map_pool, new_instance_id, random_tokens, register, server_binary,
                       start_server, stats, store_prompt)
from gpu_worker import (OP_RETRIEVE, OP_STORE, OP_UNREGISTER_KV_CACHE, Worker,
                        wait_server_event)

NOT_FOUND = 200
LAYOUT_MISMATCH = 206
CHUNK = 64
BLOCK = 16
EVENT_TIMEOUT_MS = 1500
HERE = os.path.dirname(os.path.abspath(__file__))


def launch(tmp, extra=(), event_timeout_ms=EVENT_TIMEOUT_MS):
    args = ["--l1-size-gb", "0.25", "--chunk-size", str(CHUNK), "--port", str(free_tcp_port()),
            "--http-port", "0", "--drain-timeout-seconds", "0", "--gpu-backend", "emulated",
            "--gpu-event-timeout-ms", str(event_timeout_ms), *extra]
    try:
        return start_server(server_binary(), f"ipc://{tmp / 'lmc.sock'}", tmp / "server.log", args)
    except ServerStartError as e:
        pytest.fail(str(e))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = launch(tmp_path_factory.mktemp("gpu"))
    yield srv
    rc = srv.stop(timeout=60)
    assert rc == 0, f"lmcache-server exited with {rc}:\n{srv.log()}"


@pytest.fixture
def clients(server, zmq_ctx):
    made = []

    def make(url=None):
        made.append(Client(zmq_ctx, url or server.url))
        return made[-1]

    yield make
    for c in made:
        c.close()


@pytest.fixture
def workers():
    made = []

    def make(**geometry):
        made.append(Worker(f"lmc_test_{uuid.uuid4().hex[:12]}", **geometry))
        return made[-1]

    yield make
    for w in made:
        w.close()


def registered(worker, client, model):
    reply = worker.register(client, new_instance_id(), model)
    assert reply.error is None, reply
    assert reply.value is None
    return worker


def lookup_count(client, tokens, request_id, model, chunk=CHUNK):
    key = make_key(tokens, 0, len(tokens) // chunk * chunk, request_id, worker_id=None, model=model)
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


def expect_closed(client, timeout_s=10.0):
    """Every device context closed and every mapping unmapped."""
    deadline = time.monotonic() + timeout_s
    while True:
        gpu = stats(client)["gpu"]
        if gpu["contexts"] == 0 and gpu["closing_contexts"] == 0 and gpu["mapped_allocations"] == 0:
            return
        assert time.monotonic() < deadline, gpu
        time.sleep(0.02)


def ids_of(groups):
    return [[int(i) for i in ids] for ids in groups]


def store(worker, client, tokens, request_id, model, groups, event):
    key = make_key(tokens, 0, len(tokens), request_id, model=model)
    return client.request(OP_STORE, key, worker.instance_id, ids_of(groups), event)


def retrieve(worker, client, tokens, request_id, model, groups, event, skip=0):
    key = make_key(tokens, 0, len(tokens), request_id, model=model)
    return client.request(OP_RETRIEVE, key, worker.instance_id, ids_of(groups), event, skip)


def blocks_for(rng, group, count):
    """`count` distinct block ids of a group's cache, never vLLM's null block 0."""
    return rng.choice(np.arange(1, group.blocks), size=count, replace=False)


def stored_and_retrieved(a, b, a_client, b_client, scheduler, model, tag, rng, chunks=3,
                         chunk=CHUNK):
    """A stores `chunks` chunks of `chunk` tokens from random blocks, B
    retrieves them into others; returns the ids."""
    tokens = random_tokens(rng, chunks * chunk)
    ids_a = [blocks_for(rng, g, chunks * chunk // g.block_size) for g in a.groups]
    ids_b = [blocks_for(rng, g, chunks * chunk // g.block_size) for g in b.groups]
    # The store is sent before the engine has written its KV: the server must
    # wait for the engine's event before it reads a byte.
    event, record = a.new_event()
    reply = store(a, a_client, tokens, f"s-{tag}", model, ids_a, event)
    assert reply.error is None, reply
    server_event, ok = reply.value
    assert ok is True and isinstance(server_event, bytes) and len(server_event) == 64
    time.sleep(0.1)
    for g, ids in zip(a.groups, ids_a):
        g.fill(ids, rng)
    record()
    assert wait_server_event(server_event) is True
    request_id = f"r-{tag}"
    assert lookup_count(scheduler, tokens, request_id, model, chunk) == chunks
    event, record = b.new_event()
    record()
    reply = retrieve(b, b_client, tokens, request_id, model, ids_b, event)
    assert reply.error is None, reply
    assert reply.value[1] is True
    assert wait_server_event(reply.value[0]) is True
    assert scheduler.call(OP_END_SESSION, request_id) is None
    return ids_a, ids_b


def expect_refcounters_released(worker):
    for slot in range(worker.refcounters.next):
        assert worker.refcounters.slot(slot) == 0, f"slot {slot} of {worker.refcounters.name}"
    assert worker.refcounters.maps() == 1, "the sender's own map count"


CASES = [  # (layout, element size, heads, dim-0 padding)
    ("flash_attn_nhd", 2, 4, 0), ("flash_attn_hnd", 2, 4, 0), ("blocks_first_nhd", 4, 2, 8),
    ("blocks_first_hnd", 1, 4, 0), ("packed_hnd", 2, 4, 0), ("packed_nhd", 1, 4, 0),
    ("lbhnc", 2, 4, 0), ("lbnhc", 4, 2, 0), ("blhnc", 2, 4, 16), ("mla", 1, 1, 0),
    ("mla_4d", 2, 1, 0), ("cross_layer", 2, 2, 0),
    ("flash_attn_hnd", 2, 1, 0), ("lbnhc", 2, 1, 0),  # one KV head per rank (70B at TP 8)
]


@pytest.mark.parametrize("layout,element_size,heads,pad", CASES,
                         ids=[f"{c[0]}-e{c[1]}-h{c[2]}-p{c[3]}" for c in CASES])
def test_a_prompt_stored_by_one_worker_is_retrieved_into_another_workers_blocks(
        server, clients, workers, layout, element_size, heads, pad):
    rng = np.random.default_rng(7)
    model = f"gpu-emulated/{layout}-{element_size}-{heads}"
    a_client, b_client, scheduler = clients(), clients(), clients()
    geometry = dict(layout=layout, element_size=element_size, heads=heads, pad=pad,
                    head_size=576 if layout.startswith("mla") else 32)
    a = registered(workers(**geometry), a_client, model)
    b = registered(workers(**geometry), b_client, model)
    ids_a, ids_b = stored_and_retrieved(a, b, a_client, b_client, scheduler, model, layout, rng)
    for layer in range(a.main.layers):
        for src, dst in zip(ids_a[0], ids_b[0]):
            np.testing.assert_array_equal(b.main.block(layer, dst), a.main.block(layer, src),
                                          err_msg=f"layer {layer} block {src} -> {dst}")
    s = expect_balanced(scheduler)
    assert s["gpu"]["contexts"] >= 2
    for client, w in ((a_client, a), (b_client, b)):
        assert client.call(OP_UNREGISTER_KV_CACHE, w.instance_id) is None
    expect_closed(scheduler)
    expect_refcounters_released(a)
    expect_refcounters_released(b)


def test_two_kv_groups_with_a_sliding_window_as_a_hybrid_model_registers_them(server, clients, workers):
    """Group 0: full attention; group 1: a window of two blocks, shorter than a chunk
    (a model like gpt-oss). The window group keeps only each chunk's last two blocks,
    and a retrieve writes only the last chunk's."""
    rng = np.random.default_rng(11)
    model = "gpu-emulated/hybrid"
    groups = [dict(layout="lbhnc", layers=3), dict(layout="lbhnc", layers=2, heads=1, window=2 * BLOCK)]
    a_client, b_client, scheduler = clients(), clients(), clients()
    a = registered(workers(groups=groups), a_client, model)
    b = registered(workers(groups=groups), b_client, model)
    ids_a, ids_b = stored_and_retrieved(a, b, a_client, b_client, scheduler, model, "hybrid", rng)
    full, window = 0, 1
    for layer in range(a.groups[full].layers):
        for src, dst in zip(ids_a[full], ids_b[full]):
            np.testing.assert_array_equal(b.groups[full].block(layer, dst), a.groups[full].block(layer, src))
    per_chunk = CHUNK // BLOCK
    for layer in range(a.groups[window].layers):
        for i, (src, dst) in enumerate(zip(ids_a[window], ids_b[window])):
            got = b.groups[window].block(layer, dst)
            if i >= 3 * per_chunk - 2:  # the window at the end of the range
                np.testing.assert_array_equal(got, a.groups[window].block(layer, src), err_msg=f"block {i}")
            else:
                assert not got.any(), f"block {i} outside the window was written"
    expect_balanced(scheduler)


def test_a_model_of_its_own_chunk_size_is_gathered_and_scattered_at_it(tmp_path, zmq_ctx, workers):
    """A model at 160 tokens per chunk (--model-chunk-size; 10 blocks of 16)
    beside the default 64, over its own endpoint (--model-url): its workers
    learn 160 from get_chunk_size there, register, store and retrieve block
    for block; the default model registering on that endpoint is refused."""
    from mp_client import chunk_size
    wide_model, wide = "gpu-emulated/wide", f"ipc://{tmp_path / 'wide.sock'}"
    srv = launch(tmp_path, ["--model-chunk-size", f"{wide_model}=160",
                            "--model-url", f"{wide_model}={wide}"])
    made = []
    try:
        made.extend(Client(zmq_ctx, wide) for _ in range(3))
        a_client, b_client, scheduler = made
        assert chunk_size(a_client) == 160
        geometry = dict(layout="flash_attn_hnd", element_size=2, heads=4, pad=0, head_size=32,
                        blocks=64)
        a = registered(workers(**geometry), a_client, wide_model)
        b = registered(workers(**geometry), b_client, wide_model)
        rng = np.random.default_rng(17)
        ids_a, ids_b = stored_and_retrieved(a, b, a_client, b_client, scheduler, wide_model,
                                            "wide", rng, chunks=2, chunk=160)
        assert len(ids_a[0]) == 20
        for layer in range(a.main.layers):
            for src, dst in zip(ids_a[0], ids_b[0]):
                np.testing.assert_array_equal(b.main.block(layer, dst), a.main.block(layer, src),
                                              err_msg=f"layer {layer} block {src} -> {dst}")
        expect_balanced(scheduler)
        made.append(Client(zmq_ctx, wide))
        other = workers(**geometry)
        reply = other.register(made[-1], new_instance_id(), MODEL)
        assert reply.error is not None and reply.error["code"] == LAYOUT_MISMATCH, reply
        for client, w in ((a_client, a), (b_client, b)):
            assert client.call(OP_UNREGISTER_KV_CACHE, w.instance_id) is None
        expect_closed(scheduler)
    finally:
        for c in made:
            c.close()
        assert srv.stop(timeout=60) == 0, srv.log()


def test_failures_fail_closed_answer_a_real_event_and_leave_nothing_held(server, clients, workers):
    rng = np.random.default_rng(8)
    model = "gpu-emulated/failures"
    a_client, b_client, scheduler = clients(), clients(), clients()
    a = registered(workers(), a_client, model)
    b = registered(workers(), b_client, model)
    tokens = random_tokens(rng, 2 * CHUNK)
    ids = list(range(1, 9))
    event, record = a.new_event()
    record()

    short = store(a, a_client, tokens, "short", model, [ids[:7]], event)
    assert short.error["code"] == INVALID_ARGUMENT and "need 8 block ids" in short.error["message"]
    handle, ok = short.value
    # A reference client imports whatever handle comes back: it is a real, completed (failed) event.
    assert ok is False and len(handle) == 64 and wait_server_event(handle) is False
    foreign = store(a, a_client, tokens, "foreign", model, [ids[:7] + [a.main.blocks]], event)
    assert foreign.error["code"] == INVALID_ARGUMENT and "outside" in foreign.error["message"]
    two_lists = store(a, a_client, tokens, "lists", model, [ids, ids], event)
    assert two_lists.error["code"] == INVALID_ARGUMENT and "2 lists" in two_lists.error["message"]
    assert lookup_count(scheduler, tokens, "after-refusals", model) == 0

    missing = retrieve(b, b_client, tokens, "missing", model, [ids], event)
    assert missing.error["code"] == NOT_FOUND and missing.value[1] is False
    assert wait_server_event(missing.value[0]) is False

    # An engine event that never completes: the transfer fails, nothing is published.
    stuck, _ = a.new_event()
    reply = store(a, a_client, tokens, "stuck", model, [ids], stuck)
    assert reply.error is None and reply.value[1] is True
    assert wait_server_event(reply.value[0], timeout_s=EVENT_TIMEOUT_MS / 1000 + 5) is False
    assert lookup_count(scheduler, tokens, "after-stuck", model) == 0

    # skip_first_n_tokens skips whole blocks only: 2 blocks and 5 tokens skip 2 blocks.
    a.main.fill(ids, rng)
    event, record = a.new_event()
    record()
    reply = store(a, a_client, tokens, "skip", model, [ids], event)
    assert wait_server_event(reply.value[0]) is True
    assert lookup_count(scheduler, tokens, "skip", model) == 2
    reply = retrieve(b, b_client, tokens, "skip", model, [ids], event, skip=2 * BLOCK + 5)
    assert reply.error is None, reply
    assert wait_server_event(reply.value[0]) is True
    for layer in range(a.main.layers):
        for block in ids[:2]:
            assert not b.main.block(layer, block).any(), f"skipped block {block} was written"
        for block in ids[2:]:
            np.testing.assert_array_equal(b.main.block(layer, block), a.main.block(layer, block))
    for request_id in ("after-refusals", "missing", "after-stuck", "skip"):
        assert scheduler.call(OP_END_SESSION, request_id) is None

    stranger = Worker(f"lmc_test_{uuid.uuid4().hex[:12]}")
    try:
        stranger.instance_id = new_instance_id()
        reply = store(stranger, clients(), tokens, "stranger", model, [ids], event)
        assert reply.error["code"] == NOT_REGISTERED and reply.value == [b"", False]
    finally:
        stranger.close()
    expect_balanced(scheduler)


def test_objects_of_one_layout_are_never_served_to_a_client_of_another(server, clients, workers):
    """A packed-format client (vLLM >= 0.26) and a split-format one (<= 0.25) store
    the same bytes in another order: same model, same prompt, kept apart."""
    rng = np.random.default_rng(12)
    model = "gpu-emulated/layouts"
    packed_client, split_client, scheduler = clients(), clients(), clients()
    packed = registered(workers(layout="lbhnc"), packed_client, model)
    split = workers(layout="flash_attn_nhd")
    refused = split.register(split_client, new_instance_id(), model)
    assert refused.error["code"] == LAYOUT_MISMATCH, refused
    tokens = random_tokens(rng, 2 * CHUNK)
    ids = blocks_for(rng, packed.main, 8)
    packed.main.fill(ids, rng)
    event, record = packed.new_event()
    record()
    reply = store(packed, packed_client, tokens, "packed", model, [ids], event)
    assert wait_server_event(reply.value[0]) is True
    assert lookup_count(scheduler, tokens, "packed", model) == 2
    assert scheduler.call(OP_END_SESSION, "packed") is None
    assert packed_client.call(OP_UNREGISTER_KV_CACHE, packed.instance_id) is None
    # The model's packed objects are still in L1; a split client sees none of them.
    registered(split, split_client, model)
    assert lookup_count(scheduler, tokens, "split", model) == 0
    event, record = split.new_event()
    record()
    reply = retrieve(split, split_client, tokens, "split", model, [ids], event)
    assert reply.error["code"] == NOT_FOUND, reply
    assert not any(split.main.block(0, b).any() for b in ids)
    assert scheduler.call(OP_END_SESSION, "split") is None
    expect_balanced(scheduler)


def test_a_split_format_gpu_worker_reads_what_an_engine_driven_worker_stored(server, clients, workers):
    """Namespace 0: the reference's [2, L, T, hidden] objects are shared by both paths."""
    rng = np.random.default_rng(14)
    shm_client, gpu_client, scheduler = clients(), clients(), clients()
    instance = new_instance_id()
    registration = register(shm_client, instance)
    pool = map_pool(registration["shm_name"], registration["pool_size"])
    gpu = registered(workers(layout="flash_attn_nhd", layers=2, heads=4, head_size=32), gpu_client, MODEL)
    tokens = random_tokens(rng, 2 * CHUNK)
    patterns = store_prompt(shm_client, pool, instance, tokens, 2, "shm", rng)
    assert lookup_count(scheduler, tokens, "shared", MODEL) == 2
    ids = blocks_for(rng, gpu.main, 8)
    event, record = gpu.new_event()
    record()
    reply = retrieve(gpu, gpu_client, tokens, "shared", MODEL, [ids], event)
    assert reply.error is None, reply
    assert wait_server_event(reply.value[0]) is True
    per_chunk = CHUNK // BLOCK
    for c in range(2):
        for layer in range(2):
            view = gpu.main.element_bytes(layer)
            for kv in range(2):
                for t in range(CHUNK):
                    block = ids[c * per_chunk + t // BLOCK]
                    got = view[kv, block, t % BLOCK].reshape(-1)
                    want = patterns[c][kv, layer, t].view(np.uint8)
                    np.testing.assert_array_equal(got, want, err_msg=f"chunk {c} layer {layer} kv {kv} token {t}")
    assert scheduler.call(OP_END_SESSION, "shared") is None
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
event, _ = worker.new_event()  # never recorded: the engine dies mid-step
reply = client.request(OP_STORE, make_key(tokens, 0, len(tokens), "crash", model="gpu-emulated/crash"),
                       worker.instance_id, [list(range(1, {blocks} + 1))], event)
assert reply.error is None, reply
print("stored", flush=True)
time.sleep(600)
"""


def test_a_crash_loop_of_engines_killed_mid_store_leaves_no_mapping_lock_or_staged_object(server, clients):
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
            for leftover in [f for f in os.listdir("/dev/shm") if name in f]:
                os.unlink(f"/dev/shm/{leftover}")  # what a SIGKILLed engine leaves, as PyTorch's does
        s = expect_balanced(scheduler, timeout_s=EVENT_TIMEOUT_MS / 1000 + 10)
        expect_closed(scheduler)
        assert s["l1"]["used_bytes"] == s["l1"]["resident_bytes"], s["l1"]


def test_unregister_closes_the_context_its_mappings_and_gives_back_the_ipc_references(
        server, clients, workers):
    model = "gpu-emulated/unregister"
    client, scheduler = clients(), clients()
    w = registered(workers(), client, model)
    assert stats(scheduler)["gpu"]["mapped_allocations"] >= 1
    assert w.refcounters.slot(0) == 1, "the server holds the storages while registered"
    # The same connection registering again (a hiccup): only its liveness; the new shares go back.
    again = w.register(client, w.instance_id, model)
    assert again.error is None
    assert w.refcounters.slot(w.refcounters.next - 1) == 0
    assert client.call(OP_UNREGISTER_KV_CACHE, w.instance_id) is None
    expect_balanced(scheduler)
    expect_closed(scheduler)
    expect_refcounters_released(w)
    tokens = random_tokens(np.random.default_rng(9), CHUNK)
    event, record = w.new_event()
    record()
    reply = store(w, client, tokens, "after", model, [range(1, 5)], event)
    assert reply.error["code"] == NOT_REGISTERED


def test_a_device_copy_outlives_the_lease_ttls_without_losing_or_corrupting_a_byte(
        tmp_path, zmq_ctx, workers):
    """Write and read TTLs of 1 s, an engine event that completes after 2.5 s,
    the evictor reclaiming expired leases every 50 ms: the copy's leases are
    pinned until it completes, so its objects are neither reclaimed nor
    reused under it."""
    srv = launch(tmp_path, ["--l1-write-ttl-seconds", "1", "--l1-read-ttl-seconds", "1",
                            "--eviction-interval-ms", "50"], event_timeout_ms=8000)
    made = [Client(zmq_ctx, srv.url) for _ in range(3)]
    try:
        a_client, b_client, scheduler = made
        rng = np.random.default_rng(13)
        model = "gpu-emulated/ttl"
        a = registered(workers(), a_client, model)
        b = registered(workers(), b_client, model)
        tokens = random_tokens(rng, 2 * CHUNK)
        ids = blocks_for(rng, a.main, 8)
        event, record = a.new_event()
        reply = store(a, a_client, tokens, "slow", model, [ids], event)
        assert reply.error is None, reply
        time.sleep(2.5)  # both TTLs pass while the copy waits for the engine
        a.main.fill(ids, rng)
        record()
        assert wait_server_event(reply.value[0]) is True
        assert lookup_count(scheduler, tokens, "slow", model) == 2, "the store's objects were reclaimed"
        event, record = b.new_event()
        reply = retrieve(b, b_client, tokens, "slow", model, [ids], event)
        assert reply.error is None, reply
        time.sleep(2.5)  # the read lease outlives its TTL too
        record()
        assert wait_server_event(reply.value[0]) is True
        for layer in range(a.main.layers):
            for block in ids:
                np.testing.assert_array_equal(b.main.block(layer, block), a.main.block(layer, block))
        assert scheduler.call(OP_END_SESSION, "slow") is None
        expect_balanced(scheduler)
    finally:
        for c in made:
            c.close()
        assert srv.stop(timeout=60) == 0, srv.log()
