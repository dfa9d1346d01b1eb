"""Two lmcache-server "nodes" sharing KV through one Redis Cluster (the resp L2 adapter).

Node A's worker stores a prompt through server A; server A writes the chunks
behind (write-behind) to a 3-master Redis Cluster started by
tools/redis_cluster.py on loopback; node B's worker looks the prompt up through
server B, which loads it from the cluster, and retrieves the same bytes. Then
faults: a master killed (hits stop at the first chunk it held, nothing hangs,
B keeps answering ping, service comes back after a restart), slots resharded
under traffic (misses at most, never a wrong byte), and a standalone
redis-server over a unix socket.

    LMCACHE_SERVER_BINARY=build/src/lmcache-server \\
        /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/integration/redis_cluster_test.py

Skips when redis-server or redis-cli is missing (apt-get install redis-server
redis-tools). Chunk hashes are computed here with b3sum (as the C++ tests do)
to know which master holds which chunk: a chunk's Redis key carries its hash
as the hash tag, `<prefix>{<hash hex>}@<model>@<kv_rank>@<group>`.
"""

import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack, contextmanager

import numpy as np
import pytest
import zmq

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools"))
sys.path.insert(0, os.path.join(REPO, "tests", "python"))

import mp_client as mp  # noqa: E402 (needs the path above)
import redis_cluster as rc  # noqa: E402


def _redis_missing():
    try:
        rc.require_binaries()
    except rc.ClusterError as e:
        return str(e)
    return None


# Each test skips (rather than the module) so pytest exits 0 with "N skipped",
# not 5 ("no tests collected"), on a machine without Redis.
_MISSING = _redis_missing()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=f"Redis is not installed: {_MISSING}")

CHUNKS = 8  # per prompt; 256 tokens x 2 layers x 128 hidden x bf16 x K,V = 256 KiB each
REQUEST_BOUND_S = 10.0  # any single request, and any lookup's prefetch, answers within this
L2_SETTLE_S = 20.0  # write-behind: A's stores reach the cluster within this
RECOVERY_S = 30.0  # after a master restarts, sharing is whole again within this
PING_MEDIAN_BOUND_S = 0.050
RESHARD_SLOTS = 2000


# --------------------------------------------------------------------------- chunk hashes


def _b3(data):
    """BLAKE3 by b3sum, the reference implementation the C++ tests use."""
    if shutil.which("b3sum") is None:
        pytest.fail("b3sum not found: apt-get install b3sum (tools/dev.sh deps installs it)")
    out = subprocess.run(["b3sum", "--no-names"], input=data, capture_output=True, check=True,
                         timeout=10).stdout
    return bytes.fromhex(out.split()[0].decode())


