"""The `serde` block on an L2 adapter. The reference's (its
lmcache/v1/distributed/serde/fp8.py: the object's tensor cast to
torch.float8_e4m3fn, one byte an element, no scale) on the real server,
through the reference's framing: a bfloat16 prompt stored only in an fs tier
with {"serde": {"type": "fp8"}}, then looked up, loaded and retrieved.

The expected values are computed here from the format's definition (every
finite e4m3 value listed from sign, exponent and mantissa; a cast picks the
nearest, ties to the even code, as torch's does), not by the server's
encoder; the retrieved chunks must equal them exactly. The files hold half
the bytes. A second server on the same directory without any serde rebuilds
its index and serves the same values: a tier whose configuration changed
still reads what it holds."""

import os
import time

import numpy as np

from mp_client import (Client, chunk_size, free_tcp_port, lookup_l2, make_key, map_pool,
                       new_instance_id, random_tokens, register, retrieve,
                       slot_view, start_server, stats, OP_COMMIT_STORE, OP_PREPARE_STORE)

CHUNKS = 3


def e4m3_values():
    """The non-negative finite e4m3fn values by code (0x00-0x7E), then the
    would-be 0x7F (480: past the range, where torch's cast gives NaN)."""
    values = []
    for code in range(0x80):
        e, m = code >> 3, code & 7
        values.append(m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return np.array(values)  # code 0x7F lists 480: e=15, m=7


def cast_e4m3(x):
    """torch's x.to(float8_e4m3fn).to(x.dtype), element by element, for
    finite x: the nearest e4m3 value, ties to the even code."""
    table = e4m3_values()
    a = np.abs(x)
    hi = np.clip(np.searchsorted(table, a), 1, 0x7F)
    lo = hi - 1
    d_lo, d_hi = a - table[lo], table[hi] - a
    code = np.where((d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0)), hi, lo)
    code = np.where(a >= 480.0, 0x7F, code)
    out = np.where(code == 0x7F, np.nan, table[code])
    return np.copysign(out, x)


