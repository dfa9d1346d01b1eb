"""Cross-language test: a Python client that speaks like the reference LMCache MP
client (zmq DEALER, msgpack frames) drives the C++ lmcache-server through the
engine-driven shared-memory path and checks the bytes it gets back.

Runs with Debian's python3-pytest and only python3-zmq, python3-msgpack and
python3-numpy besides the standard library:

    LMCACHE_SERVER_BINARY=build/src/lmcache-server /usr/bin/python3 -m pytest -q tests/python

Wire format (spec sections 2, 3, 4): request frames are [uid, operation,
payload...], each msgpack-encoded on its own; uid is a per-client counter from 0;
the operation is an id from the frozen table or a name. The reply echoes uid and
operation byte for byte, then carries the value, plus a {code, message} frame
when the request failed.
"""

import mmap
import os
import re
import signal
import socket
import subprocess
import time
import uuid

import msgpack
import numpy as np
import pytest
import zmq

DEFAULT_BINARY = "/work/main/build/src/lmcache-server"
READY_TIMEOUT_S = 60.0
REPLY_TIMEOUT_S = 30.0

# Frozen operation ids (spec 2.4).
OP_LOOKUP = 8
OP_QUERY_PREFETCH_STATUS = 9
OP_FREE_LOOKUP_LOCKS = 12
OP_END_SESSION = 13
OP_REGISTER_ENGINE_CONTEXT = 14
OP_UNREGISTER_ENGINE_CONTEXT = 15
OP_PREPARE_STORE = 16
OP_COMMIT_STORE = 17
OP_PREPARE_RETRIEVE = 18
OP_COMMIT_RETRIEVE = 19
OP_GET_CHUNK_SIZE = 21
OP_PING = 22

# Error codes of the {code, message} frame (include/lmcache/status.h).
INVALID_ARGUMENT = 100
MALFORMED_REQUEST = 101
UNKNOWN_OPERATION = 102
NOT_REGISTERED = 205
NOT_SUPPORTED = 403

MODEL = "cross-language/test-model"
NUM_LAYERS = 2
HIDDEN_DIM = 128
DTYPE = "bfloat16"
ITEM_SIZE = 2  # bfloat16, carried in numpy as uint16


# --------------------------------------------------------------------------- server


def _free_tcp_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _read(path):
    try:
        with open(path, "r", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


class Server:
    def __init__(self, url, log_path, proc, shm_name):
        self.url = url
        self.log_path = log_path
        self.proc = proc
        self.shm_name = shm_name

    def log(self):
        return _read(self.log_path)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    binary = os.environ.get("LMCACHE_SERVER_BINARY", DEFAULT_BINARY)
    if not os.access(binary, os.X_OK):
        pytest.fail(f"lmcache-server binary not found or not executable: {binary} "
                    "(set LMCACHE_SERVER_BINARY)")
    tmp = tmp_path_factory.mktemp("lmc")
    sock_path = tmp / "lmc.sock"
    log_path = tmp / "server.log"
    url = f"ipc://{sock_path}"
    cmd = [binary, "--l1-size-gb", "0.25", "--url", url, "--port", str(_free_tcp_port()),
           "--http-port", "0", "--drain-timeout-seconds", "0", "--log-level", "info"]
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + READY_TIMEOUT_S
    ready_line = None
    while ready_line is None:
        for line in _read(log_path).splitlines():
            if "lmcache-server ready" in line:
                ready_line = line
                break
        if ready_line is not None:
            break
        if proc.poll() is not None:
            pytest.fail(f"lmcache-server exited with {proc.returncode} before it was ready:\n"
                        f"{_read(log_path)}")
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            pytest.fail(f"lmcache-server not ready within {READY_TIMEOUT_S} s:\n{_read(log_path)}")
        time.sleep(0.05)
    match = re.search(r"L1 pool (\S+) \(", ready_line)
    assert match, f"no pool name in the ready line: {ready_line!r}"
    srv = Server(url, log_path, proc, match.group(1))

    yield srv

    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"lmcache-server did not exit within 60 s of SIGTERM:\n{srv.log()}")
    assert rc == 0, f"lmcache-server exited with {rc}:\n{srv.log()}"
    assert not os.path.exists(f"/dev/shm/{srv.shm_name}"), \
        f"/dev/shm/{srv.shm_name} is still there after shutdown"
    assert not os.path.exists(sock_path), f"{sock_path} is still there after shutdown"


