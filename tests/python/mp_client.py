"""A Python client of the LMCache MP protocol and a launcher for lmcache-server,
shared by the Python tests (test_cross_language.py, and
tests/integration/redis_cluster_test.py, which runs two servers).

The client speaks like the reference LMCache MP client (zmq DEALER, msgpack
frames) through the engine-driven shared-memory path. It needs only
python3-zmq, python3-msgpack and python3-numpy besides the standard library,
and no pytest: failures are AssertionError or ServerStartError.

Wire format (spec sections 2, 3, 4): request frames are [uid, operation,
payload...], each msgpack-encoded on its own; uid is a per-client counter from 0;
the operation is an id from the frozen table or a name. The reply echoes uid and
operation byte for byte, then carries the value, plus a {code, message} frame
when the request failed.
"""

import os
import re
import signal
import subprocess
import time
import uuid

import msgpack
import numpy as np
import zmq

from free_ports import free_tcp_port, free_tcp_ports  # noqa: F401 (the tests and tools take them from here)

# The build tree of this checkout; LMCACHE_SERVER_BINARY overrides it.
DEFAULT_BINARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                              "build", "src", "lmcache-server")
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
OP_CLEAR = 20
OP_GET_CHUNK_SIZE = 21
OP_PING = 22

# Error codes of the {code, message} frame (include/lmcache/status.h).
INVALID_ARGUMENT = 100
MALFORMED_REQUEST = 101
UNKNOWN_OPERATION = 102
NOT_FOUND = 200
NOT_REGISTERED = 205
UNAVAILABLE = 402
NOT_SUPPORTED = 403

MODEL = "cross-language/test-model"
NUM_LAYERS = 2
HIDDEN_DIM = 128
DTYPE = "bfloat16"
ITEM_SIZE = 2  # bfloat16, carried in numpy as uint16


# --------------------------------------------------------------------------- server


def server_binary():
    return os.environ.get("LMCACHE_SERVER_BINARY", DEFAULT_BINARY)


