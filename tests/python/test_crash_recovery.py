"""Crash recovery (issue 23, --recover-pool): the server is killed with SIGKILL
at 50 random points of a store/evict storm (10 in the sanitizer builds), and
each time a new server started with --recover-pool over the same pool serves
what the dead one had committed, and never a wrong byte.

Where the inputs come from: the workers speak the reference LMCache MP
client's engine-driven shared-memory protocol through mp_client.py (its
msgpack layouts of IPCCacheServerKey and RegisterEngineDrivenContextPayload,
spec 4.1/4.2, and the slot shapes the reference's adapter writes) and map the
pool by name, as the reference worker does. They live through every crash:
a request the dead server never answers times out, and they connect and
register again, as the reference client's heartbeat does. A worker killed
mid-store has its slot still mapped and may go on writing it after the new
server started: those slots must never be lent to anyone else.

Every chunk's bytes are a pure function of its prompt's seed and its index,
so every byte retrieved is checked against its key.
"""

import multiprocessing
import os
import random
import time
import uuid

import numpy as np
import pytest
import zmq

from mp_client import (
    OP_COMMIT_STORE, OP_PREPARE_STORE, Client, ServerStartError, chunk_size, free_tcp_port,
    lookup, make_key, map_pool, new_instance_id, register, retrieve, slot_view,
    start_server, stats)

KILLS = int(os.environ.get("LMC_CRASH_KILLS", "50"))  # the sanitizer builds run 10
WORKERS = 2
CHUNKS_PER_PROMPT = 2
POOL_GB = "0.25"
# The grace period is the server's own: during the storm the test polls its
# stats, and a prompt committed before the last moment the journal reported
# nothing awaiting its checksum (journal_awaiting_seal == 0) must come back.
# The sealer runs on idle cores, so how long that is depends on the load (on
# an idle machine, milliseconds); each kill's grace is printed.
STATS_POLL_S = 0.05
# Evictions keep the newest objects up to the low watermark (0.8 - 0.2 of the
# pool); reads of older prompts (this test's checks) move them ahead of newer
# ones, so only the newest 40 % of the pool, less what the recovery holds
# from reuse, is sure to be resident.
SURE_FRACTION = 0.4
REPLY_TIMEOUT_S = 1.0
WRITE_TTL_S = 10
# A recovery holds the slots the dead server had lent and not sealed: at most
# the chunks of prompts committed after the last all-sealed moment, those of
# the one request each worker may have had in flight, and a few slots the
# server was freeing (withdrawn) when it died. Such a hold ends a write TTL
# after the recovery that began it, which came after its crash (the
# evictor's pass, once a second, frees it; a recovery frees one that has
# ended): a later crash never renews it.
WITHDRAWN_SLACK = 8
HOLD_END_SLACK_S = 3.0
STORM_S = (0.3, 1.5)  # how long the storm runs between two kills


def prompt_tokens(seed, chunk):
    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.integers(0, 2**31, size=CHUNKS_PER_PROMPT * chunk)]


def chunk_pattern(seed, index, shape):
    rng = np.random.default_rng((seed << 8) | index)
    return rng.integers(0, 2**16, size=shape, dtype=np.uint16)


def storm_worker(url, shm_name, pool_size, index, control):
    """Stores prompts as fast as it can, logging each committed one (commit
    time, seed); pauses between requests while `control/pause` exists."""
    ctx = zmq.Context()
    pool = map_pool(shm_name, pool_size)
    instance = new_instance_id()
    client = None

    def reconnect():
        nonlocal client
        if client is not None:
            client.close()
        client = Client(ctx, url, reply_timeout_s=REPLY_TIMEOUT_S)
        try:
            register(client, instance)
        except AssertionError:
            pass  # the server is not back yet: the next request fails and comes here again

    reconnect()
    chunk = None
    while chunk is None:
        try:
            chunk = chunk_size(client)
        except AssertionError:
            reconnect()
    log = open(os.path.join(control, f"commits-{index}.log"), "a", buffering=1)
    paused = os.path.join(control, f"paused-{index}")
    seq = 0
    while not os.path.exists(os.path.join(control, "stop")):
        if os.path.exists(os.path.join(control, "pause")):
            open(paused, "w").close()
            time.sleep(0.01)
            continue
        seq += 1
        seed = (index + 1) * 10_000_000 + seq
        tokens = prompt_tokens(seed, chunk)
        key = make_key(tokens, 0, CHUNKS_PER_PROMPT * chunk, uuid.uuid4().hex)
        try:
            reply = client.request(OP_PREPARE_STORE, key, instance)
            if reply.error is not None:
                reconnect()  # unregistered at a new server, or refused: register again
                continue
            context = reply.value["context"]
            for i, slot in zip(context["chunk_indices"], context["slots"]):
                view = slot_view(pool, slot)
                view[...] = chunk_pattern(seed, i, view.shape)
            commit = client.request(OP_COMMIT_STORE, key, instance, b"")
            if commit.error is None and commit.value is True:
                log.write(f"{time.time()} {seed}\n")
            elif commit.error is not None:
                reconnect()
            # About 40 prompts (20 MiB) a second per worker: the pool wraps every
            # few seconds, and what was committed a grace period before a kill
            # is still among the newest objects.
            time.sleep(0.02)
        except AssertionError:
            reconnect()
    log.close()
    client.close()
    ctx.destroy(linger=0)


