"""The reference's per-request load controls (its kv_load_policy design,
lmcache/v1/multiprocess/kv_load_policy.py) on the real server, through the
reference's framing: a prompt stored only in an fs tier (--l2-store-policy
skip_l1), then looked up with the request_configs entries the reference
defines, with the values its own tests send (tests/v1/multiprocess/
test_lookup_load_policy.py: lmcache.skip_load true, the hint
lmcache.hint.engine_computed_tokens an int):
- lmcache.skip_load: a miss, nothing loaded from the tier, nothing locked;
- the hint: the chunks the engine holds whole count as hits but are never
  loaded (a worker that asks for one anyway gets a clean failure); the
  chunks after them are, and come back byte for byte;
- without either: every chunk loads, byte for byte."""

import time

import numpy as np

from mp_client import (NOT_FOUND, OP_PREPARE_RETRIEVE, Client, chunk_size, make_key, free_tcp_port, lookup_l2, map_pool, new_instance_id,
                       random_tokens, register, retrieve, start_server, stats, store_prompt)

CHUNKS = 4


def wait_until(what, predicate, timeout_s=30):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"after {timeout_s} s: not {what}"
        time.sleep(0.02)


def test_skip_load_and_the_engine_hint_decide_what_is_loaded(binary, tmp_path, zmq_ctx):
    url = f"tcp://127.0.0.1:{free_tcp_port()}"
    server = start_server(binary, url, tmp_path / "server.log",
                          ["--l1-size-gb", "0.0625", "--l2-store-policy", "skip_l1",
                           "--l2-adapter",
                           '{"type":"fs","base_path":"%s"}' % (tmp_path / "disk")])
    try:
        client = Client(zmq_ctx, url)
        instance_id = new_instance_id()
        reg = register(client, instance_id)
        pool = map_pool(reg["shm_name"], reg["pool_size"])
        chunk = chunk_size(client)
        rng = np.random.default_rng(63)
        tokens = random_tokens(rng, CHUNKS * chunk)
        patterns = store_prompt(client, pool, instance_id, tokens, CHUNKS, "store", rng)
        wait_until("in the fs tier and out of L1",
                   lambda: stats(client)["l2"]["store"]["stored"] == CHUNKS
                   and stats(client)["l1"]["resident_objects"] == 0)

        def prefetch():
            return stats(client)["l2"]["prefetch"]

        def tier_reads():  # objects read from the fs tier
            return stats(client)["l2"]["adapters"][0]["loaded_objects"]

        # skip_load: a miss; the tier is not even asked.
        hit = lookup_l2(client, tokens, "skip", timeout_s=30,
                        request_configs={"lmcache.skip_load": True, "lmcache.skip_save": True})
        assert hit == 0
        s = stats(client)
        assert s["l2"]["adapters"][0]["loaded_objects"] == 0, s["l2"]["adapters"][0]
        assert s["l1"]["resident_objects"] == 0
        assert s["lookup"]["skip_load_lookups"] == 1, s["lookup"]

        # The engine holds 2 chunks and a bit: chunks 0-1 count, only 2-3 load.
        hint = {"lmcache.hint.engine_computed_tokens": 2 * chunk + 5}
        assert lookup_l2(client, tokens, "hinted", timeout_s=30, request_configs=hint) == CHUNKS
        assert tier_reads() == 2
        assert prefetch()["engine_held_chunks"] == 2, prefetch()
        assert stats(client)["l1"]["resident_objects"] == 2
        data = retrieve(client, pool, instance_id, tokens, CHUNKS, "hinted", first_chunk=2)
        for i, got in enumerate(data, start=2):
            assert np.array_equal(got, patterns[i]), f"chunk {i} differs"
        # A worker that asks for a held chunk anyway: it was never loaded, so
        # a clean failure, and nothing is left locked or staged.
        key = make_key(tokens, 0, 2 * chunk, "hinted")
        reply = client.request(OP_PREPARE_RETRIEVE, key, instance_id)
        assert reply.value["success"] is False and reply.error["code"] == NOT_FOUND, reply
        assert stats(client)["l1"]["locked_objects"] == 0

        # No controls: chunks 0-1 load now (2-3 are in L1), all byte for byte.
        assert lookup_l2(client, tokens, "plain", timeout_s=30) == CHUNKS
        assert tier_reads() == 4
        data = retrieve(client, pool, instance_id, tokens, CHUNKS, "plain")
        for i, got in enumerate(data):
            assert np.array_equal(got, patterns[i]), f"chunk {i} differs"
        s = stats(client)
        assert s["lookup"]["engine_hinted_lookups"] == 1, s["lookup"]
        assert s["lookup"]["engine_held_tokens"] == 2 * chunk, s["lookup"]
        assert s["l1"]["locked_objects"] == 0, s["l1"]
        client.close()  # the worker departs: the drain does not wait for it
    finally:
        server.stop()


