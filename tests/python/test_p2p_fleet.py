"""Cross-node sharing among several real servers (issue 42, section 7): a
prompt half on one peer and whole on another is served from both, each
chunk from the first peer (in the membership's order) that holds it; a
server with another fleet key gets nothing and leaves no lock; a partition
(the link down, then up) costs lookups their deadline and no more, and the
peer serves again once mended. Locks balance to zero on every server at the
end. Loopback and network namespaces on one bridge (the partition only
there; the tests that wait on probes and deadlines run once, in namespaces
where the machine can make them), as test_p2p_sharing.py.

The bytes are random patterns each server's own worker wrote, so where a
chunk came from shows in its bytes.
"""

import os
import shutil

import numpy as np
import pytest

from mp_client import (chunk_size, free_tcp_ports, lookup_l2, random_tokens, retrieve, stats,
                       store_prompt, wait_until_directory_holds)
from test_p2p_membership import start_peer
from test_p2p_owner import write_key
from test_p2p_sharing import SETTLE_S, Namespaces, eventually, namespaces_possible, worker

CHUNKS = 4


class Nodes:
    """Servers 0..n-1; `peers_of[i]` lists the servers i asks; `key_of[i]`
    picks its fleet key (0 or 1)."""

    def __init__(self, tmp_path, where, peers_of, key_of=None, extra_args=()):
        count = len(peers_of)
        keys = [write_key(tmp_path / f"fleet{k}.key", os.urandom(32)) for k in (0, 1)]
        key_of = key_of or [0] * count
        self.namespaces = None
        if where == "loopback":
            self.hosts, ports = ["127.0.0.1"] * count, free_tcp_ports(count)
            prefixes, env = [()] * count, None
        else:
            if os.geteuid() != 0 or shutil.which("ip") is None:
                pytest.skip("network namespaces need root and iproute2 (tools/dev.sh installs it)")
            self.namespaces = Namespaces(count)
            self.hosts, ports = self.namespaces.hosts, [5556] * count
            prefixes = [self.namespaces.prefix(i) for i in range(count)]
            env = dict(os.environ, UCX_TLS="tcp")
        self.urls = [f"tcp://{h}:{p}" for h, p in zip(self.hosts, ports)]
        self.servers = []
        try:
            for i in range(count):
                peers = ",".join(self.urls[j] for j in peers_of[i])
                extra = ["--p2p-lookup-timeout", "2", *extra_args] + \
                    (["--p2p-peers", peers] if peers else [])
                self.servers.append(start_peer(tmp_path, f"n{i}", keys[key_of[i]], ports[i], extra,
                                               host=self.hosts[i], prefix=prefixes[i], env=env))
        except BaseException:
            self.close()
            raise

    def close(self):
        try:
            for s in self.servers:
                if s.proc.poll() is None:
                    assert s.stop(timeout=60) == 0, s.log()
        finally:
            if self.namespaces:
                self.namespaces.close()


def peers_in(client, state):
    return stats(client)["p2p"]["peers"][state]


def served(client):
    return stats(client)["p2p"]["served"]


def as_pattern(chunk_bytes, pattern):
    return chunk_bytes.view(np.uint16).reshape(pattern.shape)


def expect_balanced(owners, requester):
    """No lock left anywhere: each owner's served locks, and the requester's
    record of the locks it holds at peers."""
    for client in owners:
        eventually(lambda c=client: served(c)["locked_bytes"] == 0, "an owner's locks released")
    assert stats(requester)["l2"]["adapters"][0]["objects"] == 0


@pytest.fixture(params=["loopback", "netns"])
def where(request):
    return request.param


def lookups(client):
    return stats(client)["p2p"]["lookups"]


@pytest.mark.parametrize("mode", ["directed", "broadcast"])
def test_a_prompt_on_two_peers_is_served_from_both_first_peer_first(tmp_path, zmq_ctx, where,
                                                                    mode):
    """Broadcast asks both peers, and each chunk comes from the first (in the
    membership's order) that holds it. Directed asks only the peer with the
    longest run of the prompt's chunks, which holds them all: one RPC."""
    # 0 = A (the first half), 1 = B (the requester), 2 = C (the whole prompt).
    nodes = Nodes(tmp_path, where, peers_of=[[], [0, 2], []], extra_args=["--p2p-lookup", mode])
    try:
        a, b, c = (worker(zmq_ctx, s) for s in nodes.servers)
        eventually(lambda: peers_in(b[0], "ready") == 2, "B sees A and C ready")
        rng = np.random.default_rng(31)
        chunk = chunk_size(a[0])
        tokens = random_tokens(rng, CHUNKS * chunk)
        on_a = store_prompt(a[0], a[2], a[1], tokens, 2, "half-on-a", rng)
        on_c = store_prompt(c[0], c[2], c[1], tokens, CHUNKS, "whole-on-c", rng)
        if mode == "directed":
            wait_until_directory_holds(b[0], 2 + CHUNKS)
            expected = on_c
        else:
            # The membership asks peers in the order of their URLs: the
            # first that holds a chunk serves it.
            a_first = nodes.urls[0] < nodes.urls[2]
            expected = [on_a[i] if a_first else on_c[i] for i in range(2)] + [on_c[2], on_c[3]]
        before = lookups(b[0])

        assert lookup_l2(b[0], tokens, "from-both", timeout_s=SETTLE_S) == CHUNKS
        data = retrieve(b[0], b[2], b[1], tokens, CHUNKS, "from-both")
        for index in range(CHUNKS):
            assert np.array_equal(as_pattern(data[index], expected[index]), expected[index]), \
                f"chunk {index} is not the expected holder's"
        after = lookups(b[0])
        assert after["found_chunks"] - before["found_chunks"] == CHUNKS
        if mode == "directed":
            assert after["rpcs"] - before["rpcs"] == 1, (before, after)
            assert served(a[0])["lookups"] == 0 and served(c[0])["hit_keys"] == CHUNKS
        else:
            assert after["rpcs"] - before["rpcs"] == 2, (before, after)
            assert served(a[0])["hit_keys"] == 2 and served(c[0])["hit_keys"] == CHUNKS
        expect_balanced([a[0], c[0]], b[0])
    finally:
        nodes.close()


