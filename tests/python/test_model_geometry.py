"""One server, models of different chunk geometries (issue 63): the default
model at --chunk-size 256, a hybrid-like model at 640 and an MLA model at
384 (--model-chunk-size), each reached over the endpoint bound for it
(--model-url), through the reference's framing: get_chunk_size (no
argument, spec 3.6) answers each endpoint's model's size, and every key,
registration and store is the reference's msgspec map (spec 4.1, 4.2) for
that model. The three store, look up and retrieve at once, byte for byte,
from one pool; a key sent over an endpoint that advertised another size is
refused by name, never hashed at a size its client does not know."""

import threading
import time

import numpy as np

import mp_client
from mp_client import (DTYPE, HIDDEN_DIM, MODEL, NUM_LAYERS, OP_COMMIT_RETRIEVE, OP_COMMIT_STORE,
                       OP_LOOKUP, OP_PREPARE_RETRIEVE, OP_PREPARE_STORE,
                       OP_REGISTER_ENGINE_CONTEXT, Client, check_slots_disjoint, chunk_size,
                       free_tcp_ports, http_json, make_key, map_pool, new_instance_id, random_tokens,
                       start_server, stats)

LAYOUT_MISMATCH = 206  # include/lmcache/status.h
HYBRID = "zai-org/GLM-5.3-Flash"  # its KV groups need multiples of 640 (LMCache #5217)
MLA = "deepseek-ai/DeepSeek-V3"
SIZES = {MODEL: 256, HYBRID: 640, MLA: 384}
MLA_MODELS = {MLA}


def register(client, instance_id, model):
    """The reference's registration of `model` (spec 4.2), use_mla as it has it."""
    return mp_client.register(client, instance_id, model, use_mla=model in MLA_MODELS)


def shape_of(model, chunk):
    if model in MLA_MODELS:
        return [NUM_LAYERS, chunk, HIDDEN_DIM]
    return [2, NUM_LAYERS, chunk, HIDDEN_DIM]


def view(pool, slot):
    raw = pool[slot["offset"]:slot["offset"] + slot["length"]]
    return raw.view(np.uint16).reshape(slot["shape"])


def store(client, pool, instance_id, tokens, model, request_id, rng, salt=""):
    """prepare_store, random bytes into every slot, commit_store, of the
    whole prompt at `model`'s chunk size; returns the bytes by chunk."""
    chunk = SIZES[model]
    chunks = len(tokens) // chunk
    key = make_key(tokens, 0, chunks * chunk, request_id, model=model, cache_salt=salt)
    prepared = client.call(OP_PREPARE_STORE, key, instance_id)["context"]
    assert prepared["chunk_indices"] == list(range(chunks)), prepared
    check_slots_disjoint(prepared["slots"])
    patterns = []
    for slot in prepared["slots"]:
        assert slot["shape"] == shape_of(model, chunk), slot
        patterns.append(rng.integers(0, 2**16, size=slot["shape"], dtype=np.uint16))
        view(pool, slot)[...] = patterns[-1]
    pool.flush()
    assert client.call(OP_COMMIT_STORE, key, instance_id, b"") is True
    return patterns


def look_up(client, tokens, model, request_id, salt="", timeout_s=60):
    """The scheduler's lookup (worker_id nil) at `model`'s chunk size, then
    query_prefetch_status until it answers a count (an L2 or peer load may
    be in flight)."""
    return mp_client.lookup_l2(client, tokens, request_id, timeout_s, model=model,
                               cache_salt=salt, chunk=SIZES[model])


def retrieve(client, pool, instance_id, tokens, model, request_id, chunks, salt=""):
    """prepare_retrieve of chunks [0, chunks) under the lookup's locks, the
    bytes copied out, commit_retrieve."""
    key = make_key(tokens, 0, chunks * SIZES[model], request_id, model=model, cache_salt=salt)
    got = client.call(OP_PREPARE_RETRIEVE, key, instance_id)
    assert got["success"] is True, got
    data = [view(pool, slot).copy() for slot in got["context"]["slots"]]
    assert client.call(OP_COMMIT_RETRIEVE, key, instance_id) is True
    return data


