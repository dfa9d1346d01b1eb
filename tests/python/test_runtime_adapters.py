"""L2 tiers changed at runtime (issue 44, section 5) on the real server, with
the reference's wire messages: two workers store prompts into a pool far
smaller than what they store and read older ones back (so lookups load
from the fs tiers), while the test swaps two fs tiers in and out of the
cascade over HTTP, over and over: each DELETE drains, the cascade never
empties, and every chunk a worker is handed is the one it stored, byte for
byte; at the end the figures count every change and nothing is left
draining."""

import threading
import time

import numpy as np

from mp_client import (Client, chunk_size, free_tcp_ports, http_json, lookup_l2, map_pool,
                       new_instance_id, random_tokens, register, retrieve, start_server, stats,
                       store_prompt)

PROMPT_CHUNKS = 4
PROMPTS_PER_WORKER = 96


def fs_adapter(name, path):
    return {"type": "fs", "name": name, "base_path": str(path)}


def test_tiers_swapped_under_traffic_lose_and_corrupt_nothing(binary, tmp_path, zmq_ctx):
    url_port, http_port = free_tcp_ports(2)
    url = f"tcp://127.0.0.1:{url_port}"
    disk_a, disk_b = tmp_path / "a", tmp_path / "b"
    # 24 MiB of L1 against 2 x 96 prompts of 1 MiB: most reads come from L2.
    server = start_server(binary, url, tmp_path / "server.log",
                          ["--l1-size-gb", str(24 / 1024), "--http-port", str(http_port),
                           "--http-admin-open", "--l2-fs-root", str(tmp_path), "--l2-adapter",
                           '{"type":"fs","name":"disk-a","base_path":"%s"}' % disk_a])
    try:
        failures = []
        checked = {"chunks": 0, "l2_lookups": 0}
        lock = threading.Lock()

        def worker(seed):
            try:
                client = Client(zmq_ctx, url)
                instance_id = new_instance_id()
                reg = register(client, instance_id)
                pool = map_pool(reg["shm_name"], reg["pool_size"])
                rng = np.random.default_rng(seed)
                chunk = chunk_size(client)
                stored = []
                for p in range(PROMPTS_PER_WORKER):
                    tokens = random_tokens(rng, PROMPT_CHUNKS * chunk)
                    patterns = store_prompt(client, pool, instance_id, tokens, PROMPT_CHUNKS,
                                            f"w{seed}-store-{p}", rng)
                    stored.append((tokens, patterns))
                    # An older prompt back: from L1, or loaded from a tier.
                    tokens, patterns = stored[int(rng.integers(0, len(stored)))]
                    request = f"w{seed}-read-{p}"
                    hit = lookup_l2(client, tokens, request, timeout_s=60)
                    if hit == 0:
                        continue
                    data = retrieve(client, pool, instance_id, tokens, hit, request)
                    for index in range(hit):
                        assert np.array_equal(data[index], patterns[index]), (seed, p, index)
                    with lock:
                        checked["chunks"] += hit
                        checked["l2_lookups"] += 1
                client.close()
            except Exception as e:  # reported by the main thread
                failures.append(f"worker {seed}: {e!r}")

        workers = [threading.Thread(target=worker, args=(seed,)) for seed in (1, 2)]
        for t in workers:
            t.start()
        # Swap: b joins in front, a leaves, a joins in front, b leaves, ...
        present, absent = ("disk-a", disk_a), ("disk-b", disk_b)
        changes = 0
        while any(t.is_alive() for t in workers):
            joined = http_json(http_port, "POST", "/config/adapters?position=1",
                               fs_adapter(absent[0], absent[1]))
            assert joined["name"] == absent[0] and joined["position"] == 1, joined
            time.sleep(0.05)
            removed = http_json(http_port, "DELETE", f"/config/adapters/{present[0]}")
            assert removed["status"] == "removed", removed
            present, absent = absent, present
            changes += 1
            cascade = http_json(http_port, "GET", "/config/adapters")
            assert [a["name"] for a in cascade["adapters"]] == [present[0]], cascade
            assert cascade["draining"] == [], cascade
            time.sleep(0.05)
        for t in workers:
            t.join()
        assert not failures, failures
        assert changes >= 4, changes
        assert checked["chunks"] > 0, checked

        client = Client(zmq_ctx, url)
        s = stats(client)
        assert s["l2"]["cascade"] == {"added": changes, "removed": changes, "draining": 0}, \
            s["l2"]["cascade"]
        assert s["l2"]["prefetch"]["loaded_chunks"] > 0, s["l2"]["prefetch"]
        assert [a["name"] for a in s["l2"]["adapters"]] == [present[0]]
        client.close()
    finally:
        assert server.stop() == 0, server.log()