def read_commits(control):
    commits = []
    for name in os.listdir(control):
        if name.startswith("commits-"):
            with open(os.path.join(control, name)) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 2:
                        commits.append((float(parts[0]), int(parts[1])))
    commits.sort()
    return commits


def server_args(shm_name, port):
    return ["--shm-name", shm_name, "--l1-size-gb", POOL_GB, "--port", str(port),
            "--http-port", "0", "--drain-timeout-seconds", "0", "--log-level", "info",
            "--recover-pool", "--l1-write-ttl-seconds", str(WRITE_TTL_S)]


class Checker:
    """The test's own worker: looks prompts up at the new server and checks
    every byte it retrieves."""

    def __init__(self, url, shm_name, pool_size):
        self.ctx = zmq.Context()
        self.url = url
        self.pool = map_pool(shm_name, pool_size)
        self.instance = new_instance_id()
        self.client = None

    def connect(self):
        if self.client is not None:
            self.client.close()
        self.client = Client(self.ctx, self.url)
        register(self.client, self.instance)
        self.chunk = chunk_size(self.client)

    def check(self, seed):
        """(chunks hit, chunks whose bytes are wrong)."""
        tokens = prompt_tokens(seed, self.chunk)
        # One request id for both, as the reference client's scheduler and
        # worker share one: the retrieve consumes the lookup's locks (with two
        # ids, every object checked would stay locked for a read TTL, and the
        # evictor would take the newest unlocked objects instead).
        request_id = uuid.uuid4().hex
        hit = lookup(self.client, tokens, request_id) or 0
        if hit == 0:
            return 0, 0
        data = retrieve(self.client, self.pool, self.instance, tokens, hit, request_id)
        bad = sum(1 for i, got in enumerate(data)
                  if not np.array_equal(got, chunk_pattern(seed, i, got.shape)))
        return hit, bad

    def close(self):
        if self.client is not None:
            self.client.close()
        self.ctx.destroy(linger=0)


def wait_paused(control, deadline_s=30):
    deadline = time.monotonic() + deadline_s
    while not all(os.path.exists(os.path.join(control, f"paused-{i}")) for i in range(WORKERS)):
        assert time.monotonic() < deadline, "the workers did not pause"
        time.sleep(0.01)