def chunk_hashes(tokens, chunk):
    """Hex hashes of the prompt's full chunks, as src/worker/token_hasher.h defines
    them: h_0 = BLAKE3(12 zero bytes), h_i = BLAKE3(h_{i-1} || tokens as u32 BE)."""
    previous = _b3(bytes(12))
    hashes = []
    for c in range(len(tokens) // chunk):
        block = np.asarray(tokens[c * chunk:(c + 1) * chunk], dtype=">u4").tobytes()
        previous = _b3(previous + block)
        hashes.append(previous.hex())
    return hashes


def chunk_owners(cluster, tokens, chunk):
    """Index of the master holding each chunk: the slot of its hash tag."""
    return [cluster.node_for_key("{" + h + "}") for h in chunk_hashes(tokens, chunk)]


# --------------------------------------------------------------------------- nodes


class Node:
    """One lmcache-server standing for one machine, with one registered worker
    (engine-driven, mapping the server's pool) on one connection."""

    def __init__(self, name, server, ctx):
        self.name = name
        self.server = server
        self.client = mp.Client(ctx, server.url, reply_timeout_s=REQUEST_BOUND_S)
        self.instance_id = mp.new_instance_id()
        info = mp.register(self.client, self.instance_id)
        assert info.get("error") is None, info
        self.pool = mp.map_pool(info["shm_name"], info["pool_size"])
        self.chunk = mp.chunk_size(self.client)

    def stats(self):
        return mp.stats(self.client)

    def log_tail(self, lines=30):
        return "\n".join(self.server.log().splitlines()[-lines:])

    def close(self):
        self.client.close()
        self.pool = None  # unmaps before the server removes the segment


def resp_adapter(url, prefix):
    """The --l2-adapter JSON both nodes get. Short connect/command timeouts: a
    dead master costs a miss, never a long wait."""
    return json.dumps({"type": "resp", "url": url, "key_prefix": prefix,
                       "connect_timeout_ms": 500, "command_timeout_ms": 2000})


def _server_args(shm_name, adapter):
    return ["--l1-size-gb", "0.25", "--http-port", "0", "--drain-timeout-seconds", "0",
            "--log-level", "info", "--shm-name", shm_name, "--l2-adapter", adapter]


def _remove_segments(names):
    for name in names:
        for candidate in (name, "lmcache_l1_pool_" + name):
            try:
                os.unlink(f"/dev/shm/{candidate}")
            except FileNotFoundError:
                pass


_pair_numbers = itertools.count()


@contextmanager
def node_pair(adapter, ctx):
    """Servers A and B (distinct pools and ipc endpoints, the same adapter)
    with a worker each. On exit: SIGTERM, exit status 0, and whatever happens,
    no process, temp dir or /dev/shm segment left behind."""
    binary = mp.server_binary()
    if not os.access(binary, os.X_OK):
        pytest.fail(f"lmcache-server binary not found or not executable: {binary} "
                    "(set LMCACHE_SERVER_BINARY)")
    tmp = tempfile.mkdtemp(prefix="lmc-nodes-")
    pair = next(_pair_numbers)  # one pair may still run while the next starts
    servers, nodes, segments = [], [], []
    try:
        for name in ("A", "B"):
            shm = f"lmc_node{name}_{os.getpid()}_{pair}"
            segments.append(shm)
            try:
                servers.append(mp.start_server(binary, f"ipc://{tmp}/{name.lower()}.sock",
                                               os.path.join(tmp, f"{name}.log"),
                                               _server_args(shm, adapter)))
            except mp.ServerStartError as e:
                pytest.fail(f"server {name}: {e}")
            segments.append(servers[-1].shm_name)
            nodes.append(Node(name, servers[-1], ctx))
        yield nodes[0], nodes[1]
        for node in nodes:
            node.close()
        for server in servers:
            rc_ = server.stop(timeout=30)
            assert rc_ == 0, f"lmcache-server exited with {rc_}:\n{server.log()}"
    finally:
        for node in nodes:
            node.close()
        for server in servers:
            server.kill()
        _remove_segments(segments)
        shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------- worker steps


def fresh_tokens(rng, chunk):
    return mp.random_tokens(rng, CHUNKS * chunk)


def store_count(node):
    """Objects A's store controller has finished with, and whether it is idle."""
    s = node.stats()["l2"]["store"]
    done = s["stored"] + s["failed"] + s["skipped_gone"] + s["skipped_queue_full"]
    return s, done, s["queued_objects"] == 0 and s["in_flight"] == 0


def store(node, tokens, rng, request_id):
    """A worker's prepare_store / write / commit_store, then waits (bounded)
    until the write-behind to L2 is over. Returns (patterns by chunk index,
    how many of the CHUNKS objects reached L2)."""
    before, done_before, _ = store_count(node)
    stored_before = before["stored"]
    patterns = mp.store_prompt(node.client, node.pool, node.instance_id, tokens, CHUNKS,
                               request_id, rng)
    deadline = time.monotonic() + L2_SETTLE_S
    while True:
        s, done, idle = store_count(node)
        if done - done_before >= CHUNKS and idle:
            return patterns, s["stored"] - stored_before
        assert time.monotonic() < deadline, \
            f"node {node.name}: L2 stores not done within {L2_SETTLE_S} s: {s}\n{node.log_tail()}"
        time.sleep(0.02)


def read(node, tokens, request_id):
    """The scheduler's lookup (waiting for the L2 prefetch), then a worker's
    retrieve of the hit prefix. Returns the chunks' bytes (len = hit count)."""
    started = time.monotonic()
    count = mp.lookup_l2(node.client, tokens, request_id, REQUEST_BOUND_S)
    elapsed = time.monotonic() - started
    assert elapsed < REQUEST_BOUND_S, f"lookup took {elapsed:.1f} s"
    assert isinstance(count, int) and 0 <= count <= CHUNKS, count
    data = []
    if count > 0:
        data = mp.retrieve(node.client, node.pool, node.instance_id, tokens, count, request_id)
    assert node.client.call(mp.OP_END_SESSION, request_id) is None
    return data


def assert_same_bytes(data, patterns, what):
    for index, chunk in enumerate(data):
        assert np.array_equal(chunk, patterns[index]), f"{what}: chunk {index} differs"


def eventually_full(node, tokens, patterns, what, timeout=RECOVERY_S):
    """Reads until the whole prompt hits (each read checks its bytes)."""
    deadline = time.monotonic() + timeout
    attempt = 0
    while True:
        data = read(node, tokens, f"{what}-{attempt}")
        assert_same_bytes(data, patterns, what)
        if len(data) == CHUNKS:
            return attempt
        assert time.monotonic() < deadline, \
            f"{what}: still {len(data)}/{CHUNKS} chunks after {timeout} s\n{node.log_tail()}"
        attempt += 1
        time.sleep(0.2)


class PingProbe:
    """Pings a server from its own connection and thread (as a health check
    would) until stopped; records every round trip."""

    def __init__(self, ctx, url, interval_s=0.01):
        self.ctx, self.url, self.interval_s = ctx, url, interval_s
        self.rtts, self.error = [], None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=REQUEST_BOUND_S + 5)

    def _run(self):
        client = mp.Client(self.ctx, self.url, reply_timeout_s=REQUEST_BOUND_S)
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                ok = client.call(mp.OP_PING, None)
                self.rtts.append(time.monotonic() - started)
                if ok is not True:
                    raise AssertionError(f"ping answered {ok!r}")
                self._stop.wait(self.interval_s)
        except BaseException as e:  # reported by the test thread
            self.error = e
        finally:
            client.close()

    def check(self, what):
        assert self.error is None, f"{what}: ping failed: {self.error}"
        assert len(self.rtts) >= 5, f"{what}: only {len(self.rtts)} pings answered"
        median = statistics.median(self.rtts)
        assert median < PING_MEDIAN_BOUND_S, \
            f"{what}: ping median {median * 1e3:.1f} ms (max {max(self.rtts) * 1e3:.1f} ms)"
        return median


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def zmq_ctx():
    ctx = zmq.Context()
    yield ctx
    ctx.term()