def worker_of(zmq_ctx, url, model, expected_chunk=None):
    client = Client(zmq_ctx, url)
    chunk = chunk_size(client)
    expected_chunk = expected_chunk or SIZES[model]
    assert chunk == expected_chunk, f"{model}: get_chunk_size answered {chunk}"
    instance_id = new_instance_id()
    reg = register(client, instance_id, model)
    return client, instance_id, map_pool(reg["shm_name"], reg["pool_size"])


def serve_one_model(zmq_ctx, url, model, tokens, seed, rounds, failures):
    """A worker and its scheduler for `model`: each round stores the prompt's
    chunks with fresh bytes under a fresh salt, looks them up and retrieves
    them, comparing every byte."""
    try:
        client, instance_id, pool = worker_of(zmq_ctx, url, model)
        chunks = len(tokens) // SIZES[model]
        rng = np.random.default_rng(seed)
        for r in range(rounds):
            salt = f"round-{r}"
            patterns = store(client, pool, instance_id, tokens, model, f"{model}-{r}", rng, salt)
            hits = look_up(client, tokens, model, f"{model}-{r}-lookup", salt)
            assert hits == chunks, f"{model} round {r}: {hits} of {chunks} chunks hit"
            data = retrieve(client, pool, instance_id, tokens, model, f"{model}-{r}-lookup",
                            chunks, salt)
            for i, got in enumerate(data):
                assert np.array_equal(got, patterns[i]), f"{model} round {r}: chunk {i} differs"
        client.close()
    except BaseException as e:  # reported by the main thread
        failures.append(f"{model}: {e!r}")


def start(binary, tmp_path, ports, http_port=0):
    shared, hybrid, mla = (f"tcp://127.0.0.1:{p}" for p in ports)
    server = start_server(binary, shared, tmp_path / "server.log",
                          ["--l1-size-gb", "0.25", "--http-port", str(http_port),
                           "--model-chunk-size", f"{HYBRID}={SIZES[HYBRID]}",
                           "--model-chunk-size", f"{MLA}={SIZES[MLA]}",
                           "--model-url", f"{HYBRID}={hybrid}", "--model-url", f"{MLA}={mla}"])
    return server, {MODEL: shared, HYBRID: hybrid, MLA: mla}


def test_three_geometries_store_look_up_and_retrieve_at_once(binary, tmp_path, zmq_ctx):
    ports = free_tcp_ports(4)
    server, urls = start(binary, tmp_path, ports[:3], http_port=ports[3])
    try:
        # The operator sees each model's size: /status, and the flags in /config.
        status = http_json(ports[3], "GET", "/status")
        assert status["chunk_size"] == 256, status["chunk_size"]
        assert status["model_chunk_sizes"] == {HYBRID: 640, MLA: 384}, status["model_chunk_sizes"]
        flags = http_json(ports[3], "GET", "/config")["flags"]
        assert sorted(flags["--model-chunk-size"]["value"]) == sorted(
            [f"{HYBRID}=640", f"{MLA}=384"]), flags["--model-chunk-size"]
        assert len(flags["--model-url"]["value"]) == 2, flags["--model-url"]
        # One prompt for all three: cut at 256, 640 and 384 it is 15, 6 and 10 chunks.
        tokens = random_tokens(np.random.default_rng(63), 3840)
        failures = []
        threads = [threading.Thread(target=serve_one_model,
                                    args=(zmq_ctx, urls[m], m, tokens, seed, 4, failures))
                   for seed, m in enumerate(SIZES)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads), "a model's worker did not finish in 120 s"
        assert not failures, failures

        client = Client(zmq_ctx, urls[MODEL])
        s = stats(client)
        # 4 rounds of 15 + 6 + 10 objects, all resident in the one pool.
        assert s["l1"]["resident_objects"] == 4 * (15 + 6 + 10), s["l1"]
        assert s["l1"]["locked_objects"] == 0, s["l1"]
        info = client.call("server_info")
        assert info["chunk_size"] == 256
        assert info["model_chunk_sizes"] == {HYBRID: 640, MLA: 384}, info
        client.close()
    finally:
        server.stop()