def test_a_server_killed_at_random_points_of_a_store_storm_is_recovered_without_a_wrong_byte(
        binary, tmp_path):
    url = f"ipc://{tmp_path}/lmc.sock"
    shm_name = f"lmcache_l1_pool_crash_{os.getpid()}"
    port = free_tcp_port()
    control = str(tmp_path)
    rng = random.Random(23)
    try:
        server = start_server(binary, url, tmp_path / "s0.log", server_args(shm_name, port))
    except ServerStartError as e:
        pytest.fail(str(e))
    pool_size = os.path.getsize(f"/dev/shm/{shm_name}")
    fork = multiprocessing.get_context("fork")
    workers = [fork.Process(target=storm_worker, args=(url, shm_name, pool_size, i, control))
               for i in range(WORKERS)]
    for p in workers:
        p.start()
    checker = Checker(url, shm_name, pool_size)
    kill_times = []
    sealed_points = []  # per kill: the last time before it that nothing awaited a seal
    graces = []
    totals = {"checked": 0, "sure": 0, "recovered": 0, "held": 0, "evicted": 0, "max_held": 0}
    holds = []  # per crash: (when, the most slots it can have left to hold)
    try:
        chunk_bytes = None
        checker.connect()
        for kill in range(KILLS):
            storm_ends = time.monotonic() + rng.uniform(*STORM_S)
            sealed_at = 0.0
            while time.monotonic() < storm_ends:
                asked_at = time.time()
                s = stats(checker.client)
                if s["restart"]["journal_awaiting_seal"] == 0:
                    sealed_at = asked_at  # every commit logged before this is sealed
                totals["evicted"] = max(totals["evicted"], s["eviction"]["evicted_objects"])
                time.sleep(STATS_POLL_S)
            assert all(p.is_alive() for p in workers), "a worker process died"
            server.kill()  # SIGKILL: no destructor, no flush, the pool left as it is
            killed_at = time.time()
            kill_times.append(killed_at)
            sealed_points.append(sealed_at)
            graces.append(killed_at - sealed_at)
            log = tmp_path / f"s{kill + 1}.log"
            server = start_server(binary, url, log, server_args(shm_name, port))
            assert "crash recovery: recovered pool" in server.log(), server.log()
            # Pause the storm (between requests) to look at what came back
            # before new stores evict it.
            for i in range(WORKERS):
                path = os.path.join(control, f"paused-{i}")
                if os.path.exists(path):
                    os.remove(path)
            open(os.path.join(control, "pause"), "w").close()
            wait_paused(control)
            checker.connect()
            s = stats(checker.client)
            restart = s["restart"]
            assert restart["recovered"] is True, restart
            totals["recovered"] += restart["recovered_objects"]
            totals["held"] += restart["recovery_held_slots"]
            totals["max_held"] = max(totals["max_held"], restart["recovery_held_slots"])
            # The slots held now can only be those crashes within a write TTL
            # left. (Before, every recovery held them for a new TTL, so under
            # crashes a few seconds apart they piled up: 274 slots, 28 % of
            # the pool, by the 25th kill, and the evictions that forced took
            # sealed prompts.)
            unsealed_commits = sum(1 for t, _ in read_commits(control) if sealed_at < t <= killed_at)
            holds.append((killed_at, CHUNKS_PER_PROMPT * (unsealed_commits + WORKERS) + WITHDRAWN_SLACK))
            may_hold = sum(bound for at, bound in holds
                           if killed_at - at <= WRITE_TTL_S + HOLD_END_SLACK_S)
            assert restart["recovery_held_slots"] <= may_hold, (
                f"kill {kill}: {restart['recovery_held_slots']} slots held, but the crashes of the "
                f"last write TTL can have left {may_hold} ({restart})")
            if chunk_bytes is None:
                chunk_bytes = CHUNKS_PER_PROMPT * 2 * 2 * checker.chunk * 128 * 2  # one prompt
            # The newest prompts, as many as fit in the sure part of the pool,
            # are checked oldest first, after a few older ones: reads move
            # objects ahead in the eviction order, and read in this order they
            # keep their commit order, so the bound holds at the next kill too.
            # Those committed a grace period before the first kill after their
            # commit must be whole (one committed just before an earlier kill
            # may have been lost then, unsealed, as it may be now).
            commits = read_commits(control)
            recent = []
            newer_bytes = 0
            sure_bytes = SURE_FRACTION * pool_size - restart["recovery_held_bytes"]
            for t, seed in reversed(commits):
                newer_bytes += chunk_bytes
                if newer_bytes > sure_bytes:
                    break
                recent.append((t, seed))
            older = commits[:len(commits) - len(recent)]
            for _, seed in rng.sample(older, min(5, len(older))):
                hit, bad = checker.check(seed)
                assert bad == 0, f"kill {kill}: prompt {seed} served wrong bytes"
            for t, seed in reversed(recent):
                hit, bad = checker.check(seed)
                assert bad == 0, f"kill {kill}: prompt {seed} served wrong bytes"
                # None: committed to this server, before the storm paused.
                first_kill = next((i for i, k in enumerate(kill_times) if k > t), None)
                if first_kill is not None and t < sealed_points[first_kill]:
                    totals["sure"] += 1
                    assert hit == CHUNKS_PER_PROMPT, (
                        f"kill {kill}: prompt {seed}, committed "
                        f"{kill_times[first_kill] - t:.2f} s before kill {first_kill} and sealed "
                        f"by then, came back with {hit} of {CHUNKS_PER_PROMPT} chunks ({restart})")
            totals["checked"] += len(recent) + min(5, len(older))
            l1 = s["l1"]
            assert l1["used_bytes"] == (l1["resident_bytes"] + l1["staging_bytes"] +
                                        l1["retired_bytes"] + l1["quarantined_bytes"]), l1
            os.remove(os.path.join(control, "pause"))
        graces.sort()
        print(f"crash recovery over {KILLS} kills: {totals}; from the last moment all was "
              f"sealed to the kill: median {graces[len(graces) // 2]:.3f} s, max {graces[-1]:.3f} s")
        assert totals["sure"] > 0
        assert totals["evicted"] > 0, "the storm never evicted: the pool is too large for it"
    finally:
        open(os.path.join(control, "stop"), "w").close()
        if os.path.exists(os.path.join(control, "pause")):
            os.remove(os.path.join(control, "pause"))
        for p in workers:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
        checker.close()
        server.stop(timeout=60)
    assert not os.path.exists(f"/dev/shm/{shm_name}"), "the last server left its pool behind"
    assert not os.path.exists(f"/dev/shm/{shm_name}.journal"), "the journal was left behind"
