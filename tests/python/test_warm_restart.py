"""Warm restart (issue 23): a server started with --takeover takes the L1 pool,
its objects and the workers' registrations over from the running server while
worker processes keep storing and retrieving.

Where the inputs come from: the workers speak the reference LMCache MP
client's engine-driven shared-memory protocol through mp_client.py (its
msgpack layouts of IPCCacheServerKey and RegisterEngineDrivenContextPayload,
spec 4.1/4.2, and the slot shapes the reference's adapter writes), map the
pool by the name the server's ready line gives, exactly as the reference
worker does, and never learn that the server changed except through what
the protocol shows them (a reply that does not come is retried: ZeroMQ's
DEALER reconnects to the same endpoint on its own).

Every chunk's bytes are a pure function of its tokens and index, so a worker
checks each retrieved byte against its key: nothing half-written, nothing of
another key, is ever accepted.
"""

import json
import multiprocessing
import os
import signal
import time
import uuid

import numpy as np
import pytest
import zmq

from mp_client import (
    OP_COMMIT_STORE, UNAVAILABLE, OP_PREPARE_STORE, Client, ServerStartError, chunk_size, free_tcp_port,
    lookup, make_key, map_pool, new_instance_id, random_tokens, register, retrieve,
    slot_view, start_server, stats)

CHUNKS_PER_PROMPT = 2
MAX_PROMPTS_PER_WORKER = 150  # 300 MiB in all: below the eviction watermark
WORKERS = 4
# A request sent in the instant the predecessor's sockets close is lost with its
# connection (docs/architecture.md, "Restarts and upgrades"): its client times out.
REPLY_TIMEOUT_S = 2.0


def chunk_pattern(tokens, index, shape):
    """The bytes of chunk `index` of the prompt `tokens`: derived from them alone."""
    seed = (hash(tuple(tokens[:8])) ^ (index * 0x9E3779B97F4A7C15)) & ((1 << 63) - 1)
    return np.random.default_rng(seed).integers(0, 2**16, size=shape, dtype=np.uint16)


class Worker:
    """One worker process's session: a client that is recreated (and its
    registration made again, as the reference client's heartbeat does) only
    when a reply does not come."""

    def __init__(self, url, shm_name, pool_size, index):
        self.url = url
        self.ctx = zmq.Context()
        self.instance_id = new_instance_id()
        self.pool = map_pool(shm_name, pool_size)
        self.index = index
        self.client = None
        self.reconnects = 0
        self.refusals = 0
        self.straddled = 0  # lookups answered by the predecessor, their status by the successor
        self.connect(register_again=True)
        self.chunk = chunk_size(self.client)

    def connect(self, register_again):
        if self.client is not None:
            self.client.close()
            self.reconnects += 1
        self.client = Client(self.ctx, self.url, reply_timeout_s=REPLY_TIMEOUT_S)
        if register_again:
            register(self.client, self.instance_id)

    def retrying(self, action):
        """Runs `action` until it gets its replies. A request the predecessor
        refused while handing over (402, retryable) is sent again; a reply
        lost with its connection is retried on a fresh one."""
        for _ in range(50):
            try:
                return action()
            except AssertionError as e:
                if f"'code': {UNAVAILABLE}" in str(e):
                    self.refusals += 1
                    time.sleep(0.02)
                    continue
                if "no reply" not in str(e):
                    raise
                self.connect(register_again=True)
        raise AssertionError(f"worker {self.index}: no answer in 50 attempts")

    def store(self, tokens):
        """prepare_store, write each slot's pattern, commit_store. True when committed."""
        key = make_key(tokens, 0, CHUNKS_PER_PROMPT * self.chunk, uuid.uuid4().hex)

        def attempt():
            reply = self.client.request(OP_PREPARE_STORE, key, self.instance_id)
            if reply.error is not None:
                assert reply.error["code"] != UNAVAILABLE, f"refused: {reply.error!r}"
                return False
            context = reply.value["context"]
            for index, slot in zip(context["chunk_indices"], context["slots"]):
                view = slot_view(self.pool, slot)
                view[...] = chunk_pattern(tokens, index, view.shape)
            commit = self.client.request(OP_COMMIT_STORE, key, self.instance_id, b"")
            # A refused commit is not retried: the copy it named is gone
            # (staged copies never cross a handover); the prompt counts as failed.
            return commit.error is None and commit.value is True

        return self.retrying(attempt)

    def check(self, tokens, must_hit):
        """Looks the prompt up and retrieves what hits; every byte is checked.
        Returns (chunks hit, mismatched chunks)."""

        def attempt():
            server = stats(self.client)["boot_id"]
            hit = lookup(self.client, tokens, uuid.uuid4().hex)
            chunks = hit or 0  # query_prefetch_status counts chunks
            if chunks == 0:
                # A lookup the predecessor answered, whose status the
                # successor was asked for: the successor does not know the
                # request and answers 0, as the reference does for an
                # unknown one (a miss to vLLM, which recomputes). Told apart
                # by the boot id, and asked again; a committed prompt the
                # serving server misses is still a failure.
                if must_hit and stats(self.client)["boot_id"] != server:
                    return None
                return 0, 0
            data = retrieve(self.client, self.pool, self.instance_id, tokens, chunks,
                            uuid.uuid4().hex)
            bad = sum(1 for i, got in enumerate(data)
                      if not np.array_equal(got, chunk_pattern(tokens, i, got.shape)))
            return chunks, bad

        outcome = self.retrying(attempt)
        if outcome is None:  # across the handover: the successor is asked alone now
            self.straddled += 1
            outcome = self.retrying(attempt)
            assert outcome is not None, f"worker {self.index}: a second handover?"
        chunks, bad = outcome
        if must_hit:
            assert chunks == CHUNKS_PER_PROMPT, \
                f"worker {self.index}: a committed prompt hit {chunks} of {CHUNKS_PER_PROMPT} chunks"
        return chunks, bad