def test_a_key_is_refused_where_its_chunk_size_was_not_advertised(binary, tmp_path, zmq_ctx):
    server, urls = start(binary, tmp_path, free_tcp_ports(3))
    try:
        tokens = random_tokens(np.random.default_rng(5), 1280)
        shared = Client(zmq_ctx, urls[MODEL])
        hybrid = Client(zmq_ctx, urls[HYBRID])
        assert chunk_size(shared) == 256 and chunk_size(hybrid) == 640

        # The hybrid model over the endpoint of every model (which said 256):
        # its lookup and its registration are refused, naming the way out.
        key = make_key(tokens, 0, 1280, "wrong-endpoint", worker_id=None, model=HYBRID)
        reply = shared.request(OP_LOOKUP, key, 1)
        assert reply.error is not None and reply.error["code"] == LAYOUT_MISMATCH, reply
        assert "--model-url" in reply.error["message"] and "640" in reply.error["message"], reply
        reply = shared.request(OP_REGISTER_ENGINE_CONTEXT, {
            "instance_id": new_instance_id(), "model_name": HYBRID, "world_size": 1,
            "block_size": 16, "num_layers": NUM_LAYERS, "hidden_dim_size": HIDDEN_DIM,
            "dtype_str": DTYPE, "use_mla": False, "num_physical_slots": None,
            "engine_group_infos": [], "group_hidden_dim_sizes": None, "group_layout_descs": None,
            "enable_l1_kvweave_quant": False})
        assert reply.error is not None and reply.error["code"] == LAYOUT_MISMATCH, reply

        # The default model over the hybrid model's endpoint (which said 640).
        key = make_key(tokens, 0, 1280, "other-model", worker_id=None, model=MODEL)
        reply = hybrid.request(OP_LOOKUP, key, 1)
        assert reply.error is not None and reply.error["code"] == LAYOUT_MISMATCH, reply

        # A store cut at 256 over the 640 endpoint: its range splits chunks.
        instance_id = new_instance_id()
        register(hybrid, instance_id, HYBRID)
        key = make_key(tokens, 0, 256, "misaligned", model=HYBRID)
        reply = hybrid.request(OP_PREPARE_STORE, key, instance_id)
        assert reply.error is not None and "640" in reply.error["message"], reply

        # Nothing was stored or left locked, and the server still serves.
        s = stats(shared)
        assert s["l1"]["resident_objects"] == 0 and s["l1"]["locked_objects"] == 0, s["l1"]
        shared.close()
        hybrid.close()
    finally:
        server.stop()


def test_startup_refuses_model_geometry_it_cannot_serve(binary, tmp_path):
    from mp_client import ServerStartError
    port = free_tcp_ports(2)
    url, other = f"tcp://127.0.0.1:{port[0]}", f"tcp://127.0.0.1:{port[1]}"
    cases = [
        (["--model-chunk-size", f"{HYBRID}=100"], "below --chunk-size"),
        (["--model-chunk-size", f"{HYBRID}=640", "--model-chunk-size", f"{HYBRID}=1280"],
         "named twice"),
        (["--model-chunk-size", f"{HYBRID}=six"], "not a number"),
        (["--model-url", f"{HYBRID}={other}"], "has no --model-chunk-size"),
        (["--model-chunk-size", f"{HYBRID}=640"], "no endpoint answers get_chunk_size with 640"),
    ]
    for i, (args, message) in enumerate(cases):
        log = tmp_path / f"refused-{i}.log"
        try:
            server = start_server(binary, url, log, args)
        except ServerStartError as e:
            assert message in str(e) + log.read_text(), (args, str(e))
        else:
            server.stop()
            raise AssertionError(f"{args} started")