@pytest.fixture(scope="module")
def cluster():
    with rc.RedisCluster(masters=3, maxmemory="256mb") as c:
        yield c


@pytest.fixture(scope="module")
def prefix():
    return f"lmc-test-{os.getpid()}:"


@pytest.fixture(scope="module")
def nodes(cluster, prefix, zmq_ctx):
    with node_pair(resp_adapter(cluster.urls(), prefix), zmq_ctx) as pair:
        yield pair


# --------------------------------------------------------------------------- tests


def test_a_prompt_stored_on_a_is_read_on_b(cluster, nodes, prefix):
    a, b = nodes
    rng = np.random.default_rng(10)
    tokens = fresh_tokens(rng, a.chunk)
    patterns, stored = store(a, tokens, rng, "a-store")
    assert stored == CHUNKS, f"{stored}/{CHUNKS} objects reached the cluster\n{a.log_tail()}"

    # One key per chunk, named by its hash, on the master owning that hash
    # tag's slot (and on no other).
    holders = {h: [] for h in chunk_hashes(tokens, a.chunk)}
    for i in range(cluster.masters):
        for key in (k.decode() for k in cluster.scan(i, prefix.encode() + b"*")):
            assert key.startswith(prefix + "{") and "}@" + mp.MODEL + "@" in key, key
            tag = key[len(prefix) + 1:key.index("}")]
            if tag in holders:
                holders[tag].append(i)
    for h, masters in holders.items():
        owner = cluster.node_for_key("{" + h + "}")
        assert masters == [owner], f"chunk {h} is on masters {masters}, its slot on {owner}"

    loaded_before = b.stats()["l2"]["prefetch"]["loaded_chunks"]
    data = read(b, tokens, "b-read")
    assert len(data) == CHUNKS, f"B hit {len(data)}/{CHUNKS}\n{b.log_tail()}"
    assert_same_bytes(data, patterns, "B's copy")
    assert b.stats()["l2"]["prefetch"]["loaded_chunks"] - loaded_before == CHUNKS
    assert b.stats()["l1"]["locked_objects"] == 0