def worker_main(url, shm_name, pool_size, index, stop_path, result_path):
    rng = np.random.default_rng(1000 + index)
    worker = Worker(url, shm_name, pool_size, index)
    committed = []  # (commit time, tokens)
    failed = []
    mismatched = 0
    while not os.path.exists(stop_path):
        if len(committed) + len(failed) < MAX_PROMPTS_PER_WORKER:
            tokens = random_tokens(rng, CHUNKS_PER_PROMPT * worker.chunk)
            if worker.store(tokens):
                committed.append((time.time(), tokens))
            else:
                failed.append(tokens)
        if committed:
            # Read back an earlier prompt while the stores go on.
            _, tokens = committed[int(rng.integers(0, len(committed)))]
            mismatched += worker.check(tokens, must_hit=True)[1]
        time.sleep(0.04)  # about 20 prompts a second: the cap is not reached in the test
    # Every committed prompt is whole; a store that failed may hit a prefix,
    # whose bytes must still be right.
    for _, tokens in committed:
        mismatched += worker.check(tokens, must_hit=True)[1]
    partial_hits = 0
    for tokens in failed:
        chunks, bad = worker.check(tokens, must_hit=False)
        partial_hits += chunks
        mismatched += bad
    with open(result_path, "w") as f:
        json.dump({"pid": os.getpid(), "commit_times": [t for t, _ in committed],
                   "failed": len(failed), "partial_hits": partial_hits,
                   "mismatched": mismatched, "reconnects": worker.reconnects,
                   "refusals": worker.refusals, "straddled": worker.straddled}, f)
    worker.client.close()
    worker.ctx.destroy(linger=0)


def server_args(shm_name, port, extra=(), size_gb="0.5"):
    return ["--shm-name", shm_name, "--l1-size-gb", size_gb, "--port", str(port),
            "--http-port", "0", "--drain-timeout-seconds", "0", "--log-level", "info", *extra]


