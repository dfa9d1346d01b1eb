"""Cross-language test: a Python client that speaks like the reference LMCache MP
client (zmq DEALER, msgpack frames) drives the C++ lmcache-server through the
engine-driven shared-memory path and checks the bytes it gets back.

Runs with Debian's python3-pytest and only python3-zmq, python3-msgpack and
python3-numpy besides the standard library:

    LMCACHE_SERVER_BINARY=build/src/lmcache-server /usr/bin/python3 -m pytest -q tests/python

The wire format and the client are described in mp_client.py.
"""

import os

import msgpack
import numpy as np
import pytest
import zmq

# The client and the server launcher live in mp_client.py beside this file
# (pytest puts this directory on sys.path), shared with the multi-node tests.
from mp_client import (
    INVALID_ARGUMENT, MALFORMED_REQUEST, NOT_FOUND, NOT_REGISTERED, NOT_SUPPORTED, OP_COMMIT_RETRIEVE,
    OP_COMMIT_STORE, OP_END_SESSION, OP_FREE_LOOKUP_LOCKS, OP_LOOKUP,
    OP_PING, OP_PREPARE_RETRIEVE, OP_PREPARE_STORE, OP_QUERY_PREFETCH_STATUS,
    OP_UNREGISTER_ENGINE_CONTEXT, UNKNOWN_OPERATION, DTYPE,
    Client, Raw, ServerStartError, check_slots_disjoint, chunk_size, free_tcp_port, lookup,
    make_key, map_pool, new_instance_id, random_tokens, register, retrieve, server_binary,
    slot_shape, slot_view, start_server, stats, store_prompt)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    binary = server_binary()
    if not os.access(binary, os.X_OK):
        pytest.fail(f"lmcache-server binary not found or not executable: {binary} "
                    "(set LMCACHE_SERVER_BINARY)")
    tmp = tmp_path_factory.mktemp("lmc")
    sock_path = tmp / "lmc.sock"
    url = f"ipc://{sock_path}"
    args = ["--l1-size-gb", "0.25", "--port", str(free_tcp_port()), "--http-port", "0",
            "--drain-timeout-seconds", "0", "--log-level", "info"]
    try:
        srv = start_server(binary, url, tmp / "server.log", args)
    except ServerStartError as e:
        pytest.fail(str(e))

    yield srv

    rc = srv.stop(timeout=60)
    if rc is None:
        pytest.fail(f"lmcache-server did not exit within 60 s of SIGTERM:\n{srv.log()}")
    assert rc == 0, f"lmcache-server exited with {rc}:\n{srv.log()}"
    assert not os.path.exists(f"/dev/shm/{srv.shm_name}"), \
        f"/dev/shm/{srv.shm_name} is still there after shutdown"
    assert not os.path.exists(sock_path), f"{sock_path} is still there after shutdown"



@pytest.fixture
def client(server, zmq_ctx):
    c = Client(zmq_ctx, server.url)
    yield c
    c.close()


# --------------------------------------------------------------------------- tests