def test_peers_share_the_models_they_cut_alike_and_only_those(binary, tmp_path, zmq_ctx):
    """Owner A and requester B cut the hybrid model at 640; requester C at
    512. B loads both models' prompts from A byte for byte; C loads the
    default model's, asks A nothing for the hybrid model (the keys it would
    send are cut otherwise), and /status names the model that differs."""
    import os

    from test_p2p_membership import peers, start_peer
    from test_p2p_owner import write_key
    from test_p2p_sharing import eventually

    key = write_key(tmp_path / "fleet.key", os.urandom(32))
    fleet_ports = free_tcp_ports(3)
    http_ports = free_tcp_ports(3)
    a_fleet = f"tcp://127.0.0.1:{fleet_ports[0]}"

    def node(name, i, hybrid_size, peers_of):
        sock = f"ipc://{tmp_path / (name + '-hybrid.sock')}"
        extra = ["--model-chunk-size", f"{HYBRID}={hybrid_size}", "--model-url", f"{HYBRID}={sock}",
                 "--p2p-lookup", "broadcast", "--p2p-lookup-timeout", "2"]
        if peers_of:
            extra += ["--p2p-peers", peers_of]
        return start_peer(tmp_path, name, key, fleet_ports[i], extra, http_port=http_ports[i]), sock

    servers = []
    try:
        (a, a_hybrid) = node("a", 0, 640, None)
        servers.append(a)
        (b, b_hybrid) = node("b", 1, 640, a_fleet)
        servers.append(b)
        (c, c_hybrid) = node("c", 2, 512, a_fleet)
        servers.append(c)
        eventually(lambda: peers(http_ports[1]).get(a_fleet, {}).get("state") == "ready",
                   "B sees A ready")
        seen_by_c = None

        def c_sees_a():
            nonlocal seen_by_c
            seen_by_c = peers(http_ports[2]).get(a_fleet, {})
            return seen_by_c.get("state") == "ready"
        eventually(c_sees_a, "C sees A ready")
        assert seen_by_c["chunk_sizes_differ"] == f"{HYBRID}: 512 here, 640 there", seen_by_c
        assert peers(http_ports[1])[a_fleet]["chunk_sizes_differ"] == ""

        rng = np.random.default_rng(7)
        tokens = random_tokens(rng, 2560)  # 10 chunks at 256, 4 at 640, 5 at 512
        workers = {}
        for name, server, sock in (("a", a, a_hybrid), ("b", b, b_hybrid), ("c", c, c_hybrid)):
            workers[name, MODEL] = worker_of(zmq_ctx, server.url, MODEL)
        SIZES_C = dict(SIZES, **{HYBRID: 512})
        workers["a", HYBRID] = worker_of(zmq_ctx, a_hybrid, HYBRID)
        workers["b", HYBRID] = worker_of(zmq_ctx, b_hybrid, HYBRID)
        stored = {}
        for i, m in enumerate((MODEL, HYBRID)):
            client, instance_id, pool = workers["a", m]
            stored[m] = store(client, pool, instance_id, tokens, m, f"on-a-{i}", rng)

        for m in (MODEL, HYBRID):  # B: both models, byte for byte from A
            client, instance_id, pool = workers["b", m]
            chunks = len(tokens) // SIZES[m]
            assert look_up(client, tokens, m, f"b-{m}") == chunks, m
            data = retrieve(client, pool, instance_id, tokens, m, f"b-{m}", chunks)
            for i, got in enumerate(data):
                assert np.array_equal(got, stored[m][i]), f"{m}: chunk {i} differs"

        def a_served():
            return stats(workers["a", MODEL][0])["p2p"]["served"]["lookups"]
        client, instance_id, pool = workers["c", MODEL]  # C: the default model is shared
        assert look_up(client, tokens, MODEL, "c-default") == 10
        data = retrieve(client, pool, instance_id, tokens, MODEL, "c-default", 10)
        assert all(np.array_equal(got, stored[MODEL][i]) for i, got in enumerate(data))
        # C's hybrid model (a worker of it registered there, so C would look
        # it up): A is not asked (its lookups served do not move).
        before = a_served()
        c_client, _, _ = worker_of(zmq_ctx, c_hybrid, HYBRID, SIZES_C[HYBRID])
        hits = mp_client.lookup_l2(c_client, tokens, "c-hybrid", 60, model=HYBRID)
        assert hits == 0
        assert a_served() == before, "C asked A for a model A cuts otherwise"
        # The default model still is asked of A (under a salt nobody stored,
        # so not from C's own L1): the count moves.
        assert look_up(workers["c", MODEL][0], tokens, MODEL, "c-elsewhere", salt="nobody") == 0
        assert a_served() > before
        c_client.close()
        for w in workers.values():
            w[0].close()
    finally:
        for s in servers:
            if s.proc.poll() is None:
                s.stop(timeout=60)


