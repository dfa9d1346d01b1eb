"""KV events against the real server: a client speaking like the reference's
(poll_kv_events as its frozen id 34, payloads [model_name, cursor,
max_events]; the reply decoded as its KVEventPollResult dataclass, a map of
every field: lmcache/v1/multiprocess/custom_types.py and protocols/kv_events.py)
and a ZMQ SUB socket decoding vLLM's KV-events frames ([topic, 8-byte
big-endian seq, KVEventBatch]; vllm/distributed/kv_events.py, with the map
events of its PR #42892) watch stores, L2 writes, evictions under pressure and
a clear, in order and without a gap.

    LMCACHE_SERVER_BINARY=build/src/lmcache-server /usr/bin/python3 -m pytest -q tests/python/test_kv_events.py
"""

import json
import os
import time

import msgpack
import numpy as np
import pytest
import zmq

from mp_client import (OP_CLEAR, OP_END_SESSION, OP_PING, MODEL, Client, ServerStartError, chunk_size,
                       free_tcp_ports, map_pool, new_instance_id, random_tokens, register, lookup_l2,
                       server_binary, start_server, stats, store_prompt)

OP_POLL_KV_EVENTS = 34  # the reference's RequestType.POLL_KV_EVENTS
LOG_SIZE = 400
CHUNKS = 16


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lmc-events")
    pub_port, replay_port, port = free_tcp_ports(3)
    adapter = json.dumps({"type": "fs", "base_path": str(tmp / "l2")})
    args = ["--l1-size-gb", "0.02", "--port", str(port), "--http-port", "0",
            "--drain-timeout-seconds", "0", "--kv-event-log-size", str(LOG_SIZE),
            "--kv-events-url", f"tcp://127.0.0.1:{pub_port}",
            "--kv-events-replay-url", f"tcp://127.0.0.1:{replay_port}",
            "--l2-adapter", adapter]
    try:
        srv = start_server(server_binary(), f"ipc://{tmp / 'lmc.sock'}", tmp / "server.log", args)
    except ServerStartError as e:
        pytest.fail(str(e))
    srv.pub_url = f"tcp://127.0.0.1:{pub_port}"
    srv.replay_url = f"tcp://127.0.0.1:{replay_port}"
    yield srv
    assert srv.stop(timeout=60) == 0, srv.log()


def wait_l2_idle(client, timeout_s=60):
    """Until the L2 tier has written behind everything L1 admitted (its
    STORAGE records are then in the log): a slow build (TSan) still writes
    while the test goes on."""
    deadline = time.monotonic() + timeout_s
    while True:
        store = stats(client)["l2"]["store"]
        if store["queued_objects"] == 0 and store["in_flight"] == 0:
            return
        assert time.monotonic() < deadline, f"L2 write-behind not idle: {store}"
        time.sleep(0.05)


def poll(client, cursor, max_events=100, model=MODEL):
    page = client.call(OP_POLL_KV_EVENTS, model, cursor, max_events)
    # KVEventPollResult: every field, as msgspec decodes the dataclass.
    assert list(page)[:5] == ["enabled", "incarnation", "next_cursor", "lost", "events"], page
    assert isinstance(page["incarnation"], int) and page["enabled"] is True
    for record in page["events"]:
        for field, kind in (("seq", int), ("kind", str), ("medium", str), ("model_name", str),
                            ("block_hashes", list), ("token_ids", list)):
            assert isinstance(record[field], kind), (field, record)
        assert all(isinstance(h, bytes) and len(h) == 32 for h in record["block_hashes"])
        assert record["parent_block_hash"] is None or len(record["parent_block_hash"]) == 32
    return page


def read_all(client, cursor):
    events = []
    while True:
        page = poll(client, cursor)
        assert not page["lost"], "a reader that keeps up must not lose records"
        events += page["events"]
        if page["next_cursor"] == cursor:
            return events, cursor
        cursor = page["next_cursor"]