def test_engine_driven_full_flow(server, client):
    rng = np.random.default_rng(1)
    instance_id = new_instance_id()
    info = register(client, instance_id)
    assert isinstance(info["shm_name"], str) and info["shm_name"]
    assert info["shm_name"] == server.shm_name
    assert isinstance(info["pool_size"], int) and info["pool_size"] > 0
    assert info["pool_size"] >= int(0.25 * 2**30) * 0.99
    assert isinstance(info["boot_id"], str) and info["boot_id"]
    assert info.get("error") is None
    # Registration is idempotent and keeps the boot id.
    assert register(client, instance_id)["boot_id"] == info["boot_id"]

    pool = map_pool(info["shm_name"], info["pool_size"])
    chunk = chunk_size(client)
    assert chunk == 256
    tokens = random_tokens(rng, 3 * chunk + 100)  # three full chunks and a partial tail
    request_id = "req-full-flow"

    key = make_key(tokens, 0, 3 * chunk, request_id)
    prepared = client.call(OP_PREPARE_STORE, key, instance_id)
    context = prepared["context"]
    assert context["chunk_indices"] == [0, 1, 2]
    assert len(context["slots"]) == 3
    check_slots_disjoint(context["slots"])
    patterns = []
    for slot in context["slots"]:
        assert slot["shape"] == slot_shape(chunk)
        assert slot["dtype"] == DTYPE
        assert slot["length"] == int(np.prod(slot["shape"])) * 2
        view = slot_view(pool, slot)
        pattern = rng.integers(0, 2**16, size=view.shape, dtype=np.uint16)
        view[...] = pattern
        patterns.append(pattern)
    pool.flush()
    assert client.call(OP_COMMIT_STORE, key, instance_id, b"") is True

    lookup_key = make_key(tokens, 0, 3 * chunk, request_id, worker_id=None, num_kv_readers=1)
    assert client.call(OP_LOOKUP, lookup_key, 1) is None
    assert client.call(OP_QUERY_PREFETCH_STATUS, request_id) == 3
    assert client.call(OP_QUERY_PREFETCH_STATUS, request_id) == 0  # reported once

    retrieved = client.call(OP_PREPARE_RETRIEVE, key, instance_id)
    assert retrieved["success"] is True
    slots = retrieved["context"]["slots"]
    assert len(slots) == 3
    for slot, pattern in zip(slots, patterns):
        assert slot["shape"] == slot_shape(chunk)
        np.testing.assert_array_equal(slot_view(pool, slot), pattern)
    assert client.call(OP_COMMIT_RETRIEVE, key, instance_id) is True

    l1 = stats(client)["l1"]
    assert l1["locked_objects"] == 0, l1  # lookup locks = commit_retrieve releases
    assert l1["resident_objects"] >= 3, l1
    del pool


def test_second_store_is_already_cached(server, client):
    rng = np.random.default_rng(2)
    instance_id = new_instance_id()
    info = register(client, instance_id)
    pool = map_pool(info["shm_name"], info["pool_size"])
    chunk = chunk_size(client)
    tokens = random_tokens(rng, 3 * chunk + 17)
    patterns = store_prompt(client, pool, instance_id, tokens, 3, "req-store-1", rng)

    # The same key again, from another request: every chunk is already cached.
    key = make_key(tokens, 0, 3 * chunk, "req-store-2")
    again = client.request(OP_PREPARE_STORE, key, instance_id)
    assert again.error is None, again
    assert again.value["context"]["slots"] == []
    assert again.value["context"]["chunk_indices"] == []

    assert lookup(client, tokens, "req-store-check") == 3
    data = retrieve(client, pool, instance_id, tokens, 3, "req-store-check")
    for index in range(3):
        np.testing.assert_array_equal(data[index], patterns[index])
    assert stats(client)["l1"]["locked_objects"] == 0
    del pool


