"""Cross-node sharing end to end, with real servers in separate processes: a
prompt a worker stored on server A is found by a lookup on server B (B asks
its peers, A answers with p2p_lookup_and_lock and p2p_query_lookup_results),
read over the UCX data channel straight into B's L1, and retrieved by a
worker of B byte for byte; A's locks are released; the chunk stays in B's
L1, so a second lookup on B does not cross the wire; and with A killed, a
lookup on B ends at its deadline with what B holds instead of waiting on A
(issue 42, section 3; docs/architecture.md, "Where the fleet goes").

Each test runs twice: with both servers on loopback, and with each server in
a network namespace of its own joined to a bridge by a veth pair, UCX restricted to TCP
(UCX_TLS=tcp), so the bytes cross a network device as between two hosts
(the workers still reach their servers over ipc:// sockets and shared
memory, which namespaces of the network do not separate).

The bytes are random patterns a worker of A wrote into its slots, the keys
are what B's lookup hashes from the same tokens: nothing here is made by
the server's own encoder.
"""

import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from mp_client import (MODEL, Client, chunk_size, free_tcp_ports, lookup_l2, map_pool,
                       new_instance_id, random_tokens, register, retrieve, stats, store_prompt,
                       wait_until_directory_holds)
from test_p2p_membership import start_peer
from test_p2p_owner import OP_POLL_KV_EVENTS, write_key

CHUNKS = 4
SETTLE_S = 60  # a bound on waiting for a state, not a measurement


def worker(zmq_ctx, server):
    client = Client(zmq_ctx, server.url)
    instance_id = new_instance_id()
    reg = register(client, instance_id)
    return client, instance_id, map_pool(reg["shm_name"], reg["pool_size"])


def prompt_on_a(pair, zmq_ctx, seed):
    """A worker on each server, B seeing A ready, and a CHUNKS-chunk prompt
    stored on A: (a_client, b_client, b_instance, b_pool, tokens, patterns)."""
    rng = np.random.default_rng(seed)
    a_client, a_instance, a_pool = worker(zmq_ctx, pair.a)
    b_client, b_instance, b_pool = worker(zmq_ctx, pair.b)
    pair.wait_until_b_sees_a(b_client, "ready")
    tokens = random_tokens(rng, CHUNKS * chunk_size(a_client))
    patterns = store_prompt(a_client, a_pool, a_instance, tokens, CHUNKS, "store-on-a", rng)
    wait_until_directory_holds(b_client, CHUNKS)
    return a_client, b_client, b_instance, b_pool, tokens, patterns


def assert_chunks_are(data, patterns):
    for index in range(CHUNKS):
        assert np.array_equal(data[index].view(np.uint16).reshape(patterns[index].shape),
                              patterns[index]), f"chunk {index} differs"


def p2p_adapter(client):
    adapters = stats(client)["l2"]["adapters"]
    assert adapters[0]["type"] == "p2p", adapters  # the peers come first in the cascade
    return adapters[0]


def served_locked_bytes(client):
    return stats(client)["p2p"]["served"]["locked_bytes"]


def eventually(predicate, what):
    deadline = time.monotonic() + SETTLE_S
    while not predicate():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


def ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


