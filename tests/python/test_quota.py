"""Per-tenant quotas (issue 44, section 1) on the real server, with the
reference's wire messages: three tenants store three times their quotas at
once from three workers, into a pool their quotas nearly fill, while the
test reads GET /quota without pause. No tenant ever holds more than its
quota; every eviction is of the storing tenant's own objects (the pool's
eviction never runs, nothing is evicted on demand); each tenant ends up
holding about its quota (nobody took its room) with its newest prompt
intact, byte for byte; the figures of GET /quota, the stats reply and
/metrics agree."""

import threading
import urllib.request

import numpy as np

from mp_client import (OP_COMMIT_RETRIEVE, OP_COMMIT_STORE, OP_PREPARE_RETRIEVE, OP_PREPARE_STORE,
                       Client, chunk_size, free_tcp_ports, http_json, lookup, make_key, map_pool,
                       new_instance_id, random_tokens, register, slot_view, start_server, stats)

MIB = 1 << 20
TENANTS = {"tenant-a": 12 * MIB, "tenant-b": 16 * MIB, "tenant-c": 20 * MIB}
PROMPT_CHUNKS = 4


def store_salted(client, pool, instance_id, tokens, salt, rng):
    """prepare_store + patterns + commit_store of a prompt of `salt`; returns
    the patterns of the chunks the server gave slots to."""
    chunk = chunk_size(client)
    key = make_key(tokens, 0, PROMPT_CHUNKS * chunk, f"{salt}-{tokens[0]}", cache_salt=salt)
    prepared = client.call(OP_PREPARE_STORE, key, instance_id)
    context = prepared["context"]
    patterns = {}
    for index, slot in zip(context["chunk_indices"], context["slots"]):
        view = slot_view(pool, slot)
        patterns[index] = rng.integers(0, 2**16, size=view.shape, dtype=np.uint16)
        view[...] = patterns[index]
    pool.flush()
    assert client.call(OP_COMMIT_STORE, key, instance_id, b"") is True
    return patterns


def test_three_tenants_under_pressure_each_keep_to_their_own_quota(binary, tmp_path, zmq_ctx):
    url_port, http_port = free_tcp_ports(2)
    url = f"tcp://127.0.0.1:{url_port}"
    # 64 MiB: the quotas (48 MiB) fill it to just under the 0.8 trigger.
    server = start_server(binary, url, tmp_path / "server.log",
                          ["--l1-size-gb", str(64 / 1024), "--http-port", str(http_port),
                           "--http-admin-open"])
    try:
        for salt, limit in TENANTS.items():
            reply = http_json(http_port, "PUT", f"/quota/{salt}", {"limit_gb": limit / (1 << 30)})
            assert reply == {"cache_salt": salt, "limit_gb": limit / (1 << 30), "status": "ok"}

        failures = []
        last_prompt = {}

        def tenant(salt):
            try:
                client = Client(zmq_ctx, url)
                instance_id = new_instance_id()
                reg = register(client, instance_id)
                pool = map_pool(reg["shm_name"], reg["pool_size"])
                rng = np.random.default_rng(abs(hash(salt)) % (1 << 32))
                chunk = chunk_size(client)
                object_bytes = 2 * 2 * chunk * 128 * 2
                prompts = 3 * TENANTS[salt] // (PROMPT_CHUNKS * object_bytes)
                for _ in range(prompts):
                    tokens = random_tokens(rng, PROMPT_CHUNKS * chunk)
                    patterns = store_salted(client, pool, instance_id, tokens, salt, rng)
                    last_prompt[salt] = (tokens, patterns)
                client.close()
            except Exception as e:  # reported by the main thread
                failures.append(f"{salt}: {e!r}")

        threads = [threading.Thread(target=tenant, args=(salt,)) for salt in TENANTS]
        for t in threads:
            t.start()
        samples = 0
        while any(t.is_alive() for t in threads):
            users = http_json(http_port, "GET", "/quota")["users"]
            for salt, limit in TENANTS.items():
                used = users[salt]["usage_bytes"]
                assert used <= limit, f"{salt} holds {used} bytes, over its quota {limit}"
            samples += 1
        for t in threads:
            t.join()
        assert not failures, failures
        assert samples > 0

        client = Client(zmq_ctx, url)
        instance_id = new_instance_id()
        reg = register(client, instance_id)
        pool = map_pool(reg["shm_name"], reg["pool_size"])
        s = stats(client)
        quota = s["quota"]
        assert quota["quota_evictions"] > 0, quota
        # Every eviction was of the storing tenant's own objects.
        assert s["eviction"]["evicted_objects"] == quota["quota_evictions"], s["eviction"]
        assert s["eviction"]["on_demand_evictions"] == 0, s["eviction"]
        assert s["eviction"]["background_evicted_objects"] == 0, s["eviction"]
        users = http_json(http_port, "GET", "/quota")["users"]
        object_bytes = 2 * 2 * chunk_size(client) * 128 * 2
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics").read().decode()
        for salt, limit in TENANTS.items():
            used = users[salt]["usage_bytes"]
            # Its quota was its own: it holds about all of it.
            assert limit - PROMPT_CHUNKS * object_bytes <= used <= limit, (salt, used)
            assert quota["tenants"][salt]["used_bytes"] == used
            assert quota["tenants"][salt]["quota_evicted_objects"] > 0
            assert f'lmcache_mp_quota_used_bytes{{tenant="{salt}"}} {used}' in metrics
            # Its newest prompt is whole and intact.
            tokens, patterns = last_prompt[salt]
            assert len(patterns) == PROMPT_CHUNKS
            chunk = chunk_size(client)
            assert lookup(client, tokens, f"check-{salt}", cache_salt=salt) == PROMPT_CHUNKS
            key = make_key(tokens, 0, PROMPT_CHUNKS * chunk, f"check-{salt}", cache_salt=salt)
            prepared = client.call(OP_PREPARE_RETRIEVE, key, instance_id)
            assert prepared["success"] is True, prepared
            for index, slot in enumerate(prepared["context"]["slots"]):
                assert np.array_equal(slot_view(pool, slot), patterns[index]), (salt, index)
            assert client.call(OP_COMMIT_RETRIEVE, key, instance_id) is True
        client.close()
    finally:
        assert server.stop() == 0, server.log()