def test_a_successor_takes_the_pool_over_while_four_workers_run(binary, tmp_path):
    url = f"ipc://{tmp_path}/lmc.sock"
    shm_name = f"lmcache_l1_pool_warm_{os.getpid()}"
    port = free_tcp_port()
    try:
        # As in a Kubernetes pod (docs/deploy): it stays, not serving, until SIGTERM.
        a = start_server(binary, url, tmp_path / "a.log",
                         server_args(shm_name, port, ["--after-handover", "wait"]))
    except ServerStartError as e:
        pytest.fail(str(e))
    b = None
    fork = multiprocessing.get_context("fork")
    stop_path = tmp_path / "stop"
    workers = []
    try:
        pool_size = os.path.getsize(f"/dev/shm/{a.shm_name}")
        for i in range(WORKERS):
            p = fork.Process(target=worker_main, args=(url, a.shm_name, pool_size, i,
                                                       str(stop_path), str(tmp_path / f"w{i}.json")))
            p.start()
            workers.append(p)
        pids = [p.pid for p in workers]
        time.sleep(2.0)
        asked_at = time.time()
        b = start_server(binary, url, tmp_path / "b.log",
                         server_args(shm_name, port, ["--takeover"]))
        deadline = time.monotonic() + 60
        while "waiting for SIGTERM" not in a.log():
            assert a.proc.poll() is None and time.monotonic() < deadline, a.log()
            time.sleep(0.05)
        assert "handed pool" in a.log(), a.log()
        assert "warm restart: took pool" in b.log(), b.log()
        assert os.path.exists(f"/dev/shm/{shm_name}"), "the pool went with the predecessor"
        time.sleep(2.0 + REPLY_TIMEOUT_S)  # a worker whose reply was lost carries on too
        assert all(p.is_alive() for p in workers), "a worker process died"
        stop_path.write_text("stop")
        for p in workers:
            p.join(timeout=120)
            assert p.exitcode == 0, f"worker {p.pid} exited with {p.exitcode}"
        assert [p.pid for p in workers] == pids
        # The predecessor's own SIGTERM leaves the pool to its successor.
        assert a.proc.poll() is None, a.log()
        assert a.stop(timeout=60) == 0, a.log()
        assert "left to the successor" in a.log(), a.log()
        assert os.path.exists(f"/dev/shm/{shm_name}")
        results = [json.loads((tmp_path / f"w{i}.json").read_text()) for i in range(WORKERS)]
        for i, r in enumerate(results):
            assert r["mismatched"] == 0, f"worker {i} read wrong bytes: {r}"
            assert any(t > asked_at for t in r["commit_times"]), \
                f"worker {i} stored nothing after the takeover: {r}"
        committed_before = sum(sum(1 for t in r["commit_times"] if t < asked_at) for r in results)
        assert committed_before > 0

        ctx = zmq.Context()
        try:
            client = Client(ctx, url)
            s = stats(client)
            client.close()
        finally:
            ctx.destroy(linger=0)
        restart = s["restart"]
        assert restart["took_over"] is True
        # Every object committed before the successor was asked came across.
        assert restart["adopted_objects"] >= committed_before * CHUNKS_PER_PROMPT, (restart, results)
        assert restart["carried_registrations"] == WORKERS, restart
        l1 = s["l1"]
        # Lock balance: every retrieve committed, so only the pins of objects a
        # reader held at the handover remain (they expire with a read lease).
        assert l1["read_locks"] <= restart["adopted_read_locked"], (l1, restart)
        # Byte balance: the allocator's bytes are exactly the table's.
        assert l1["used_bytes"] == (l1["resident_bytes"] + l1["staging_bytes"] +
                                    l1["retired_bytes"] + l1["quarantined_bytes"]), l1
        reconnects = sum(r["reconnects"] for r in results)
        refusals = sum(r["refusals"] for r in results)
        straddled = sum(r["straddled"] for r in results)
        print(f"takeover: {restart}; workers: {refusals} requests refused for the handover "
              f"and retried, {reconnects} replies lost (reconnected), {straddled} lookups "
              f"across the handover (asked again)")
        assert b.stop(timeout=60) == 0, f"the successor failed at its exit:\n{b.log()}"
    finally:
        if not stop_path.exists():
            stop_path.write_text("stop")
        for p in workers:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
        for server in (a, b):
            if server is not None:
                server.stop(timeout=60)
    assert not os.path.exists(f"/dev/shm/{shm_name}"), "the successor left its pool behind"