# --------------------------------------------------------------------------- client


class Raw:
    """A payload frame sent as these exact bytes (not msgpack-encoded)."""

    def __init__(self, data):
        self.data = data


class Reply:
    def __init__(self, frames):
        self.frames = frames
        self.value = msgpack.unpackb(frames[2], raw=False)
        self.error = msgpack.unpackb(frames[3], raw=False) if len(frames) > 3 else None

    def __repr__(self):
        return f"Reply(value={self.value!r}, error={self.error!r})"


class Client:
    """Like the reference MP client: one DEALER, uids counting from 0."""

    def __init__(self, ctx, url):
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(url)
        self.uid = 0

    def close(self):
        self.sock.close(0)

    def send(self, op, *payloads):
        uid = self.uid
        self.uid += 1
        frames = [msgpack.packb(uid), msgpack.packb(op)]
        frames += [p.data if isinstance(p, Raw) else msgpack.packb(p, use_bin_type=True)
                   for p in payloads]
        self.sock.send_multipart(frames)
        return frames[0], frames[1]

    def recv_frames(self, uid_frame, op_frame):
        if not self.sock.poll(int(REPLY_TIMEOUT_S * 1000), zmq.POLLIN):
            raise AssertionError(f"no reply to operation {msgpack.unpackb(op_frame)!r} "
                                 f"within {REPLY_TIMEOUT_S} s")
        frames = self.sock.recv_multipart()
        assert frames[0] == uid_frame, "the uid frame is not echoed byte for byte"
        assert frames[1] == op_frame, "the operation frame is not echoed byte for byte"
        return frames

    def request(self, op, *payloads):
        """Any reply: [uid, op, value] or [uid, op, value, error]."""
        frames = self.recv_frames(*self.send(op, *payloads))
        assert len(frames) in (3, 4), f"reply has {len(frames)} frames"
        return Reply(frames)

    def call(self, op, *payloads):
        """A reply that must be a success; returns its value."""
        reply = self.request(op, *payloads)
        assert reply.error is None, f"operation {op!r} failed: {reply.error!r}"
        return reply.value


@pytest.fixture(scope="module")
def zmq_ctx():
    ctx = zmq.Context()
    yield ctx
    ctx.term()


@pytest.fixture
def client(server, zmq_ctx):
    c = Client(zmq_ctx, server.url)
    yield c
    c.close()


# --------------------------------------------------------------------------- helpers


def make_key(tokens, start, end, request_id, worker_id=0, model=MODEL, world_size=1,
             cache_salt="", num_kv_readers=1):
    """IPCCacheServerKey as the reference encodes it: a map of every field, in
    declaration order (spec 4.1)."""
    return {
        "model_name": model,
        "world_size": world_size,
        "worker_id": worker_id,
        "token_ids": list(tokens),
        "start": start,
        "end": end,
        "request_id": request_id,
        "cache_salt": cache_salt,
        "request_configs": None,
        "num_kv_readers": num_kv_readers,
        "null_chunk_mask": None,
    }


def new_instance_id():
    # The newest reference adapter: a random 63-bit integer.
    return uuid.uuid4().int & ((1 << 63) - 1)


def register(client, instance_id, model=MODEL):
    """RegisterEngineDrivenContextPayload as msgspec encodes the Struct: every
    field by name (spec 4.2)."""
    payload = {
        "instance_id": instance_id,
        "model_name": model,
        "world_size": 1,
        "block_size": 16,
        "num_layers": NUM_LAYERS,
        "hidden_dim_size": HIDDEN_DIM,
        "dtype_str": DTYPE,
        "use_mla": False,
        "num_physical_slots": None,
        "engine_group_infos": [],
        "group_hidden_dim_sizes": None,
        "group_layout_descs": None,
        "enable_l1_kvweave_quant": False,
    }
    return client.call(OP_REGISTER_ENGINE_CONTEXT, payload)