def subscribe_live(ctx, url, client, timeout_s=60):
    """A SUB socket on `url` known to receive, and how many clears that took.
    ZeroMQ drops what a PUB sends before a new subscription reaches it (the
    slow joiner); a clear of the still empty cache publishes one
    AllBlocksCleared and changes nothing else, so clear until one arrives."""
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(url)
    deadline = time.monotonic() + timeout_s
    clears = 0
    while True:
        assert client.call(OP_CLEAR) is None
        clears += 1
        if sub.poll(1000, zmq.POLLIN):
            return sub, clears
        assert time.monotonic() < deadline, f"the SUB socket received nothing after {clears} clears"


def cleared_events(published):
    return sum(e["type"] == "AllBlocksCleared" for _, e in published)


def receive_published(sub, done, timeout_s=60.0):
    """[(seq, event map)] as received, until done(received) holds."""
    out = []
    deadline = time.monotonic() + timeout_s
    while not done(out):
        assert time.monotonic() < deadline, f"not done within {timeout_s} s; got {[e for _, e in out][-3:]}"
        if not sub.poll(200, zmq.POLLIN):
            continue
        topic, seq, payload = sub.recv_multipart()
        assert len(seq) == 8
        ts, events, rank = msgpack.unpackb(payload, raw=False)
        assert isinstance(ts, float) and rank is None
        for event in events:
            out.append((int.from_bytes(seq, "big"), event))
    return out


def replay(ctx, url, start_seq):
    """vLLM's replay protocol through a DEALER (as Dynamo): [b"", start_seq]."""
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(url)
    dealer.send_multipart([b"", start_seq.to_bytes(8, "big")])
    out = []
    while True:
        assert dealer.poll(30000, zmq.POLLIN), "no replay answer"
        empty, topic, seq, payload = dealer.recv_multipart()
        if payload == b"":
            assert seq == b"\xff" * 8
            dealer.close(0)
            return out
        for event in msgpack.unpackb(payload, raw=False)[1]:
            out.append((int.from_bytes(seq, "big"), event))