def test_a_successor_of_another_geometry_is_refused_or_starts_cold(binary, tmp_path):
    url = f"ipc://{tmp_path}/lmc.sock"
    shm_name = f"lmcache_l1_pool_geometry_{os.getpid()}"
    port = free_tcp_port()
    a = start_server(binary, url, tmp_path / "a.log", server_args(shm_name, port))
    b = None
    try:
        # --takeover alone: refused with what differs; the running server serves on.
        refused = tmp_path / "refused.log"
        with pytest.raises(ServerStartError) as failed:
            start_server(binary, url, refused,
                         server_args(shm_name, port, ["--takeover"], size_gb="1"))
        assert "--l1-size-gb" in str(failed.value) and "if-compatible" in str(failed.value), \
            str(failed.value)
        assert a.proc.poll() is None, f"the running server stopped:\n{a.log()}"
        assert "serving on" in a.log()
        ctx = zmq.Context()
        try:
            client = Client(ctx, url)
            assert chunk_size(client) > 0  # still answering
            client.close()
        finally:
            ctx.destroy(linger=0)
        # --takeover=if-compatible: the running server steps down, removes its
        # pool, and the successor starts cold with its own geometry.
        b = start_server(binary, url, tmp_path / "b.log",
                         server_args(shm_name, port, ["--takeover=if-compatible"], size_gb="1"))
        assert a.proc.wait(timeout=60) == 0, a.log()
        assert "removed; bye" in a.log(), a.log()
        assert "starting cold" in b.log(), b.log()
        assert os.path.getsize(f"/dev/shm/{shm_name}") == 1 << 30
        assert b.stop(timeout=60) == 0, b.log()
    finally:
        for server in (a, b):
            if server is not None:
                server.stop(timeout=60)
    assert not os.path.exists(f"/dev/shm/{shm_name}")


def test_a_stray_sigusr1_is_ignored_and_a_draining_server_hands_over(binary, tmp_path):
    url = f"ipc://{tmp_path}/lmc.sock"
    shm_name = f"lmcache_l1_pool_drain_{os.getpid()}"
    port = free_tcp_port()
    args = server_args(shm_name, port)
    args[args.index("--drain-timeout-seconds") + 1] = "60"
    a = start_server(binary, url, tmp_path / "a.log", args)
    b = None
    ctx = zmq.Context()
    try:
        # SIGUSR1 only means something when the takeover thread raised it.
        a.proc.send_signal(signal.SIGUSR1)
        client = Client(ctx, url)
        a.wait_for_log("no successor waiting")
        assert chunk_size(client) > 0  # and it serves on
        # A registered worker keeps the SIGTERM drain going for up to 60 s;
        # a successor asking meanwhile gets the pool at once.
        instance = new_instance_id()
        register(client, instance)
        a.proc.send_signal(signal.SIGTERM)
        a.wait_for_log("draining")
        started = time.monotonic()
        b = start_server(binary, url, tmp_path / "b.log",
                         server_args(shm_name, port, ["--takeover"]))
        assert a.proc.wait(timeout=60) == 0, a.log()
        assert time.monotonic() - started < 30, "the successor waited for the whole drain"
        assert "handing over instead" in a.log(), a.log()
        assert "carried 1 registrations" in b.log(), b.log()
        client.close()
        client = Client(ctx, url)
        assert client.call("ping", instance) is True  # the carried registration, claimed
        client.close()
        assert b.stop(timeout=60) == 0, b.log()
    finally:
        ctx.destroy(linger=0)
        for server in (a, b):
            if server is not None:
                server.stop(timeout=60)
    assert not os.path.exists(f"/dev/shm/{shm_name}")