def test_hashes_are_shared_across_requests(server, client):
    rng = np.random.default_rng(3)
    instance_id = new_instance_id()
    info = register(client, instance_id)
    pool = map_pool(info["shm_name"], info["pool_size"])
    chunk = chunk_size(client)
    tokens = random_tokens(rng, 3 * chunk + 5)
    patterns = store_prompt(client, pool, instance_id, tokens, 3, "req-writer", rng)

    # Another request id with the same tokens sees the chunks and reads the bytes.
    assert lookup(client, tokens, "req-reader") == 3
    data = retrieve(client, pool, instance_id, tokens, 3, "req-reader")
    for index in range(3):
        np.testing.assert_array_equal(data[index], patterns[index])

    # A prompt sharing only the first two chunks hits exactly two (prefix hashes).
    other = tokens[:2 * chunk] + random_tokens(rng, 2 * chunk)
    assert other[2 * chunk:3 * chunk] != tokens[2 * chunk:3 * chunk]
    assert lookup(client, other, "req-prefix") == 2
    # The same first chunk with a changed token in chunk 0 hits nothing.
    changed = [tokens[0] ^ 1] + tokens[1:]
    assert lookup(client, changed, "req-changed") == 0
    # Another cache_salt is another namespace.
    assert lookup(client, tokens, "req-salted", cache_salt="tenant-b") == 0

    # The two chunks the prefix lookup locked are given back by free_lookup_locks.
    free_key = make_key(other, 0, 4 * chunk, "req-prefix", worker_id=None)
    assert client.call(OP_FREE_LOOKUP_LOCKS, free_key, 1) is None
    assert stats(client)["l1"]["locked_objects"] == 0

    # Storing the other prompt reserves only the chunks after the shared prefix,
    # and reading it back gives the first prompt's bytes for the shared chunks.
    store_key = make_key(other, 0, 4 * chunk, "req-prefix-store")
    prepared = client.call(OP_PREPARE_STORE, store_key, instance_id)
    assert prepared["context"]["chunk_indices"] == [2, 3], prepared
    for index, slot in zip(prepared["context"]["chunk_indices"], prepared["context"]["slots"]):
        view = slot_view(pool, slot)
        patterns[("other", index)] = rng.integers(0, 2**16, size=view.shape, dtype=np.uint16)
        view[...] = patterns[("other", index)]
    assert client.call(OP_COMMIT_STORE, store_key, instance_id, b"") is True
    assert lookup(client, other, "req-prefix-read") == 4
    data = retrieve(client, pool, instance_id, other, 4, "req-prefix-read")
    np.testing.assert_array_equal(data[0], patterns[0])
    np.testing.assert_array_equal(data[1], patterns[1])
    np.testing.assert_array_equal(data[2], patterns[("other", 2)])
    np.testing.assert_array_equal(data[3], patterns[("other", 3)])

    for request_id in ("req-writer", "req-reader", "req-prefix", "req-changed", "req-salted",
                       "req-prefix-store", "req-prefix-read"):
        assert client.call(OP_END_SESSION, request_id) is None
    assert stats(client)["l1"]["locked_objects"] == 0
    del pool


