"""Cross-node sharing end to end, with real servers in separate processes: a
prompt a worker stored on server A is found by a lookup on server B (B asks
its peers, A answers with p2p_lookup_and_lock and p2p_query_lookup_results),
read over the UCX data channel straight into B's L1, and retrieved by a
worker of B byte for byte; A's locks are released; the chunk stays in B's
L1, so a second lookup on B does not cross the wire; and with A killed, a
lookup on B ends at its deadline with what B holds instead of waiting on A
(issue 42, section 3; docs/architecture.md, "Where the fleet goes").

The bytes are random patterns a worker of A wrote into its slots, the keys
are what B's lookup hashes from the same tokens: nothing here is made by
the server's own encoder.
"""

import os
import time

import numpy as np
import pytest

from mp_client import (Client, chunk_size, free_tcp_ports, lookup_l2, map_pool, new_instance_id,
                       random_tokens, register, retrieve, stats, store_prompt)
from test_p2p_membership import start_peer, wait_for
from test_p2p_owner import write_key

CHUNKS = 4
SETTLE_S = 60  # a bound on waiting for a state, not a measurement


def worker(zmq_ctx, server):
    client = Client(zmq_ctx, server.url)
    instance_id = new_instance_id()
    reg = register(client, instance_id)
    return client, instance_id, map_pool(reg["shm_name"], reg["pool_size"])


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


@pytest.fixture
def pair(tmp_path):
    key_file = write_key(tmp_path / "fleet.key", os.urandom(32))
    a_port, b_port, a_http, b_http = free_tcp_ports(4)
    # B gives up on a peer's lookup after 2 s: the dead-peer case below ends there.
    a = start_peer(tmp_path, "a", key_file, a_port, ["--p2p-peers", f"tcp://127.0.0.1:{b_port}"],
                   a_http)
    b = start_peer(tmp_path, "b", key_file, b_port,
                   ["--p2p-peers", f"tcp://127.0.0.1:{a_port}", "--p2p-lookup-timeout", "2"],
                   b_http)
    wait_for(b_http, f"tcp://127.0.0.1:{a_port}", lambda p: p["state"] == "ready", "ready")
    yield a, b, a_http, b_http, a_port
    for s in (a, b):
        if s.proc.poll() is None:
            assert s.stop(timeout=60) == 0, s.log()


def test_a_prompt_stored_on_one_server_is_served_from_its_peer_byte_for_byte(pair, zmq_ctx):
    a, b, a_http, b_http, _ = pair
    rng = np.random.default_rng(2042)
    a_client, a_instance, a_pool = worker(zmq_ctx, a)
    chunk = chunk_size(a_client)
    tokens = random_tokens(rng, CHUNKS * chunk)
    patterns = store_prompt(a_client, a_pool, a_instance, tokens, CHUNKS, "store-on-a", rng)

    b_client, b_instance, b_pool = worker(zmq_ctx, b)
    before = p2p_adapter(b_client)
    assert lookup_l2(b_client, tokens, "lookup-on-b", timeout_s=SETTLE_S) == CHUNKS
    data = retrieve(b_client, b_pool, b_instance, tokens, CHUNKS, "lookup-on-b")
    for index in range(CHUNKS):
        assert np.array_equal(data[index].view(np.uint16).reshape(patterns[index].shape),
                              patterns[index]), f"chunk {index} differs"
    after = p2p_adapter(b_client)
    assert after["loaded_objects"] - before["loaded_objects"] == CHUNKS
    assert after["loaded_bytes"] - before["loaded_bytes"] == CHUNKS * data[0].nbytes
    assert after["objects"] == 0  # no lock of B's left at A
    assert stats(a_client)["p2p"]["served"]["hit_keys"] == CHUNKS  # A served them, once
    eventually(lambda: served_locked_bytes(a_client) == 0, "A released every lock B took")

    # Admitted to B's L1 as its own: the next lookup is a local hit.
    assert lookup_l2(b_client, tokens, "again-on-b", timeout_s=SETTLE_S) == CHUNKS
    retrieve(b_client, b_pool, b_instance, tokens, CHUNKS, "again-on-b")
    assert p2p_adapter(b_client)["loaded_objects"] == after["loaded_objects"]


def test_with_its_peer_killed_a_lookup_ends_with_what_the_server_holds(pair, zmq_ctx):
    a, b, _, b_http, a_port = pair
    rng = np.random.default_rng(7)
    b_client, b_instance, b_pool = worker(zmq_ctx, b)
    chunk = chunk_size(b_client)
    local = random_tokens(rng, 2 * chunk)
    store_prompt(b_client, b_pool, b_instance, local, 2, "store-on-b", rng)
    a.kill()
    # Before B's probe notices: the lookup asks A, gets no answer, and ends at
    # B's --p2p-lookup-timeout with B's own two chunks.
    assert lookup_l2(b_client, local + random_tokens(rng, 2 * chunk), "while-dying",
                     timeout_s=SETTLE_S) == 2
    wait_for(b_http, f"tcp://127.0.0.1:{a_port}", lambda p: p["state"] == "unreachable",
             "unreachable")
    # After: A is not asked at all.
    calls = stats(b_client)["p2p"]["rpc"]["calls"]
    assert lookup_l2(b_client, random_tokens(rng, 2 * chunk), "after", timeout_s=SETTLE_S) == 0
    assert stats(b_client)["p2p"]["rpc"]["calls"] - calls <= 1  # at most a probe of A