def bf16_bits_to_float(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def kv_like_bf16(rng, shape):
    """Values spread like attention keys and values: a normal of sigma 1,
    1 in 97 an outlier up to +-40, 1 in 89 tiny (fp8's subnormals), as bfloat16
    bits (float32 truncated)."""
    x = rng.normal(0.0, 1.0, size=shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[::97] = rng.uniform(-40, 40, size=flat[::97].shape)
    flat[5::89] = rng.uniform(-2.0 ** -6, 2.0 ** -6, size=flat[5::89].shape)
    return (x.view(np.uint32) >> 16).astype(np.uint16)


def wait_until(what, predicate, timeout_s=30):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"after {timeout_s} s: not {what}"
        time.sleep(0.02)


def serve(binary, tmp_path, name, adapter):
    url = f"tcp://127.0.0.1:{free_tcp_port()}"
    return start_server(binary, url, tmp_path / f"{name}.log",
                        ["--l1-size-gb", "0.0625", "--l2-store-policy", "skip_l1",
                         "--l2-adapter", adapter])


def store_kv_prompt(client, pool, instance_id, rng):
    """Stores CHUNKS chunks of KV-like bfloat16 and waits until they are in
    the tier and out of L1 (--l2-store-policy skip_l1). Returns the tokens,
    the values by chunk and an object's size."""
    chunk = chunk_size(client)
    tokens = random_tokens(rng, CHUNKS * chunk)
    key = make_key(tokens, 0, CHUNKS * chunk, "store")
    prepared = client.call(OP_PREPARE_STORE, key, instance_id)
    stored = {}
    for index, slot in zip(prepared["context"]["chunk_indices"], prepared["context"]["slots"]):
        view = slot_view(pool, slot)
        stored[index] = kv_like_bf16(rng, view.shape)
        view[...] = stored[index]
        object_bytes = slot["length"]
    pool.flush()
    assert client.call(OP_COMMIT_STORE, key, instance_id, b"") is True
    wait_until("in the fs tier and out of L1",
               lambda: stats(client)["l2"]["store"]["stored"] == CHUNKS
               and stats(client)["l1"]["resident_objects"] == 0)
    return tokens, stored, object_bytes


def test_fp8_serde_stores_half_the_bytes_and_any_server_reads_them(binary, tmp_path, zmq_ctx):
    disk = tmp_path / "disk"
    server = serve(binary, tmp_path, "fp8",
                   '{"type":"fs","base_path":"%s","serde":{"type":"fp8",'
                   '"fp8_dtype":"float8_e4m3fn","max_workers":2}}' % disk)
    rng = np.random.default_rng(64)
    try:
        client = Client(zmq_ctx, server.url)
        instance_id = new_instance_id()
        reg = register(client, instance_id)
        pool = map_pool(reg["shm_name"], reg["pool_size"])
        tokens, stored, object_bytes = store_kv_prompt(client, pool, instance_id, rng)
        tier = stats(client)["l2"]["adapters"][0]
        assert tier["serde"] == "fp8-e4m3", tier
        assert tier["serde_encoded_objects"] == CHUNKS, tier
        assert tier["serde_raw_objects"] == 0, tier
        assert tier["serde_encoded_object_bytes"] == CHUNKS * object_bytes, tier
        assert tier["serde_encoded_bytes"] == CHUNKS * object_bytes // 2, tier
        files = [f for f in os.listdir(disk) if not f.startswith(".")]
        assert len(files) == CHUNKS, files
        for f in files:  # half the object, and a 4 KiB header
            assert os.path.getsize(disk / f) == object_bytes // 2 + 4096, f

        assert lookup_l2(client, tokens, "load", timeout_s=30) == CHUNKS
        first = retrieve(client, pool, instance_id, tokens, CHUNKS, "load")
        for i, got in enumerate(first):
            want = cast_e4m3(bf16_bits_to_float(stored[i]))
            assert not np.isnan(want).any()
            np.testing.assert_array_equal(bf16_bits_to_float(got), want,
                                          err_msg=f"chunk {i} differs from torch's cast")
        client.close()
    finally:
        server.stop()

    # The same directory, no serde: rebuilt, and the same values served.
    server = serve(binary, tmp_path, "raw", '{"type":"fs","base_path":"%s"}' % disk)
    try:
        client = Client(zmq_ctx, server.url)
        instance_id = new_instance_id()
        reg = register(client, instance_id)
        pool = map_pool(reg["shm_name"], reg["pool_size"])
        tier = stats(client)["l2"]["adapters"][0]
        assert tier["rebuilt_objects"] == CHUNKS and tier["serde"] == "", tier
        assert lookup_l2(client, tokens, "again", timeout_s=30) == CHUNKS
        again = retrieve(client, pool, instance_id, tokens, CHUNKS, "again")
        for i, (a, b) in enumerate(zip(first, again)):
            assert np.array_equal(a, b), f"chunk {i} differs after the serde was removed"
        assert stats(client)["l2"]["adapters"][0]["checksum_failures"] == 0
        client.close()
    finally:
        server.stop()


def test_lossless_serde_stores_less_and_serves_every_byte(binary, tmp_path, zmq_ctx):
    """Ours, {"serde": {"type": "lossless"}}: the same KV-like prompt comes
    back bit for bit, from files smaller than the objects."""
    disk = tmp_path / "disk"
    server = serve(binary, tmp_path, "lossless",
                   '{"type":"fs","base_path":"%s","serde":{"type":"lossless"}}' % disk)
    rng = np.random.default_rng(65)
    try:
        client = Client(zmq_ctx, server.url)
        instance_id = new_instance_id()
        reg = register(client, instance_id)
        pool = map_pool(reg["shm_name"], reg["pool_size"])
        tokens, stored, object_bytes = store_kv_prompt(client, pool, instance_id, rng)
        tier = stats(client)["l2"]["adapters"][0]
        assert tier["serde"] == "lossless" and tier["serde_encoded_objects"] == CHUNKS, tier
        files = [f for f in os.listdir(disk) if not f.startswith(".")]
        assert len(files) == CHUNKS, files
        for f in files:
            assert os.path.getsize(disk / f) < object_bytes, f
        assert lookup_l2(client, tokens, "load", timeout_s=30) == CHUNKS
        for i, got in enumerate(retrieve(client, pool, instance_id, tokens, CHUNKS, "load")):
            assert np.array_equal(got, stored[i]), f"chunk {i} differs"
        client.close()
    finally:
        server.stop()