def test_an_l2_tier_holds_each_model_at_its_own_geometry(binary, tmp_path, zmq_ctx):
    """Stores go only to an fs tier (--l2-store-policy skip_l1); a lookup of
    each model loads its own objects back byte for byte."""
    ports = free_tcp_ports(2)
    shared, hybrid = (f"tcp://127.0.0.1:{p}" for p in ports)
    server = start_server(binary, shared, tmp_path / "server.log",
                          ["--l1-size-gb", "0.25", "--l2-store-policy", "skip_l1",
                           "--l2-adapter", '{"type":"fs","base_path":"%s"}' % (tmp_path / "disk"),
                           "--model-chunk-size", f"{HYBRID}={SIZES[HYBRID]}",
                           "--model-url", f"{HYBRID}={hybrid}"])
    try:
        tokens = random_tokens(np.random.default_rng(11), 2560)  # 10 chunks at 256, 4 at 640
        rng = np.random.default_rng(12)
        workers = {MODEL: worker_of(zmq_ctx, shared, MODEL), HYBRID: worker_of(zmq_ctx, hybrid, HYBRID)}
        stored = {}
        for m, (client, instance_id, pool) in workers.items():
            stored[m] = store(client, pool, instance_id, tokens, m, f"store-{m}", rng)
        client = workers[MODEL][0]
        deadline = time.monotonic() + 60
        while not (stats(client)["l2"]["store"]["stored"] == 14
                   and stats(client)["l1"]["resident_objects"] == 0):
            assert time.monotonic() < deadline, stats(client)["l2"]["store"]
            time.sleep(0.02)
        for m, (client, instance_id, pool) in workers.items():
            chunks = len(tokens) // SIZES[m]
            assert look_up(client, tokens, m, f"load-{m}") == chunks, m
            data = retrieve(client, pool, instance_id, tokens, m, f"load-{m}", chunks)
            for i, got in enumerate(data):
                assert np.array_equal(got, stored[m][i]), f"{m}: chunk {i} differs"
        assert stats(client)["l2"]["adapters"][0]["loaded_objects"] == 14
        for client, _, _ in workers.values():
            client.close()
    finally:
        server.stop()