def test_errors_are_answered_and_server_keeps_serving(server, client):
    rng = np.random.default_rng(4)
    chunk = chunk_size(client)
    tokens = random_tokens(rng, 2 * chunk)

    # Unknown operation id and name: value nil, then {code: UNKNOWN_OPERATION}.
    for op in (99, "nope"):
        reply = client.request(op)
        assert len(reply.frames) == 4, reply
        assert reply.value is None
        assert reply.error["code"] == UNKNOWN_OPERATION, reply
        assert isinstance(reply.error["message"], str) and reply.error["message"]

    # Operations newer reference clients send by name (the frozen ids end at 34),
    # each refused with a value of its declared reply type; before, the
    # unknown-operation nil left store_with_chunk_events' caller waiting out its
    # timeout (its tuple[bytes, list[tuple[bytes, int, int]], bool] cannot be nil:
    # LMCache transport/base.py and modules/chunk_store.py).
    key_for_events = make_key(tokens, 0, 2 * chunk, "req-errors")
    reply = client.request("store_with_chunk_events", key_for_events, 7, [[0, 1]], b"")
    assert reply.value == [b"", [], False], reply
    assert reply.error is not None and reply.error["code"] == NOT_SUPPORTED, reply
    reply = client.request("release_chunk_store_events", 7, "lease")
    assert reply.value is None, reply
    assert reply.error is not None and reply.error["code"] == NOT_SUPPORTED, reply
    # subscribe_kv_events is served (test_kv_events.py); a bad page size is
    # refused with nil, which ends the stream at its client at once.
    reply = client.request("subscribe_kv_events", 7, "model", 0, 0)
    assert reply.value is None, reply
    assert reply.error is not None and reply.error["code"] == INVALID_ARGUMENT, reply

    instance_id = new_instance_id()
    register(client, instance_id)

    # A key without model_name: the empty prepare_store answer plus MALFORMED_REQUEST.
    bad_key = make_key(tokens, 0, 2 * chunk, "req-errors")
    del bad_key["model_name"]
    reply = client.request(OP_PREPARE_STORE, bad_key, instance_id)
    assert reply.value == {"context": {"slots": [], "chunk_indices": []}}, reply
    assert reply.error is not None and reply.error["code"] == MALFORMED_REQUEST, reply

    # Inline data (the pickle path) is not supported: False plus NOT_SUPPORTED.
    key = make_key(tokens, 0, 2 * chunk, "req-errors")
    reply = client.request(OP_COMMIT_STORE, key, instance_id, b"\x80\x04pickled tensors")
    assert reply.value is False, reply
    assert reply.error is not None and reply.error["code"] == NOT_SUPPORTED, reply

    # abort_store, sent by name by the newest reference client after a failed
    # copy into its slots (LMCache adapter_connector/shm.py: [key, instance_id],
    # a bool back): the slots go back, nothing is admitted, the commit finds
    # nothing pending.
    abort_key = make_key(tokens, 0, 2 * chunk, "req-abort")
    before = stats(client)["l1"]
    prepared = client.call(OP_PREPARE_STORE, abort_key, instance_id)
    assert len(prepared["context"]["slots"]) == 2, prepared
    assert stats(client)["l1"]["staging_objects"] == before["staging_objects"] + 2
    assert client.call("abort_store", abort_key, instance_id) is True
    after = stats(client)["l1"]
    assert after["staging_objects"] == before["staging_objects"]
    assert after["resident_objects"] == before["resident_objects"]
    reply = client.request(OP_COMMIT_STORE, abort_key, instance_id, b"")
    assert reply.value is False and reply.error["code"] == NOT_FOUND, reply

    # An instance that never registered.
    unknown = new_instance_id()
    while unknown == instance_id:
        unknown = new_instance_id()
    reply = client.request(OP_PREPARE_STORE, key, unknown)
    assert reply.value == {"context": {"slots": [], "chunk_indices": []}}, reply
    assert reply.error is not None and reply.error["code"] == NOT_REGISTERED, reply

    # num_kv_readers 0 ("an old client that does not send it") is rejected by lookup.
    lookup_key = make_key(tokens, 0, 2 * chunk, "req-errors", worker_id=None, num_kv_readers=0)
    reply = client.request(OP_LOOKUP, lookup_key, 1)
    assert reply.value is None
    assert reply.error is not None and reply.error["code"] == INVALID_ARGUMENT, reply

    # A payload frame that is not msgpack at all (0xc1 is never used by msgpack).
    reply = client.request(OP_PING, Raw(b"\xc1\xc1 not msgpack"))
    assert reply.error is not None and reply.error["code"] == MALFORMED_REQUEST, reply
    reply = client.request(OP_LOOKUP, Raw(b"\xc1garbage"), Raw(msgpack.packb(1)))
    assert reply.error is not None and reply.error["code"] == MALFORMED_REQUEST, reply

    # Nothing above leaked a lock or a staged write, and the server still answers.
    assert stats(client)["l1"]["locked_objects"] == 0
    assert client.call(OP_PING, None) is True
    assert client.call(OP_PING, instance_id) is True
    assert client.call(OP_UNREGISTER_ENGINE_CONTEXT, instance_id) is None