def chunk_size(client):
    value = client.call(OP_GET_CHUNK_SIZE)
    assert isinstance(value, int) and value > 0
    return value


def slot_shape(chunk):
    return [2, NUM_LAYERS, chunk, HIDDEN_DIM]


def random_tokens(rng, n):
    return [int(t) for t in rng.integers(0, 2**31, size=n)]


def map_pool(shm_name, pool_size):
    path = f"/dev/shm/{shm_name}"
    assert os.path.getsize(path) == pool_size, "the segment size differs from pool_size"
    pool = np.memmap(path, dtype=np.uint8, mode="r+", shape=(pool_size,))
    assert pool.size == pool_size
    return pool


def slot_view(pool, slot):
    shape = slot["shape"]
    assert slot["dtype"] == DTYPE
    assert slot["length"] == int(np.prod(shape)) * ITEM_SIZE, \
        f"slot length {slot['length']} != prod({shape}) * {ITEM_SIZE}"
    assert 0 <= slot["offset"] and slot["offset"] + slot["length"] <= pool.size
    raw = pool[slot["offset"]:slot["offset"] + slot["length"]]
    return raw.view(np.uint16).reshape(shape)


def check_slots_disjoint(slots):
    spans = sorted((s["offset"], s["offset"] + s["length"]) for s in slots)
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert end <= start, f"slots overlap: {spans}"


def stats(client):
    value = client.call("stats")
    assert isinstance(value, dict) and "l1" in value, value
    return value


def store_prompt(client, pool, instance_id, tokens, chunks, request_id, rng):
    """prepare_store + write random patterns + commit_store for chunks [0, chunks).
    Returns the patterns by chunk index."""
    chunk = chunk_size(client)
    key = make_key(tokens, 0, chunks * chunk, request_id)
    prepared = client.call(OP_PREPARE_STORE, key, instance_id)
    context = prepared["context"]
    assert context["chunk_indices"] == list(range(chunks)), prepared
    assert len(context["slots"]) == chunks
    check_slots_disjoint(context["slots"])
    patterns = {}
    for index, slot in zip(context["chunk_indices"], context["slots"]):
        assert slot["shape"] == slot_shape(chunk)
        view = slot_view(pool, slot)
        patterns[index] = rng.integers(0, 2**16, size=view.shape, dtype=np.uint16)
        view[...] = patterns[index]
    pool.flush()
    assert client.call(OP_COMMIT_STORE, key, instance_id, b"") is True
    return patterns


def lookup(client, tokens, request_id, cache_salt="", num_kv_readers=1):
    """lookup with worker_id None (the scheduler's call), then the prefetch result."""
    chunk = chunk_size(client)
    full = (len(tokens) // chunk) * chunk
    key = make_key(tokens, 0, full, request_id, worker_id=None, cache_salt=cache_salt,
                   num_kv_readers=num_kv_readers)
    assert client.call(OP_LOOKUP, key, 1) is None
    return client.call(OP_QUERY_PREFETCH_STATUS, request_id)


def retrieve(client, pool, instance_id, tokens, chunks, request_id, finish_op=OP_COMMIT_RETRIEVE):
    """prepare_retrieve + copy out + commit; returns the bytes of each chunk."""
    chunk = chunk_size(client)
    key = make_key(tokens, 0, chunks * chunk, request_id)
    prepared = client.call(OP_PREPARE_RETRIEVE, key, instance_id)
    assert prepared["success"] is True, prepared
    slots = prepared["context"]["slots"]
    assert len(slots) == chunks, prepared
    data = [slot_view(pool, slot).copy() for slot in slots]
    assert client.call(finish_op, key, instance_id) is True
    return data


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