class Namespaces:
    """Network namespaces, one per node, each joined by a veth pair to one
    bridge in a hub namespace of its own: node i at 10.77.0.(i + 1). Deleting
    the namespaces deletes everything (the veth ends go with them)."""

    def __init__(self, count=2):
        tag = f"{os.getpid() % 100000}"
        self.hub = f"lmc{tag}h"
        self.names = [f"lmc{tag}n{i}" for i in range(count)]
        self.hosts = [f"10.77.0.{i + 1}" for i in range(count)]
        self.hub_ends = [f"v{tag}h{i}" for i in range(count)]
        self.node_ends = [f"v{tag}n{i}" for i in range(count)]
        try:
            ip("netns", "add", self.hub)
            ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
            ip("-n", self.hub, "link", "set", "br0", "up")
            for i, ns in enumerate(self.names):
                ip("netns", "add", ns)
                node_end = self.node_ends[i]
                ip("link", "add", node_end, "type", "veth", "peer", "name", self.hub_ends[i])
                ip("link", "set", node_end, "netns", ns)
                ip("link", "set", self.hub_ends[i], "netns", self.hub)
                ip("-n", self.hub, "link", "set", self.hub_ends[i], "master", "br0", "up")
                ip("-n", ns, "addr", "add", f"{self.hosts[i]}/24", "dev", node_end)
                ip("-n", ns, "link", "set", node_end, "up")
                ip("-n", ns, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise

    def prefix(self, i):
        return ["ip", "netns", "exec", self.names[i]]

    def cut(self, i):
        """Node i's link to the bridge down: a partition."""
        ip("-n", self.hub, "link", "set", self.hub_ends[i], "down")

    def mend(self, i):
        ip("-n", self.hub, "link", "set", self.hub_ends[i], "up")

    def close(self):
        for ns in [*self.names, self.hub]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


class Pair:
    """Server A and server B, each listing the other as its peer."""

    def __init__(self, tmp_path, where, b_args=()):
        key_file = write_key(tmp_path / "fleet.key", os.urandom(32))
        self.namespaces = None
        if where == "loopback":
            ports = free_tcp_ports(2)
            hosts = ["127.0.0.1", "127.0.0.1"]
            prefixes, env = [(), ()], None
        else:
            if os.geteuid() != 0 or shutil.which("ip") is None:
                pytest.skip("network namespaces need root and iproute2 (tools/dev.sh installs it)")
            self.namespaces = Namespaces()
            ports, hosts = [5556, 5556], self.namespaces.hosts
            prefixes = [self.namespaces.prefix(0), self.namespaces.prefix(1)]
            env = dict(os.environ, UCX_TLS="tcp")
        self.a_url = f"tcp://{hosts[0]}:{ports[0]}"
        # B gives up on a peer's lookup after 2 s: the dead-peer case ends there.
        self.a = start_peer(tmp_path, "a", key_file, ports[0],
                            ["--p2p-peers", f"tcp://{hosts[1]}:{ports[1]}"], host=hosts[0],
                            prefix=prefixes[0], env=env)
        self.b_prefix, self.b_http_port = prefixes[1], free_tcp_ports(1)[0]
        self.b = start_peer(tmp_path, "b", key_file, ports[1],
                            ["--p2p-peers", self.a_url, "--p2p-lookup-timeout", "2", *b_args],
                            http_port=self.b_http_port, host=hosts[1], prefix=prefixes[1],
                            env=env)

    def b_status(self):
        """B's GET /status, fetched from inside B's namespace."""
        fetch = ("import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("
                 f"'http://127.0.0.1:{self.b_http_port}/status', timeout=30).read().decode())")
        out = subprocess.run([*self.b_prefix, sys.executable, "-c", fetch], check=True,
                             capture_output=True, timeout=60).stdout
        return json.loads(out)

    def wait_until_b_sees_a(self, client, state):
        eventually(lambda: stats(client)["p2p"]["peers"][state] == 1, f"B sees A {state}")

    def close(self):
        try:
            for s in (self.a, self.b):
                if s.proc.poll() is None:
                    assert s.stop(timeout=60) == 0, s.log()
        finally:
            if self.namespaces:
                self.namespaces.close()


def namespaces_possible():
    return os.geteuid() == 0 and shutil.which("ip") is not None


@pytest.fixture(params=["loopback", "netns"])
def pair(request, tmp_path):
    p = Pair(tmp_path, request.param)
    yield p
    p.close()


@pytest.fixture
def netns_pair(tmp_path):
    """Namespaces where this machine can make them, else loopback: for the
    slower tests (they wait on probes and deadlines), which need one run."""
    p = Pair(tmp_path, "netns" if namespaces_possible() else "loopback")
    yield p
    p.close()


def test_a_prompt_stored_on_one_server_is_served_from_its_peer_byte_for_byte(pair, zmq_ctx):
    a_client, b_client, b_instance, b_pool, tokens, patterns = prompt_on_a(pair, zmq_ctx, 2042)
    chunk = chunk_size(a_client)

    before = p2p_adapter(b_client)
    asked_before = stats(b_client)["p2p"]["lookups"]
    assert b_client.call(OP_POLL_KV_EVENTS, MODEL, 0, 1)["enabled"] is True  # B records events
    assert lookup_l2(b_client, tokens, "lookup-on-b", timeout_s=SETTLE_S) == CHUNKS
    # Directed (the default): one p2p_lookup_and_lock, to A, for the 4 chunks A holds.
    asked = stats(b_client)["p2p"]["lookups"]
    assert asked["rpcs"] - asked_before["rpcs"] == 1, (asked_before, asked)
    assert asked["found_chunks"] - asked_before["found_chunks"] == CHUNKS, asked
    data = retrieve(b_client, b_pool, b_instance, tokens, CHUNKS, "lookup-on-b")
    assert_chunks_are(data, patterns)
    after = p2p_adapter(b_client)
    assert after["loaded_objects"] - before["loaded_objects"] == CHUNKS
    assert after["loaded_bytes"] - before["loaded_bytes"] == CHUNKS * data[0].nbytes
    assert after["objects"] == 0  # no lock of B's left at A
    assert stats(a_client)["p2p"]["served"]["hit_keys"] == CHUNKS  # A served them, once
    # Each read named the task whose lock it went through, and A's check of it passed.
    a_channel = stats(a_client)["p2p"]["channel"]
    assert a_channel["served_reads"] == CHUNKS and a_channel["unheld_serves"] == 0, a_channel
    # /status says, of peer A, what B loaded from it and how fast.
    (a_seen,) = [p for p in pair.b_status()["p2p"]["peers"] if p["url"] == pair.a_url]
    assert a_seen["loaded_bytes"] == CHUNKS * data[0].nbytes, a_seen
    assert a_seen["load_batches"] >= 1 and a_seen["load_failures"] == 0, a_seen
    assert a_seen["load_gbps"] > 0 and a_seen["rtt_ms"] >= 0, a_seen
    eventually(lambda: served_locked_bytes(a_client) == 0, "A released every lock B took")
    # Each chunk B loaded is B's own now, and B's routers hear of it.
    events = b_client.call(OP_POLL_KV_EVENTS, MODEL, 0, 10000)["events"]
    stored = {tuple(e["token_ids"]) for e in events if e["kind"] == "stored" and e["medium"] == "CPU"}
    for index in range(CHUNKS):
        assert tuple(tokens[index * chunk:(index + 1) * chunk]) in stored, events

    # Admitted to B's L1 as its own: the next lookup is a local hit.
    assert lookup_l2(b_client, tokens, "again-on-b", timeout_s=SETTLE_S) == CHUNKS
    retrieve(b_client, b_pool, b_instance, tokens, CHUNKS, "again-on-b")
    assert p2p_adapter(b_client)["loaded_objects"] == after["loaded_objects"]


def test_with_keep_loaded_false_a_peers_chunks_serve_the_request_and_are_not_kept(tmp_path,
                                                                               zmq_ctx):
    """--p2p-keep-loaded false (the reference's behaviour): B reads A's chunks
    for the request that asked, byte for byte, and frees them with its last
    lock: no KV event, and the next lookup crosses the wire again."""
    pair = Pair(tmp_path, "loopback", b_args=["--p2p-keep-loaded", "false"])
    try:
        a_client, b_client, b_instance, b_pool, tokens, patterns = prompt_on_a(pair, zmq_ctx, 4242)
        assert lookup_l2(b_client, tokens, "once-on-b", timeout_s=SETTLE_S) == CHUNKS
        data = retrieve(b_client, b_pool, b_instance, tokens, CHUNKS, "once-on-b")
        assert_chunks_are(data, patterns)
        eventually(lambda: stats(b_client)["l1"]["served_once_dropped"] == CHUNKS,
                   "B freed the peer's chunks with the retrieve's last lock")
        l1 = stats(b_client)["l1"]
        assert l1["served_once_objects"] == 0 and l1["resident_objects"] == 0, l1
        events = b_client.call(OP_POLL_KV_EVENTS, MODEL, 0, 10000)["events"]
        assert not [e for e in events if e["kind"] == "stored"], events
        # Not B's own: the next lookup asks A again, and A serves it again.
        assert lookup_l2(b_client, tokens, "twice-on-b", timeout_s=SETTLE_S) == CHUNKS
        retrieve(b_client, b_pool, b_instance, tokens, CHUNKS, "twice-on-b")
        assert stats(a_client)["p2p"]["served"]["hit_keys"] == 2 * CHUNKS
        assert p2p_adapter(b_client)["loaded_objects"] == 2 * CHUNKS
    finally:
        pair.close()


def test_with_its_peer_killed_a_lookup_ends_with_what_the_server_holds(netns_pair, zmq_ctx):
    pair = netns_pair
    rng = np.random.default_rng(7)
    b_client, b_instance, b_pool = worker(zmq_ctx, pair.b)
    pair.wait_until_b_sees_a(b_client, "ready")
    chunk = chunk_size(b_client)
    local = random_tokens(rng, 2 * chunk)
    store_prompt(b_client, b_pool, b_instance, local, 2, "store-on-b", rng)
    pair.a.kill()
    # Whether B has seen A's connection close yet (A then leaves its lookups
    # at once) or not (the lookup asks A and ends at B's --p2p-lookup-timeout):
    # it ends with B's own two chunks.
    assert lookup_l2(b_client, local + random_tokens(rng, 2 * chunk), "while-dying",
                     timeout_s=SETTLE_S) == 2
    pair.wait_until_b_sees_a(b_client, "unreachable")
    # After: A is not asked at all.
    calls = stats(b_client)["p2p"]["rpc"]["calls"]
    assert lookup_l2(b_client, random_tokens(rng, 2 * chunk), "after", timeout_s=SETTLE_S) == 0
    assert stats(b_client)["p2p"]["rpc"]["calls"] - calls <= 1  # at most a probe of A