def test_a_warm_restart_keeps_each_models_geometry(binary, tmp_path, zmq_ctx):
    """A successor with the same chunk sizes takes the pool over and serves
    the hybrid model's objects byte for byte; one that cuts the hybrid model
    otherwise is refused, naming the sizes."""
    import os

    import pytest

    from mp_client import ServerStartError
    shm_name = f"lmcache_l1_pool_geometry_{os.getpid()}"
    port = free_tcp_ports(1)[0]
    url = f"ipc://{tmp_path}/lmc.sock"
    hybrid = f"ipc://{tmp_path}/hybrid.sock"

    def args(size, extra=()):
        return ["--shm-name", shm_name, "--l1-size-gb", "0.25", "--port", str(port),
                "--drain-timeout-seconds", "0", "--model-chunk-size", f"{HYBRID}={size}",
                "--model-url", f"{HYBRID}={hybrid}", *extra]

    a = start_server(binary, url, tmp_path / "a.log", args(640))
    b = None
    try:
        tokens = random_tokens(np.random.default_rng(13), 2560)
        client, instance_id, pool = worker_of(zmq_ctx, hybrid, HYBRID)
        patterns = store(client, pool, instance_id, tokens, HYBRID, "before", np.random.default_rng(14))
        client.close()

        with pytest.raises(ServerStartError) as refused:
            start_server(binary, url, tmp_path / "refused.log", args(512, ["--takeover"]))
        assert "--model-chunk-size" in str(refused.value) and "=640" in str(refused.value), \
            str(refused.value)
        assert a.proc.poll() is None, a.log()

        b = start_server(binary, url, tmp_path / "b.log", args(640, ["--takeover"]))
        assert a.proc.wait(timeout=60) == 0, a.log()
        client, instance_id, pool = worker_of(zmq_ctx, hybrid, HYBRID)
        assert look_up(client, tokens, HYBRID, "after") == 4
        data = retrieve(client, pool, instance_id, tokens, HYBRID, "after", 4)
        for i, got in enumerate(data):
            assert np.array_equal(got, patterns[i]), f"chunk {i} differs after the takeover"
        client.close()
    finally:
        for server in (a, b):
            if server is not None and server.proc.poll() is None:
                server.stop(timeout=60)


def test_crash_recovery_serves_each_model_at_its_geometry_again(binary, tmp_path, zmq_ctx):
    """Both models' objects, journalled (--recover-pool), survive a SIGKILL:
    the server started again with the same sizes serves them byte for byte."""
    import os
    import signal

    shm_name = f"lmcache_l1_pool_geometry_crash_{os.getpid()}"
    url = f"ipc://{tmp_path}/lmc.sock"
    hybrid = f"ipc://{tmp_path}/hybrid.sock"
    args = ["--shm-name", shm_name, "--l1-size-gb", "0.25", "--recover-pool",
            "--drain-timeout-seconds", "0", "--model-chunk-size", f"{HYBRID}={SIZES[HYBRID]}",
            "--model-url", f"{HYBRID}={hybrid}"]
    first = start_server(binary, url, tmp_path / "first.log", args)
    second = None
    try:
        tokens = random_tokens(np.random.default_rng(21), 2560)
        rng = np.random.default_rng(22)
        stored = {}
        for m, at in ((MODEL, url), (HYBRID, hybrid)):
            client, instance_id, pool = worker_of(zmq_ctx, at, m)
            stored[m] = store(client, pool, instance_id, tokens, m, f"before-{m}", rng)
            client.close()
        client = Client(zmq_ctx, url)
        deadline = time.monotonic() + 60
        while stats(client)["restart"]["journal_sealed"] < 14:  # checksummed: recoverable
            assert time.monotonic() < deadline, stats(client)["restart"]
            time.sleep(0.05)
        client.close()
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(timeout=30)

        second = start_server(binary, url, tmp_path / "second.log", args)
        client = Client(zmq_ctx, url)
        assert stats(client)["restart"]["recovered_objects"] == 14, stats(client)["restart"]
        client.close()
        for m, at in ((MODEL, url), (HYBRID, hybrid)):
            client, instance_id, pool = worker_of(zmq_ctx, at, m)
            chunks = len(tokens) // SIZES[m]
            assert look_up(client, tokens, m, f"after-{m}") == chunks, m
            data = retrieve(client, pool, instance_id, tokens, m, f"after-{m}", chunks)
            for i, got in enumerate(data):
                assert np.array_equal(got, stored[m][i]), f"{m}: chunk {i} differs after recovery"
            client.close()
    finally:
        for server in (first, second):
            if server is not None and server.proc.poll() is None:
                server.stop(timeout=60)
        for leftover in (f"/dev/shm/{shm_name}", f"/dev/shm/{shm_name}.journal"):
            if os.path.exists(leftover):
                os.remove(leftover)