def test_an_empty_operation_frame_is_answered_unless_it_is_a_stream_control(server, zmq_ctx):
    """The reference client's stream control frame [uid, b"", b"ack" | b"cancel"]
    (LMCache transport/zmq_impl MessagingStream) gets no reply; every other
    request with an empty operation frame is malformed and answered at once
    (before, each of these shapes, first seen by an independent fuzzer, cost
    its client the whole reply timeout)."""
    sock = zmq_ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(server.url)
    try:
        uid = msgpack.packb(41)
        shapes = {
            "[uid, empty]": [uid, b""],
            "[uid, empty, empty]": [uid, b"", b""],
            "three empty frames": [b"", b"", b""],
            "40 empty frames": [b""] * 40,
            "[uid, empty, bogus]": [uid, b"", b"bogus"],
            "[uid, empty, ack, extra]": [uid, b"", b"ack", b"extra"],
        }
        for name, frames in shapes.items():
            sock.send_multipart(frames)
            assert sock.poll(10_000, zmq.POLLIN), f"{name}: no reply"
            reply = sock.recv_multipart()
            assert len(reply) == 4, (name, reply)
            assert reply[0] == frames[0] and reply[1] == b"", (name, reply)  # echoed
            assert msgpack.unpackb(reply[2]) is None, (name, reply)
            error = msgpack.unpackb(reply[3])
            assert error["code"] == MALFORMED_REQUEST, (name, error)
            assert "control frame" in error["message"], (name, error)
        # The controls themselves (no stream open under this uid) get no reply;
        # a ping sent after them is the next thing that comes back.
        sock.send_multipart([uid, b"", b"ack"])
        sock.send_multipart([uid, b"", b"cancel"])
        ping_uid = msgpack.packb(42)
        sock.send_multipart([ping_uid, msgpack.packb(OP_PING), msgpack.packb(None)])
        assert sock.poll(10_000, zmq.POLLIN), "no reply to the ping"
        reply = sock.recv_multipart()
        assert reply[0] == ping_uid and msgpack.unpackb(reply[2]) is True, reply
    finally:
        sock.close(0)


def test_finish_read_is_commit_retrieve(server, client):
    rng = np.random.default_rng(5)
    instance_id = new_instance_id()
    info = register(client, instance_id)
    pool = map_pool(info["shm_name"], info["pool_size"])
    chunk = chunk_size(client)
    tokens = random_tokens(rng, 2 * chunk)
    patterns = store_prompt(client, pool, instance_id, tokens, 2, "req-finish-read", rng)

    assert lookup(client, tokens, "req-finish-read") == 2
    l1 = stats(client)["l1"]
    assert l1["locked_objects"] >= 2, l1  # the lookup holds the two chunks
    data = retrieve(client, pool, instance_id, tokens, 2, "req-finish-read",
                    finish_op="finish_read")
    for index in range(2):
        np.testing.assert_array_equal(data[index], patterns[index])
    assert stats(client)["l1"]["locked_objects"] == 0  # finish_read released them
    del pool


def test_register_kv_cache_without_a_gpu_says_so_and_the_server_keeps_serving(server, client):
    """The default backend is cuda: on a machine without a visible GPU (CI),
    register_kv_cache with the reference's real frames is answered
    NOT_SUPPORTED, naming the cause, not a crash or a hang. With an unknown
    class in the pickle, the refusal names what it found."""
    import pickle
    import make_ipc_pickles as wrappers

    w = wrappers.raw_wrapper("bfloat16", (2, 8, 16, 2, 64))
    frames = ([msgpack.ExtType(1, pickle.dumps(w))], "cross-language/gpu", 1, "vllm",
              {"kv_layout": "NHD"}, [])
    reply = client.request("register_kv_cache", new_instance_id(), *frames)
    assert reply.value is None, reply
    if not os.path.exists("/dev/nvidiactl"):
        assert reply.error["code"] == NOT_SUPPORTED, reply
        assert "no CUDA device visible to the server" in reply.error["message"], reply
    else:
        assert reply.error is not None, reply  # the handle bytes name no real allocation

    evil = wrappers.Evil()
    frames = ([msgpack.ExtType(1, pickle.dumps(evil))],) + frames[1:]
    reply = client.request("register_kv_cache", new_instance_id(), *frames)
    assert reply.error["code"] == MALFORMED_REQUEST, reply
    assert "kv_cache[0]" in reply.error["message"], reply
    assert "'posix.system' is not accepted" in reply.error["message"], reply
    assert client.call(OP_PING, None) is True
