"""The s3 L2 adapter on the real server against a real S3 server: a
single-node Ceph cluster with its gateway (radosgw, Debian's Ceph), started
here by tools/ceph_s3.sh. Keys go through the reference's framing
(mp_client); the tier is written with --l2-store-policy skip_l1, so every
hit is a load from the bucket.

- Two servers (two processes, each its own L1) on one bucket: what one
  stored, the other finds and retrieves byte for byte; a restarted server
  lists the bucket and serves it again; /config and /status never show
  the secret.
- The gateway killed: lookups answer (no hit, no stall) and the server goes
  on; restarted, the same prompt loads again, byte for byte.
- A wrong secret: the server starts, stores fail, the condition says access
  was refused, and the log says so once."""

import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from mp_client import (OP_CLEAR, Client, chunk_size, free_tcp_port, http_json, lookup_l2, map_pool,
                       new_instance_id, random_tokens, register, retrieve, start_server, stats,
                       store_prompt)

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "ceph_s3.sh"
BUCKET = "lmc-e2e"
CHUNKS = 4


def installed():
    return all(os.access(f"/usr/bin/{b}", os.X_OK) for b in ("ceph-mon", "ceph-osd", "radosgw"))


@pytest.fixture(scope="module")
def ceph(tmp_path_factory):
    if not installed():
        pytest.skip("Ceph (ceph-mon, ceph-osd, radosgw) is not installed")
    directory = tmp_path_factory.mktemp("ceph") / "cluster"
    done = subprocess.run([str(SCRIPT), "start", str(directory), "--bucket", BUCKET,
                           "--watch", str(os.getpid())],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"tools/ceph_s3.sh start failed:\n{done.stderr[-3000:]}"
    env = dict(line.split("=", 1) for line in Path(done.stdout.strip()).read_text().splitlines()
               if "=" in line)
    env["dir"] = str(directory)
    yield env
    subprocess.run([str(SCRIPT), "stop", str(directory)], capture_output=True, timeout=120)


def gateway(ceph, action):
    done = subprocess.run([str(SCRIPT), action, ceph["dir"]], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def adapter_json(ceph, prefix, secret=None, extra=""):
    return ('{"type":"s3","s3_endpoint":"%s","bucket":"%s","s3_region":"%s","key_prefix":"%s",'
            '"aws_access_key_id":"%s","aws_secret_access_key":"%s","request_timeout_ms":15000,'
            '"retry_interval_ms":200%s}'
            % (ceph["S3_ENDPOINT"], BUCKET, ceph["S3_REGION"], prefix, ceph["S3_ACCESS_KEY"],
               secret or ceph["S3_SECRET_KEY"], extra))


def serve(binary, tmp_path, name, adapter, http_port=None, more_adapters=()):
    # ipc: the connection `clear` is allowed on (--admin-ops ipc, the default).
    url = f"ipc://{tmp_path / (name + '.sock')}"
    args = ["--l1-size-gb", "0.0625", "--l2-store-policy", "skip_l1", "--l2-adapter", adapter]
    for more in more_adapters:
        args += ["--l2-adapter", more]
    if http_port is not None:
        args += ["--http-port", str(http_port)]
    return start_server(binary, url, tmp_path / f"{name}.log", args)


def wait_until(what, predicate, timeout_s=30):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"after {timeout_s} s: not {what}"
        time.sleep(0.02)


def attach(zmq_ctx, server):
    client = Client(zmq_ctx, server.url)
    instance_id = new_instance_id()
    reg = register(client, instance_id)
    return client, instance_id, map_pool(reg["shm_name"], reg["pool_size"])


def store_in_tier(client, pool, instance_id, rng):
    tokens = random_tokens(rng, CHUNKS * chunk_size(client))
    patterns = store_prompt(client, pool, instance_id, tokens, CHUNKS, "store", rng)
    wait_until("in the bucket and out of L1",
               lambda: stats(client)["l2"]["store"]["stored"] == CHUNKS
               and stats(client)["l1"]["resident_objects"] == 0)
    return tokens, patterns


def check_retrieved(client, pool, instance_id, tokens, patterns, request_id):
    assert lookup_l2(client, tokens, request_id, timeout_s=30) == CHUNKS
    got = retrieve(client, pool, instance_id, tokens, CHUNKS, request_id)
    for i, chunk in enumerate(got):
        assert np.array_equal(chunk, patterns[i]), f"chunk {i} differs ({request_id})"


def test_two_servers_share_a_bucket_and_a_restart_lists_it(binary, tmp_path, zmq_ctx, ceph):
    adapter = adapter_json(ceph, "share/")
    rng = np.random.default_rng(7)
    http_port = free_tcp_port()
    writer = serve(binary, tmp_path, "writer", adapter, http_port)
    reader = serve(binary, tmp_path, "reader", adapter)
    try:
        client_w, id_w, pool_w = attach(zmq_ctx, writer)
        tokens, patterns = store_in_tier(client_w, pool_w, id_w, rng)
        # The other process finds them in the bucket (it never stored them).
        client_r, id_r, pool_r = attach(zmq_ctx, reader)
        check_retrieved(client_r, pool_r, id_r, tokens, patterns, "other-server")
        tier = stats(client_r)["l2"]["adapters"][0]
        assert tier["type"] == "s3" and tier["loaded_objects"] == CHUNKS, tier
        assert tier["checksum_failures"] == 0 and tier["condition"] == "", tier
        # The secret is nowhere an operator looks.
        shown = str(http_json(http_port, "GET", "/config")) + str(stats(client_w))
        assert ceph["S3_SECRET_KEY"] not in shown
        assert ceph["S3_SECRET_KEY"] not in writer.log()
        client_r.close()
        client_w.close()
    finally:
        reader.stop()
        writer.stop()

    restarted = serve(binary, tmp_path, "restarted", adapter)
    try:
        client, instance_id, pool = attach(zmq_ctx, restarted)
        wait_until("the bucket listed",
                   lambda: stats(client)["l2"]["adapters"][0]["rebuilt_objects"] == CHUNKS)
        check_retrieved(client, pool, instance_id, tokens, patterns, "after-restart")
        client.close()
    finally:
        restarted.stop()


def test_a_killed_gateway_costs_hits_not_the_server(binary, tmp_path, zmq_ctx, ceph):
    """The s3 tier first, an fs tier behind it: both hold the prompt. With the
    gateway killed, lookups go on from the fs tier (the first after the kill
    may miss: its load finds the gateway gone), byte for byte, no stall;
    restarted, the s3 tier serves again."""
    disk = tmp_path / "disk"
    server = serve(binary, tmp_path, "faults", adapter_json(ceph, "faults/"),
                   more_adapters=['{"type":"fs","base_path":"%s"}' % disk])
    rng = np.random.default_rng(8)
    n = iter(range(100000))  # request ids
    try:
        client, instance_id, pool = attach(zmq_ctx, server)
        tokens = random_tokens(rng, CHUNKS * chunk_size(client))
        patterns = store_prompt(client, pool, instance_id, tokens, CHUNKS, "store", rng)
        wait_until("in both tiers and out of L1",
                   lambda: stats(client)["l2"]["store"]["stored"] == CHUNKS
                   and all(a["stored_objects"] == CHUNKS for a in stats(client)["l2"]["adapters"])
                   and stats(client)["l1"]["resident_objects"] == 0)
        gateway(ceph, "stop-gateway")
        try:
            started = time.monotonic()
            wait_until("served from the fs tier",
                       lambda: lookup_l2(client, tokens, f"down-{next(n)}", timeout_s=30) == CHUNKS)
            # Not a deadline per chunk: the adapter knows the gateway is down.
            assert time.monotonic() - started < 10
            got = retrieve(client, pool, instance_id, tokens, CHUNKS, "down-retrieve")
            for i, chunk in enumerate(got):
                assert np.array_equal(chunk, patterns[i]), f"chunk {i} differs while down"
            s3, fs = stats(client)["l2"]["adapters"]
            assert "unreachable" in s3["condition"], s3
            assert fs["loaded_objects"] >= CHUNKS, fs
            assert client.call(OP_CLEAR) is None
        finally:
            gateway(ceph, "start-gateway")
        # Back: a new prompt is stored to the gateway and loaded from it
        # (the s3 tier is first in the cascade), byte for byte.
        again = random_tokens(rng, CHUNKS * chunk_size(client))
        patterns = store_prompt(client, pool, instance_id, again, CHUNKS, "store-again", rng)
        # (L1 still holds the first prompt, leased to the lookups above.)
        wait_until("stored to both tiers again",
                   lambda: all(a["stored_objects"] == 2 * CHUNKS
                               for a in stats(client)["l2"]["adapters"]), timeout_s=60)
        loaded_before = stats(client)["l2"]["adapters"][0]["loaded_objects"]
        check_retrieved(client, pool, instance_id, again, patterns, "after-restart")
        assert stats(client)["l2"]["adapters"][0]["loaded_objects"] == loaded_before + CHUNKS
        tier = stats(client)["l2"]["adapters"][0]
        assert tier["checksum_failures"] == 0 and tier["condition"] == "", tier
        client.close()
    finally:
        server.stop()


def test_a_wrong_secret_is_refused_cleanly_and_logged_once(binary, tmp_path, zmq_ctx, ceph):
    server = serve(binary, tmp_path, "wrong", adapter_json(ceph, "wrong/", secret="0" * 40))
    rng = np.random.default_rng(9)
    try:
        client, instance_id, pool = attach(zmq_ctx, server)
        for n in range(3):
            tokens = random_tokens(rng, CHUNKS * chunk_size(client))
            store_prompt(client, pool, instance_id, tokens, CHUNKS, f"store-{n}", rng)
        wait_until("the stores refused",
                   lambda: stats(client)["l2"]["adapters"][0]["store_failures"] == 3 * CHUNKS)
        tier = stats(client)["l2"]["adapters"][0]
        assert "access refused (SignatureDoesNotMatch)" in tier["condition"], tier
        # What the tier refused stays in L1 (nothing lost); a prompt never
        # stored asks the bucket, is refused, and is a clean miss.
        assert lookup_l2(client, tokens, "kept", timeout_s=30) == CHUNKS
        unseen = random_tokens(rng, CHUNKS * chunk_size(client))
        assert lookup_l2(client, unseen, "unseen", timeout_s=30) == 0
        log = server.log()
        assert log.count("access refused") == 1, log[-3000:]
        assert "0" * 40 not in log
        client.close()
    finally:
        server.stop()


def test_the_references_fp8_serde_on_the_gateway(binary, tmp_path, zmq_ctx, ceph):
    """{"serde": {"type": "fp8"}} on the s3 tier: the bucket holds half the
    bytes, and a retrieve gives the fp8 cast of what was stored, computed in
    test_serde.py from the format's definition, not by the server."""
    from test_serde import CHUNKS as SERDE_CHUNKS, bf16_bits_to_float, cast_e4m3, store_kv_prompt
    server = serve(binary, tmp_path, "fp8", adapter_json(ceph, "fp8/", extra=',"serde":{"type":"fp8"}'))
    rng = np.random.default_rng(10)
    try:
        client, instance_id, pool = attach(zmq_ctx, server)
        tokens, stored, object_bytes = store_kv_prompt(client, pool, instance_id, rng)
        tier = stats(client)["l2"]["adapters"][0]
        assert tier["serde"] == "fp8-e4m3" and tier["serde_encoded_objects"] == SERDE_CHUNKS, tier
        assert tier["stored_bytes"] == SERDE_CHUNKS * object_bytes // 2, tier
        assert lookup_l2(client, tokens, "load", timeout_s=30) == SERDE_CHUNKS
        for i, got in enumerate(retrieve(client, pool, instance_id, tokens, SERDE_CHUNKS, "load")):
            np.testing.assert_array_equal(bf16_bits_to_float(got),
                                          cast_e4m3(bf16_bits_to_float(stored[i])),
                                          err_msg=f"chunk {i} differs from torch's cast")
        client.close()
    finally:
        server.stop()
