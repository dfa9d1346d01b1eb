"""GET /cache/objects over 100,000 objects (issue 44, section 2), on the real
server with the reference's wire messages: a walk of pages lists every
object exactly once, also while another worker stores 20,000 more between
and during the pages (each of those at most once), and its keys are the
reference's encoded form, which DELETE /cache/objects takes back."""

import threading

from mp_client import (OP_COMMIT_STORE, OP_PREPARE_STORE, Client, free_tcp_ports, make_key,
                       new_instance_id, random_tokens, register, start_server, stats, http_json)

import numpy as np

# At --chunk-size 1: 40 objects of 1 KiB per prompt. A store locks the
# shards of its keys at once, and TSan's deadlock detector cannot follow a
# thread holding 64 locks (the table has 64 shards): a prompt of 1,000
# objects made the TSan build's server abort.
PROMPT_TOKENS = 40


def store_prompts(client, instance_id, rng, prompts, tag, first_done=None):
    for p in range(prompts):
        if p == 1 and first_done is not None:
            first_done.set()
        tokens = random_tokens(rng, PROMPT_TOKENS)
        key = make_key(tokens, 0, PROMPT_TOKENS, f"{tag}-{p}")
        prepared = client.call(OP_PREPARE_STORE, key, instance_id)
        assert len(prepared["context"]["slots"]) == PROMPT_TOKENS, prepared.keys()
        # The bytes do not matter to a listing: committed as they are.
        assert client.call(OP_COMMIT_STORE, key, instance_id, b"") is True


def walk(port, page_size):
    """Every entry of a walk of pages, in order."""
    entries, token, pages = [], None, 0
    while True:
        path = f"/cache/objects?page_size={page_size}"
        if token:
            path += f"&page_token={token}"
        page = http_json(port, "GET", path)
        assert page["adapter"] == "l1"
        entries.extend(page["entries"])
        pages += 1
        token = page["next_page_token"]
        if token is None:
            return entries, pages


def identity(entry):
    k = entry["key"]
    return (k["chunk_hash_hex"], k["model_name"], k["kv_rank"], k["object_group_id"],
            k["cache_salt"], k["layout_namespace"], k["tags"])


def test_a_walk_of_pages_lists_100000_objects_once_each_under_concurrent_stores(
        binary, tmp_path, zmq_ctx):
    url_port, http_port = free_tcp_ports(2)
    url = f"tcp://127.0.0.1:{url_port}"
    server = start_server(binary, url, tmp_path / "server.log",
                          ["--l1-size-gb", "0.25", "--chunk-size", "1", "--l1-align-bytes", "1024",
                           "--http-port", str(http_port), "--http-admin-open"])
    try:
        client = Client(zmq_ctx, url)
        instance_id = new_instance_id()
        register(client, instance_id)
        store_prompts(client, instance_id, np.random.default_rng(7), 100_000 // PROMPT_TOKENS,
                      "base")
        assert stats(client)["l1"]["resident_objects"] == 100_000

        first, pages = walk(http_port, 5000)
        assert pages == 20
        baseline = [identity(e) for e in first]
        assert len(baseline) == 100_000 and len(set(baseline)) == 100_000
        assert all(e["size_bytes"] == 1024 for e in first)

        # Another worker stores 20 more prompts while the pages are read.
        failures = []
        storing = threading.Event()

        def more():
            try:
                other = Client(zmq_ctx, url)
                other_id = new_instance_id()
                register(other, other_id)
                store_prompts(other, other_id, np.random.default_rng(8), 20_000 // PROMPT_TOKENS,
                              "more", storing)
                other.close()
            except Exception as e:  # reported below
                failures.append(repr(e))

        writer = threading.Thread(target=more)
        writer.start()
        assert storing.wait(60)
        during, pages = walk(http_port, 1000)
        writer.join()
        assert not failures, failures
        listed = [identity(e) for e in during]
        assert len(set(listed)) == len(listed), "an object was listed twice"
        missing = set(baseline) - set(listed)
        assert not missing, f"{len(missing)} objects that stayed were skipped"
        assert 100_000 + PROMPT_TOKENS <= len(listed) <= 120_000
        assert stats(client)["l1"]["resident_objects"] == 120_000
        assert stats(client)["eviction"]["evicted_objects"] == 0

        # The keys as listed are what DELETE takes.
        gone = http_json(http_port, "DELETE", "/cache/objects",
                    {"keys": [e["key"] for e in first[:10_000]], "tier": "l1"})
        assert gone["deleted"] == 10_000 and gone["skipped"] == 0, gone
        after, _ = walk(http_port, 5000)
        assert len(after) == 110_000
        assert not {identity(e) for e in first[:10_000]} & {identity(e) for e in after}
        client.close()
    finally:
        assert server.stop() == 0, server.log()