def _prompt_with_victim(cluster, rng, chunk):
    """A fresh prompt, a master whose first chunk in it is at index 2 or later
    (so killing that master leaves a prefix of 2+ chunks), and the chunks' owners."""
    for _ in range(100):
        tokens = fresh_tokens(rng, chunk)
        owners = chunk_owners(cluster, tokens, chunk)
        for master in range(cluster.masters):
            if master in owners and owners.index(master) >= 2:
                return tokens, master, owners
    pytest.fail("no prompt with a chunk layout fit for the test in 100 tries")


def _prompt_touching(cluster, rng, chunk, master):
    """A fresh prompt with at least one chunk on `master`."""
    for _ in range(100):
        tokens = fresh_tokens(rng, chunk)
        if master in chunk_owners(cluster, tokens, chunk):
            return tokens
    pytest.fail(f"no prompt with a chunk on master {master} in 100 tries")


def test_b_a_dead_master_costs_its_chunks_only(cluster, nodes, zmq_ctx):
    a, b = nodes
    rng = np.random.default_rng(20)
    tokens, victim, owners = _prompt_with_victim(cluster, rng, a.chunk)
    patterns, stored = store(a, tokens, rng, "kill-store")
    assert stored == CHUNKS, f"{stored}/{CHUNKS} reached the cluster\n{a.log_tail()}"
    with PingProbe(zmq_ctx, b.server.url) as baseline:
        time.sleep(0.3)
    baseline_median = baseline.check("before the kill")

    cluster.kill(victim)
    try:
        with PingProbe(zmq_ctx, b.server.url) as probe:
            # Chunks before the first one on the dead master still hit, and
            # come back intact; the prefix stops there (a hit is contiguous).
            # Read at once (the adapter finds its connections dead), then again
            # once the survivors flagged the master failed (the outage as the
            # cluster reports it, a node timeout later).
            expected = owners.index(victim)
            print(f"victim {victim}, chunk owners {owners}, expected prefix {expected}")
            for attempt in range(2):
                if attempt == 1:
                    cluster.wait_failed(victim)
                data = read(b, tokens, f"kill-read-{attempt}")
                assert len(data) == expected, \
                    f"owners {owners}, victim {victim}: B hit {len(data)}\n{b.log_tail()}"
                assert_same_bytes(data, patterns, "during the outage")

            # A keeps storing: the objects for the dead master fail (counted),
            # the others reach the survivors, and nothing waits on the dead one.
            during = fresh_tokens(rng, a.chunk)
            during_owners = chunk_owners(cluster, during, a.chunk)
            during_patterns, _ = store(a, during, rng, "outage-store")
            cut = during_owners.index(victim) if victim in during_owners else CHUNKS
            data = read(b, during, "outage-read")
            assert len(data) == cut, f"owners {during_owners}: B hit {len(data)}, expected {cut}"
            assert_same_bytes(data, during_patterns, "stored during the outage")
        median = probe.check("while a master is down")
        print(f"B's ping median: {baseline_median * 1e3:.2f} ms before, "
              f"{median * 1e3:.2f} ms during the outage ({len(probe.rtts)} pings)")
    finally:
        if not cluster.nodes[victim].alive():
            cluster.restart(victim)

    # Recovered: a prompt stored now, with chunks on the restarted master, is
    # shared whole again (A's adapter may need a retry interval to reconnect).
    deadline = time.monotonic() + RECOVERY_S
    for attempt in range(100):
        after = _prompt_touching(cluster, rng, a.chunk, victim)
        after_patterns, stored = store(a, after, rng, f"after-store-{attempt}")
        if stored == CHUNKS:
            break
        assert time.monotonic() < deadline, \
            f"A's stores still fail {RECOVERY_S} s after the restart\n{a.log_tail()}"
        time.sleep(0.5)
    eventually_full(b, after, after_patterns, "after recovery")