def start_with_tier(binary, tmp_path, name, adapter, rate):
    url = f"tcp://127.0.0.1:{free_tcp_port()}"
    return start_server(binary, url, tmp_path / f"{name}.log",
                        ["--l1-size-gb", "0.0625", "--l2-store-policy", "skip_l1",
                         "--prefill-tokens-per-second", f"*={rate}", "--l2-adapter", adapter])


def store_two_prompts(client, instance_id, pool):
    chunk = chunk_size(client)
    rng = np.random.default_rng(64)
    prompts = [random_tokens(rng, CHUNKS * chunk) for _ in range(2)]
    for i, tokens in enumerate(prompts):
        store_prompt(client, pool, instance_id, tokens, CHUNKS, f"store-{i}", rng)
    wait_until("in the tier and out of L1",
               lambda: stats(client)["l2"]["store"]["stored"] == 2 * CHUNKS
               and stats(client)["l1"]["resident_objects"] == 0)
    return prompts


def test_a_tier_slower_than_recomputing_is_declined_and_a_fast_one_loads(binary, tmp_path,
                                                                          zmq_ctx):
    """--prefill-tokens-per-second: at 10,000 tokens/s a 256-token chunk takes
    25.6 ms to recompute. Behind the fault adapter's 300 ms per call (4
    objects a call: 75 ms an object) the first lookup loads (nothing is
    measured yet) and the second is declined. A plain fs tier (well under a
    millisecond an object) loads both, at 1,000 tokens/s (256 ms a chunk: a
    margin that a slow sanitizer build on a busy machine keeps)."""
    fs = '{"type":"fs","base_path":"%s"}'
    throttled = ('{"type":"fault_inject","delay_ms":300,"inner":%s}'
                 % (fs % (tmp_path / "slow-disk")))
    for name, adapter, rate, declines in (("slow", throttled, 10000, True),
                                          ("fast", fs % (tmp_path / "disk"), 1000, False)):
        server = start_with_tier(binary, tmp_path, name, adapter, rate)
        try:
            client = Client(zmq_ctx, server.url)
            instance_id = new_instance_id()
            reg = register(client, instance_id)
            pool = map_pool(reg["shm_name"], reg["pool_size"])
            prompts = store_two_prompts(client, instance_id, pool)
            assert lookup_l2(client, prompts[0], "first", timeout_s=30) == CHUNKS, name
            second = lookup_l2(client, prompts[1], "second", timeout_s=30)
            s = stats(client)["l2"]
            tier = s["adapters"][0]
            assert second == (0 if declines else CHUNKS), (name, tier)
            declined = CHUNKS if declines else 0
            assert s["prefetch"]["declined_slower_than_recompute"] == declined, (name, tier)
            assert tier["declined_slower_than_recompute"] == declined, (name, tier)
            assert tier["loaded_objects"] == 2 * CHUNKS - declined, (name, tier)
            assert (tier["load_seconds_per_object"] > 256 / rate) == declines, (name, tier)
            client.close()
        finally:
            server.stop()