def test_directed_lookups_ask_only_a_holder_and_nobody_for_what_no_peer_holds(tmp_path, zmq_ctx):
    """Three peers of B, each holding its own prompt: a lookup of one asks
    only its holder (one RPC for its four chunks); a prompt nobody holds,
    and one its holder has since dropped, ask nobody (the removal reached
    B's directory through the holder's chunk log)."""
    nodes = Nodes(tmp_path, "loopback", peers_of=[[], [0, 2, 3], [], []])
    try:
        a, b, c, d = (worker(zmq_ctx, s) for s in nodes.servers)
        eventually(lambda: peers_in(b[0], "ready") == 3, "B sees A, C and D ready")
        rng = np.random.default_rng(77)
        chunk = chunk_size(a[0])
        prompts = [random_tokens(rng, CHUNKS * chunk) for _ in range(3)]
        holders = [a, c, d]
        patterns = [store_prompt(h[0], h[2], h[1], p, CHUNKS, f"own-{i}", rng)
                    for i, (h, p) in enumerate(zip(holders, prompts))]
        wait_until_directory_holds(b[0], 3 * CHUNKS)  # and none of A, C, D stale

        before = lookups(b[0])
        assert lookup_l2(b[0], prompts[1], "from-c", timeout_s=SETTLE_S) == CHUNKS
        data = retrieve(b[0], b[2], b[1], prompts[1], CHUNKS, "from-c")
        for index in range(CHUNKS):
            assert np.array_equal(as_pattern(data[index], patterns[1][index]), patterns[1][index])
        after = lookups(b[0])
        assert after["rpcs"] - before["rpcs"] == 1 and after["found_chunks"] - before[
            "found_chunks"] == CHUNKS, (before, after)
        assert served(a[0])["lookups"] == 0 and served(d[0])["lookups"] == 0
        assert served(c[0])["lookups"] == 1

        # Nobody holds it: nobody is asked.
        before = after
        assert lookup_l2(b[0], random_tokens(rng, CHUNKS * chunk), "nowhere",
                         timeout_s=SETTLE_S) == 0
        after = lookups(b[0])
        assert after["rpcs"] == before["rpcs"] and \
            after["unnamed_keys"] - before["unnamed_keys"] == CHUNKS, (before, after)

        # D drops its prompt: once B's directory read that, nobody is asked for it.
        held = stats(b[0])["p2p"]["directory"]["chunks"]
        assert d[0].call("clear") is None
        eventually(lambda: stats(b[0])["p2p"]["directory"]["chunks"] <= held - CHUNKS,
                   "B's directory dropped D's chunks")
        before = lookups(b[0])
        assert lookup_l2(b[0], prompts[2], "dropped", timeout_s=SETTLE_S) == 0
        after = lookups(b[0])
        assert after["rpcs"] == before["rpcs"], (before, after)
        assert served(d[0])["lookups"] == 0
        expect_balanced([a[0], c[0], d[0]], b[0])
    finally:
        nodes.close()