def read_text(path):
    try:
        with open(path, "r", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


class ServerStartError(RuntimeError):
    """The server exited or was not ready in time; the message carries its log."""


class Server:
    def __init__(self, url, log_path, proc, shm_name):
        self.url = url
        self.log_path = log_path
        self.proc = proc
        self.shm_name = shm_name

    def log(self):
        return read_text(self.log_path)

    def wait_for_log(self, text, timeout_s=30.0):
        """Returns the log once it holds `text`. A line the server logs in
        answer to a signal is written by its own thread, ordered before no
        reply a client can see: a test waits for it (with a bound) instead of
        reading the log once."""
        deadline = time.monotonic() + timeout_s
        while True:
            log = self.log()
            if text in log:
                return log
            assert self.proc.poll() is None or text in self.log(), \
                f"the server exited ({self.proc.returncode}) without logging {text!r}:\n{log}"
            assert time.monotonic() < deadline, f"no {text!r} in the log after {timeout_s} s:\n{log}"
            time.sleep(0.05)

    def stop(self, timeout=60.0):
        """SIGTERM, then its exit status; SIGKILL (and None) if it outlives `timeout`."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def start_server(binary, url, log_path, args, prefix=(), env=None):
    """Runs `binary --url url args...` with its log in `log_path` and returns
    once it logged "lmcache-server ready" (the pool name comes from that line).
    `prefix` runs it through another command that execs it (ip netns exec NS);
    `env` replaces the environment."""
    cmd = [*prefix, binary, "--url", url, *args]
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        ready_line = next((line for line in read_text(log_path).splitlines()
                           if "lmcache-server ready" in line), None)
        if ready_line is not None:
            break
        if proc.poll() is not None:
            raise ServerStartError(f"lmcache-server exited with {proc.returncode} before it "
                                   f"was ready:\n{read_text(log_path)}")
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise ServerStartError(f"lmcache-server not ready within {READY_TIMEOUT_S} s:\n"
                                   f"{read_text(log_path)}")
        time.sleep(0.05)
    match = re.search(r"L1 pool (\S+) \(", ready_line)
    if not match:
        proc.kill()
        proc.wait()
        raise ServerStartError(f"no pool name in the ready line: {ready_line!r}")
    return Server(url, log_path, proc, match.group(1))


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

    def __init__(self, ctx, url, reply_timeout_s=REPLY_TIMEOUT_S):
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(url)
        self.uid = 0
        self.reply_timeout_s = reply_timeout_s

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
        if not self.sock.poll(int(self.reply_timeout_s * 1000), zmq.POLLIN):
            raise AssertionError(f"no reply to operation {msgpack.unpackb(op_frame)!r} "
                                 f"within {self.reply_timeout_s} s")
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


def register(client, instance_id, model=MODEL, use_mla=False):
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
        "use_mla": use_mla,
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


def http_json(port, method, path, body=None):
    """A JSON request to the server's HTTP port on loopback; its JSON answer
    (urllib raises HTTPError for a 4xx/5xx)."""
    import json
    import urllib.request
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.loads(reply.read())


def stats(client):
    value = client.call("stats")
    assert isinstance(value, dict) and "l1" in value, value
    return value


def wait_until_directory_holds(client, chunks, timeout_s=60):
    """Directed lookups (--p2p-lookup directed, the default) ask only the
    peers this server's directory names, and a chunk stored on a peer is
    named once this server's feed has read the peer's chunk log (every
    --p2p-directory-poll, 0.1 s): waits until the directory's filters hold at
    least `chunks` chunks and every peer is in step (none stale), as a
    requester would be some time after a prompt was computed elsewhere.
    Both, because a peer's filter fills while the peer is listed, before it
    is in step: until its catching up is read the peer is stale, and a
    stale peer is asked for every chunk (a slow server shows it: under
    TSan the chunks were in while one peer was still catching up). Fails
    after `timeout_s` (a bound, not a measure)."""
    deadline = time.monotonic() + timeout_s
    while True:
        directory = stats(client)["p2p"]["directory"]
        held, stale = directory["chunks"], directory["stale_peers"]
        if held >= chunks and stale == 0:
            return held
        assert time.monotonic() < deadline, \
            f"after {timeout_s} s the directory holds {held} chunks (not {chunks}), " \
            f"{stale} peers stale"
        time.sleep(0.02)


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


def lookup_l2(client, tokens, request_id, timeout_s, poll_s=0.01, request_configs=None,
              model=MODEL, cache_salt="", chunk=None):
    """lookup, then query_prefetch_status until it stops answering nil: with an
    L2 tier the count arrives once the prefetch's loads landed (docs/protocol.md).
    Fails if that takes longer than `timeout_s`. `request_configs`: the key's
    lmcache.* entries, as the reference's connector forwards them. `chunk`:
    the chunk size the key is cut at (default: what the endpoint answers)."""
    chunk = chunk or chunk_size(client)
    full = (len(tokens) // chunk) * chunk
    key = make_key(tokens, 0, full, request_id, worker_id=None, model=model,
                   cache_salt=cache_salt)
    key["request_configs"] = request_configs
    deadline = time.monotonic() + timeout_s
    assert client.call(OP_LOOKUP, key, 1) is None
    while True:
        count = client.call(OP_QUERY_PREFETCH_STATUS, request_id)
        if count is not None:
            return count
        assert time.monotonic() < deadline, \
            f"lookup {request_id}: the prefetch did not finish within {timeout_s} s"
        time.sleep(poll_s)


def retrieve(client, pool, instance_id, tokens, chunks, request_id, finish_op=OP_COMMIT_RETRIEVE,
             first_chunk=0):
    """prepare_retrieve + copy out + commit of chunks [first_chunk, chunks);
    returns the bytes of each chunk."""
    chunk = chunk_size(client)
    key = make_key(tokens, first_chunk * chunk, chunks * chunk, request_id)
    prepared = client.call(OP_PREPARE_RETRIEVE, key, instance_id)
    assert prepared["success"] is True, prepared
    slots = prepared["context"]["slots"]
    assert len(slots) == chunks - first_chunk, prepared
    data = [slot_view(pool, slot).copy() for slot in slots]
    assert client.call(finish_op, key, instance_id) is True
    return data