def _reshard_in_background(cluster, source, target, slots):
    outcome = {}

    def run():
        try:
            outcome["seconds"] = time.monotonic()
            cluster.reshard(source, target, slots)
            outcome["seconds"] = time.monotonic() - outcome["seconds"]
        except BaseException as e:  # re-raised by the test thread
            outcome["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def _prompts_in_moving_slots(cluster, a, rng, source, slots, want_chunks=4):
    """Fresh prompts stored on A such that at least `want_chunks` of their
    chunks live in the `slots` lowest slots of `source` (what `--cluster
    reshard` moves first), so the reshard migrates keys we then read."""
    moving = []
    for first, last in cluster.slot_ranges(source):
        moving += range(first, last + 1)
    moving = set(moving[:slots])
    prompts, in_moving = [], 0
    for attempt in range(60):
        tokens = fresh_tokens(rng, a.chunk)
        slots_of = [cluster.key_slot("{" + h + "}") for h in chunk_hashes(tokens, a.chunk)]
        hits = sum(s in moving for s in slots_of)
        if hits == 0:
            continue
        patterns, stored = store(a, tokens, rng, f"pre-reshard-{attempt}")
        assert stored == CHUNKS, f"{stored}/{CHUNKS} reached the cluster\n{a.log_tail()}"
        prompts.append((tokens, patterns))
        in_moving += hits
        if in_moving >= want_chunks:
            return prompts
    pytest.fail("could not place chunks in the slots to be moved")


def test_c_reshard_under_traffic(cluster, nodes):
    a, b = nodes
    cluster.wait_ok()
    rng = np.random.default_rng(30)
    source, target = 0, 1
    prompts = _prompts_in_moving_slots(cluster, a, rng, source, RESHARD_SLOTS)
    counts_before = cluster.slot_counts()

    thread, outcome = _reshard_in_background(cluster, source, target, RESHARD_SLOTS)
    written, hits, iterations = [], [], 0
    deadline = time.monotonic() + rc.RESHARD_TIMEOUT_S + rc.CLUSTER_OK_TIMEOUT_S
    while thread.is_alive() or iterations < 2:
        # B drops its L1 so every read goes to the cluster, mid-migration.
        assert b.client.call(mp.OP_CLEAR) is None
        for n, (tokens, patterns) in enumerate(prompts + written):
            data = read(b, tokens, f"reshard-read-{iterations}-{n}")
            assert_same_bytes(data, patterns, "read during the reshard")
            hits.append(len(data))
        tokens = fresh_tokens(rng, a.chunk)
        written.append((tokens, store(a, tokens, rng, f"reshard-store-{iterations}")[0]))
        iterations += 1
        assert time.monotonic() < deadline, "the reshard did not finish in time"
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    counts_after = cluster.slot_counts()
    assert counts_after[source] == counts_before[source] - RESHARD_SLOTS, counts_after
    assert counts_after[target] == counts_before[target] + RESHARD_SLOTS, counts_after
    misses = CHUNKS * len(hits) - sum(hits)
    print(f"reshard of {RESHARD_SLOTS} slots took {outcome['seconds']:.1f} s; {iterations} "
          f"rounds, {len(hits)} reads, {hits.count(CHUNKS)} whole, {misses} chunks missed")

    # Keys that moved with their slots are found at their new home, whole.
    assert b.client.call(mp.OP_CLEAR) is None
    for n, (tokens, patterns) in enumerate(prompts):
        eventually_full(b, tokens, patterns, f"pre-reshard prompt {n} after the reshard")
    # Prompts written while slots moved: misses are allowed, wrong bytes are not.
    for n, (tokens, patterns) in enumerate(written):
        assert_same_bytes(read(b, tokens, f"reshard-written-{n}"), patterns,
                          "written during the reshard")
    assert b.stats()["l1"]["locked_objects"] == 0


def test_d_standalone_over_unix_socket(zmq_ctx, prefix):
    with ExitStack() as stack:
        directory = tempfile.mkdtemp(prefix="lmc-redis-sa-")
        stack.callback(shutil.rmtree, directory, ignore_errors=True)
        redis = rc.standalone_unix(directory)
        stack.callback(redis.stop)
        a, b = stack.enter_context(node_pair(resp_adapter(redis.url(), prefix), zmq_ctx))

        rng = np.random.default_rng(40)
        tokens = fresh_tokens(rng, a.chunk)
        patterns, stored = store(a, tokens, rng, "sa-store")
        assert stored == CHUNKS, f"{stored}/{CHUNKS} reached redis\n{a.log_tail()}"
        keys = redis.command("KEYS", prefix + "*")
        assert len(keys) == CHUNKS, keys
        data = read(b, tokens, "sa-read")
        assert len(data) == CHUNKS, f"B hit {len(data)}/{CHUNKS}\n{b.log_tail()}"
        assert_same_bytes(data, patterns, "B's copy over the unix socket")