@pytest.mark.parametrize("bias", ["4", "0"])
def test_the_last_copy_bias_evicts_copies_a_peer_keeps_before_older_last_copies(tmp_path, zmq_ctx,
                                                                               bias):
    """Issue 43, section 3. B stores five prompts of its own (the fleet's
    only copies: the oldest in its L1), then loads thirty of A's (copies A
    holds too): 140 of its 200 objects. Then it stores new prompts until its
    evictor runs a pass (at 160 objects, down to 140 with
    --eviction-ratio 0.1: 20 to 24 objects). Of each loaded chunk the
    keeper is A or B (a rendezvous hash of their incarnations: about half
    each), so with the bias B evicts first the loaded copies A keeps (about
    60 of 120; fewer than 24 only 6 standard deviations off) and its own
    prompts stay whole; with --p2p-last-copy-bias 0 (plain LRU) they are
    the oldest and go first."""
    nodes = Nodes(tmp_path, "loopback", peers_of=[[1], [0]],
                  extra_args=["--p2p-last-copy-bias", bias, "--eviction-ratio", "0.1"])
    try:
        a, b = (worker(zmq_ctx, s) for s in nodes.servers)
        eventually(lambda: peers_in(b[0], "ready") == 1, "B sees A ready")
        rng = np.random.default_rng(43)
        chunk = chunk_size(a[0])
        own = [random_tokens(rng, CHUNKS * chunk) for _ in range(5)]
        for i, tokens in enumerate(own):
            store_prompt(b[0], b[2], b[1], tokens, CHUNKS, f"own-{i}", rng)
        shared = [random_tokens(rng, CHUNKS * chunk) for _ in range(30)]
        for i, tokens in enumerate(shared):
            store_prompt(a[0], a[2], a[1], tokens, CHUNKS, f"shared-{i}", rng)
        wait_until_directory_holds(b[0], len(shared) * CHUNKS)
        for i, tokens in enumerate(shared):
            assert lookup_l2(b[0], tokens, f"load-{i}", timeout_s=SETTLE_S) == CHUNKS
            retrieve(b[0], b[2], b[1], tokens, CHUNKS, f"load-{i}")
        assert stats(b[0])["l1"]["resident_objects"] == (len(own) + len(shared)) * CHUNKS
        assert stats(b[0])["eviction"]["background_evicted_objects"] == 0

        more = 0
        while stats(b[0])["eviction"]["background_evicted_objects"] == 0:
            assert more < 20, "B's evictor never ran"
            store_prompt(b[0], b[2], b[1], random_tokens(rng, CHUNKS * chunk), CHUNKS,
                         f"more-{more}", rng)
            more += 1
        eviction = stats(b[0])["eviction"]
        own_found = sum(lookup_l2(b[0], tokens, f"own-again-{i}", timeout_s=SETTLE_S)
                        for i, tokens in enumerate(own))
        if bias == "0":
            assert own_found == 0, eviction
            assert eviction["last_copy_checked"] == 0, eviction
        else:
            assert own_found == len(own) * CHUNKS, eviction
            assert eviction["last_copy_expendable"] >= 24, eviction
            assert eviction["last_copies_spared"] >= len(own) * CHUNKS, eviction
    finally:
        nodes.close()


def test_a_server_with_another_key_gets_nothing_and_leaves_no_lock(tmp_path, zmq_ctx):
    where = "netns" if namespaces_possible() else "loopback"  # one run: it waits on a deadline
    # 0 = A holds the prompt; 1 = D lists A but holds another fleet key.
    nodes = Nodes(tmp_path, where, peers_of=[[], [0]], key_of=[0, 1])
    try:
        a, d = (worker(zmq_ctx, s) for s in nodes.servers)
        rng = np.random.default_rng(5)
        tokens = random_tokens(rng, CHUNKS * chunk_size(a[0]))
        store_prompt(a[0], a[2], a[1], tokens, CHUNKS, "on-a", rng)
        # Its handshake is never answered (CURVE with another key): unreachable.
        eventually(lambda: peers_in(d[0], "unreachable") == 1, "D finds A unreachable")
        assert lookup_l2(d[0], tokens, "stranger", timeout_s=SETTLE_S) == 0
        assert served(a[0])["lookups"] == 0 and served(a[0])["locked_bytes"] == 0
        assert stats(d[0])["l2"]["adapters"][0]["loaded_objects"] == 0
    finally:
        nodes.close()


def test_a_partition_costs_lookups_their_deadline_and_the_peer_serves_again_once_mended(
        tmp_path, zmq_ctx):
    nodes = Nodes(tmp_path, "netns", peers_of=[[], [0]])
    try:
        a, b = (worker(zmq_ctx, s) for s in nodes.servers)
        eventually(lambda: peers_in(b[0], "ready") == 1, "B sees A ready")
        rng = np.random.default_rng(9)
        tokens = random_tokens(rng, CHUNKS * chunk_size(a[0]))
        patterns = store_prompt(a[0], a[2], a[1], tokens, CHUNKS, "on-a", rng)
        wait_until_directory_holds(b[0], CHUNKS)

        nodes.namespaces.cut(0)
        # Asked before B's probe notices: no answer by B's 2 s lookup deadline.
        assert lookup_l2(b[0], tokens, "cut", timeout_s=SETTLE_S) == 0
        eventually(lambda: peers_in(b[0], "unreachable") == 1, "B finds A unreachable")
        assert lookup_l2(b[0], tokens, "still-cut", timeout_s=SETTLE_S) == 0

        nodes.namespaces.mend(0)
        eventually(lambda: peers_in(b[0], "ready") == 1, "B sees A ready again")
        assert lookup_l2(b[0], tokens, "mended", timeout_s=SETTLE_S) == CHUNKS
        data = retrieve(b[0], b[2], b[1], tokens, CHUNKS, "mended")
        for index in range(CHUNKS):
            assert np.array_equal(as_pattern(data[index], patterns[index]), patterns[index])
        # The lookup that went unanswered took locks at A if it got there:
        # A's reaper releases them (B's --p2p-lookup-timeout is A's too: 2 s).
        expect_balanced([a[0]], b[0])
    finally:
        nodes.close()