def test_events_follow_stores_l2_evictions_and_a_clear(server, zmq_ctx):
    client = Client(zmq_ctx, server.url)
    sub, handshake_clears = subscribe_live(zmq_ctx, server.pub_url, client)
    chunk = chunk_size(client)
    incarnation = poll(client, 0)["incarnation"]
    instance_id = new_instance_id()
    reg = register(client, instance_id)
    pool = map_pool(reg["shm_name"], reg["pool_size"])
    rng = np.random.default_rng(22)

    # A first prompt: one stored record per chunk, with its tokens and parent.
    tokens = random_tokens(rng, CHUNKS * chunk)
    store_prompt(client, pool, instance_id, tokens, CHUNKS, "req-a", rng)
    deadline = time.monotonic() + 30
    while stats(client)["l2"]["store"]["stored"] < CHUNKS and time.monotonic() < deadline:
        time.sleep(0.05)
    events, cursor = read_all(client, 0)
    cpu = [e for e in events if e["kind"] == "stored" and e["medium"] == "CPU"]
    assert len(cpu) == CHUNKS
    for i, record in enumerate(cpu):
        assert record["model_name"] == MODEL
        assert record["token_ids"] == tokens[i * chunk:(i + 1) * chunk]
        assert len(record["block_hashes"]) == 1
        want_parent = None if i == 0 else cpu[i - 1]["block_hashes"][0]
        assert record["parent_block_hash"] == want_parent
        assert record["tenant"] == ""
    hashes = [r["block_hashes"][0] for r in cpu]
    assert len(set(hashes)) == CHUNKS
    storage = [e for e in events if e["kind"] == "stored" and e["medium"] == "STORAGE"]
    assert sorted(r["block_hashes"][0] for r in storage) == sorted(hashes)
    assert all(r["location"].startswith("fs:") for r in storage)

    # Pressure: the pool holds about 80 chunks; three more prompts evict.
    for n in range(5):
        more = random_tokens(rng, CHUNKS * chunk)
        store_prompt(client, pool, instance_id, more, CHUNKS, f"req-p{n}", rng)
    assert stats(client)["eviction"]["evicted_objects"] > 0
    events, cursor = read_all(client, cursor)
    removed = [h for e in events if e["kind"] == "removed" and e["medium"] == "CPU"
               for h in e["block_hashes"]]
    assert removed, "evictions must be published"
    assert set(hashes[:4]) <= set(removed), "the oldest chunks go first (LRU)"

    # A lookup loads the evicted chunks back from L2: admitted to L1 again and
    # announced again with their tokens, which the lookup named (a load from
    # L2 carries only hashes).
    evicted = [i for i, h in enumerate(hashes) if h in set(removed)]
    assert lookup_l2(client, tokens, "req-a-again", timeout_s=30) is not None
    assert client.call(OP_END_SESSION, "req-a-again") is None
    events, cursor = read_all(client, cursor)
    back = {e["block_hashes"][0]: e for e in events if e["kind"] == "stored" and e["medium"] == "CPU"}
    for i in evicted:
        assert hashes[i] in back, f"chunk {i} loaded from L2 was not announced"
        assert back[hashes[i]]["token_ids"] == tokens[i * chunk:(i + 1) * chunk]
        assert back[hashes[i]]["parent_block_hash"] == (None if i == 0 else hashes[i - 1])

    # A clear (allowed over the ipc endpoint): removals, then "cleared".
    wait_l2_idle(client)
    assert client.call(OP_CLEAR) is None
    events, cursor = read_all(client, cursor)
    assert events[-1]["kind"] == "cleared", events[-3:]

    # The same story on the PUB socket, in vLLM's format, gapless. What went
    # out before the subscription took (the first handshake clears) comes
    # from replay, as vLLM's consumers do; the rest up to this clear live.
    published = receive_published(sub, lambda got: len(got) > 0)
    published = [p for p in replay(zmq_ctx, server.replay_url, 0) if p[0] < published[0][0]] + published
    published += receive_published(
        sub, lambda got: cleared_events(published + got) >= handshake_clears + 1)
    seqs = sorted({seq for seq, _ in published})
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "a gap in seq"
    vllm = [e for _, e in published]
    stored_cpu = [e for e in vllm if e["type"] == "BlockStored" and e["medium"] == "CPU"]
    int_hashes = [int.from_bytes(h[-8:], "big") for h in hashes]
    assert [e["block_hashes"][0] for e in stored_cpu[:CHUNKS]] == int_hashes
    assert stored_cpu[0]["parent_block_hash"] is None
    assert stored_cpu[1]["parent_block_hash"] == int_hashes[0]
    assert stored_cpu[0]["token_ids"] == tokens[:chunk] and stored_cpu[0]["block_size"] == chunk
    assert any(e["type"] == "BlockStored" and e["medium"] == "STORAGE" for e in vllm)
    assert any(e["type"] == "BlockRemoved" and e["medium"] == "CPU" for e in vllm)
    assert vllm[-1]["type"] == "AllBlocksCleared"

    # A reader that falls more than the log's LOG_SIZE records behind is told
    # so, and resumes from the oldest record the log still holds.
    stale = cursor
    for n in range(LOG_SIZE // CHUNKS + 1):
        store_prompt(client, pool, instance_id, random_tokens(rng, CHUNKS * chunk), CHUNKS,
                     f"req-late{n}", rng)
        behind = poll(client, stale)
        if behind["lost"]:
            break
    assert behind["lost"] is True and behind["incarnation"] == incarnation
    assert behind["events"] and behind["events"][0]["seq"] > stale + 1
    events, cursor = read_all(client, behind["next_cursor"])
    # One ahead of the log (a cursor of an earlier incarnation): lost,
    # nothing, and pointed at the log's end. Records may still be appended
    # after read_all returned (the L2 write-behind's STORAGE records, the
    # evictor's removals run on their own threads), so the end is `cursor` or
    # later, never the stale cursor, and it reads on without loss.
    ahead = poll(client, cursor + 1000)
    assert ahead["lost"] is True and ahead["events"] == []
    assert cursor <= ahead["next_cursor"] < cursor + 1000, (cursor, ahead["next_cursor"])
    assert poll(client, ahead["next_cursor"])["lost"] is False
    assert client.call(OP_PING) is True
    sub.close(0)
    client.close()


def test_bad_poll_arguments_are_answered(server, zmq_ctx):
    client = Client(zmq_ctx, server.url)
    reply = client.request(OP_POLL_KV_EVENTS, MODEL, -1, 10)
    assert reply.error is not None and reply.value["enabled"] is False
    reply = client.request(OP_POLL_KV_EVENTS, MODEL, 0, 0)
    assert reply.error is not None
    reply = client.request(OP_POLL_KV_EVENTS, MODEL)  # too few payloads
    assert reply.error is not None
    assert client.call(OP_PING) is True
    client.close()


# --------------------------------------------------------------------------- streams
#
# subscribe_kv_events as the reference's client drives it: its transport
# (lmcache/v1/multiprocess/transport/zmq_impl/mq.py with RpcSpec.streaming,
# and futures.MessagingStream) sends the request like any other, [uid,
# operation name, payloads...] (instance_id, model_name, cursor, max_events:
# KVEventModule.subscribe_kv_events), then reads items [uid, operation,
# KVEventBatch] under that uid until the end marker [uid, operation] (no
# value frame); after each item it grants one credit with [uid, b"", b"ack"],
# and ends the stream early with [uid, b"", b"cancel"]. The server sends its
# status batch at once, and later batches only when it holds a credit and
# has records (or a loss) for the model.

OP_SUBSCRIBE = "subscribe_kv_events"


@pytest.fixture
def opened_streams():
    """Closes every stream a test opened, also when it fails: a stream left
    open would count in the next test's `kv_events.streams`."""
    streams = []

    class Opened:
        def add(self, stream):
            streams.append(stream)
            return stream

    yield Opened()
    for stream in streams:
        stream.close()


class EventStream:
    """One subscription on its own DEALER socket, as the reference client's
    MessagingStream consumer."""

    def __init__(self, ctx, url, instance_id, cursor, max_events=64, model=MODEL):
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(url)
        self.uid = msgpack.packb(0)
        self.op = msgpack.packb(OP_SUBSCRIBE)
        self.sock.send_multipart([self.uid, self.op] + [msgpack.packb(p) for p in
                                                        (instance_id, model, cursor, max_events)])

    def next(self, timeout_s=10.0):
        """The next item's KVEventBatch, or None for the end marker; raises on
        a timeout."""
        assert self.sock.poll(int(timeout_s * 1000), zmq.POLLIN), "no stream item"
        frames = self.sock.recv_multipart()
        assert frames[0] == self.uid and frames[1] == self.op, frames[:2]
        if len(frames) == 2:
            return None  # the end marker
        assert len(frames) == 3, f"a stream item has {len(frames)} frames: {frames}"
        batch = msgpack.unpackb(frames[2], raw=False)
        assert list(batch)[:5] == ["enabled", "incarnation", "next_cursor", "lost", "events"]
        return batch

    def nothing_within(self, seconds):
        return not self.sock.poll(int(seconds * 1000), zmq.POLLIN)

    def control(self, signal):
        self.sock.send_multipart([self.uid, b"", signal])

    def close(self):
        self.sock.close(0)


def test_get_experimental_lists_the_kv_event_stream(server, zmq_ctx):
    client = Client(zmq_ctx, server.url)
    assert "kv_event_stream" in client.call("get_experimental")
    client.close()


def test_a_stream_sends_one_batch_per_credit_in_order(server, zmq_ctx, opened_streams):
    client = Client(zmq_ctx, server.url)
    chunk = chunk_size(client)
    instance_id = new_instance_id()
    reg = register(client, instance_id)
    pool = map_pool(reg["shm_name"], reg["pool_size"])
    rng = np.random.default_rng(23)
    start = poll(client, 1 << 62)["next_cursor"]  # ahead of the log: its last record

    stream = opened_streams.add(EventStream(zmq_ctx, server.url, instance_id, start, max_events=5))
    status = stream.next()
    # The status batch is a page read from `start`: empty unless records were
    # appended since the poll (the previous test's L2 write-behind and the
    # evictor append on their own threads, later under a sanitizer).
    assert status["enabled"] is True and status["lost"] is False
    assert len(status["events"]) <= 5 and all(e["seq"] >= start for e in status["events"])
    assert status["incarnation"] == poll(client, 0)["incarnation"]

    tokens = random_tokens(rng, CHUNKS * chunk)
    store_prompt(client, pool, instance_id, tokens, CHUNKS, "req-stream", rng)
    assert stream.nothing_within(0.3), "a batch went out without a credit"

    streamed = list(status["events"])
    cursor = status["next_cursor"] if streamed else start
    def stored_cpu():  # the pool is small: the store also evicts older chunks
        return [e for e in streamed if e["kind"] == "stored" and e["medium"] == "CPU"]

    while len(stored_cpu()) < CHUNKS:
        stream.control(b"ack")
        batch = stream.next()
        assert batch is not None and batch["lost"] is False
        assert 0 < len(batch["events"]) <= 5, "never an empty batch, never over max_events"
        assert batch["next_cursor"] > cursor
        cursor = batch["next_cursor"]
        streamed += batch["events"]
    seqs = [e["seq"] for e in streamed]
    assert seqs == sorted(set(seqs)), "records repeated or out of order"
    # The same records a poll of the same range returns, field for field.
    polled, _ = read_all(client, start)
    assert streamed == polled[:len(streamed)]
    assert [e["token_ids"] for e in stored_cpu()] == [tokens[i * chunk:(i + 1) * chunk] for i in range(CHUNKS)]

    # A cancel ends it with the end marker; a late control gets no reply.
    stream.control(b"cancel")
    assert stream.next() is None
    stream.control(b"ack")
    assert stream.nothing_within(0.3)
    assert client.call(OP_PING) is True
    stream.close()
    client.close()


def test_a_newer_subscription_a_close_and_bad_arguments(server, zmq_ctx, opened_streams):
    client = Client(zmq_ctx, server.url)
    instance_id = new_instance_id()
    opened = stats(client)["kv_events"]["streams_opened"]

    first = opened_streams.add(EventStream(zmq_ctx, server.url, instance_id, 0))
    assert first.next()["enabled"] is True
    # The worker reconnects and subscribes again: the older stream ends.
    second = opened_streams.add(EventStream(zmq_ctx, server.url, instance_id, 0))
    assert second.next()["enabled"] is True
    assert first.next() is None
    first.close()

    # A client that goes away with its stream open: the server lets go of it.
    second.close()
    deadline = time.monotonic() + 10
    while stats(client)["kv_events"]["streams"] != 0:
        assert time.monotonic() < deadline, stats(client)["kv_events"]
        time.sleep(0.05)
    assert stats(client)["kv_events"]["streams_opened"] == opened + 2

    # Bad arguments (the reference's ValueError): nil plus the error frame,
    # which ends the stream at its client; the server serves on.
    for cursor, max_events in ((-1, 16), (0, 0), (0, 1025)):
        reply = client.request(OP_SUBSCRIBE, instance_id, MODEL, cursor, max_events)
        assert reply.value is None and reply.error["code"] == 100, reply
    assert client.call(OP_PING) is True
    client.close()
