"""The owner side of cross-node sharing, against the real binary: a peer
written from the spec (shared/reference/p2p-spec.md sections 4.1, 4.2 and
5) looks up, queries and unlocks objects a worker stored, and reads their
bytes at the offsets it was given; only a peer that proves the fleet key
gets anything.

The peer's frames are built here with msgpack from the spec's shapes
(ObjectKey and MemoryLayoutDesc as maps by field name, group_layout_descs a
map with int keys, operation ids 29-31 as the reference's client sends
them), not by our encoder. The fleet's CURVE keys are derived as
docs/security.md ("The fleet key") says: HMAC-SHA256 of the key file's bytes
over a label, the digest being the Curve25519 secret key.
"""

import hashlib
import hmac
import os
import json
import subprocess
import urllib.request

import msgpack
import numpy as np
import pytest
import zmq
from zmq.utils import z85

from mp_client import (MODEL, Client, ServerStartError, chunk_size, free_tcp_port, free_tcp_ports,
                       map_pool, new_instance_id, random_tokens, register, server_binary, slot_shape,
                       start_server, stats, store_prompt)

OP_P2P_LOOKUP_AND_LOCK = 29
OP_P2P_QUERY_LOOKUP_RESULTS = 30
OP_P2P_UNLOCK_OBJECTS = 31
OP_POLL_KV_EVENTS = 34
CHUNKS = 4
KV_RANK_0 = (1 << 24) | (0 << 16) | (1 << 8) | 0  # world size 1, rank 0 (spec 4.2)
SERVER_LABEL = b"lmcache p2p fleet endpoint server v1"
FINGERPRINT_LABEL = b"lmcache p2p fleet key fingerprint v1"
CLIENT_LABEL = b"lmcache p2p fleet endpoint client v1"


def curve_pair(key, label):
    secret = hmac.new(key, label, hashlib.sha256).digest()
    secret_z85 = z85.encode(secret)
    return zmq.curve_public(secret_z85), secret_z85


def write_key(path, data, mode=0o600):
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)
    return str(path)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lmc-p2p")
    key = os.urandom(32)
    key_file = write_key(tmp / "fleet.key", key)
    fleet_port, http_port = free_tcp_ports(2)
    args = ["--l1-size-gb", "0.05", "--http-port", str(http_port), "--drain-timeout-seconds", "0",
            "--p2p-advertise-url", f"127.0.0.1:{fleet_port}", "--p2p-auth-key-file", key_file]
    try:
        srv = start_server(server_binary(), f"ipc://{tmp / 'lmc.sock'}", tmp / "server.log", args)
    except ServerStartError as e:
        pytest.fail(str(e))
    srv.key = key
    srv.fleet_url = f"tcp://127.0.0.1:{fleet_port}"
    srv.tmp = tmp
    srv.status_url = f"http://127.0.0.1:{http_port}/status"
    yield srv
    assert srv.stop(timeout=60) == 0, srv.log()


def peer(ctx, fleet, key, reply_timeout_s=30.0):
    """A peer on the fleet endpoint holding `key` (the server's public key is
    always derived from the server's real key: the peer knows whom it calls)."""
    client = Client.__new__(Client)
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    server_public, _ = curve_pair(fleet.key, SERVER_LABEL)
    public, secret = curve_pair(key, CLIENT_LABEL)
    sock.setsockopt(zmq.CURVE_SERVERKEY, server_public)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, public)
    sock.setsockopt(zmq.CURVE_SECRETKEY, secret)
    sock.connect(fleet.fleet_url)
    client.sock, client.uid, client.reply_timeout_s = sock, 0, reply_timeout_s
    return client


def object_key(chunk_hash):
    return {"chunk_hash": chunk_hash, "model_name": MODEL, "kv_rank": KV_RANK_0,
            "object_group_id": 0, "cache_salt": ""}


def where(address):
    """offset and size of a TransferChannelAddress (the newest form adds
    cxl_arena and cxl_ttl_seconds, which older decoders ignore)."""
    return address["offset"], address["size"]


def layouts(chunk):
    return {0: {"shapes": [slot_shape(chunk)], "dtypes": ["bfloat16"]}}


def stored_prompt(client, rng):
    """A prompt a worker stored: its chunk hashes (from the KV events) and the
    bytes of each chunk."""
    assert client.call(OP_POLL_KV_EVENTS, MODEL, 0, 1)["enabled"] is True  # recording starts
    instance_id = new_instance_id()
    reg = register(client, instance_id)
    pool = map_pool(reg["shm_name"], reg["pool_size"])
    chunk = chunk_size(client)
    tokens = random_tokens(rng, CHUNKS * chunk)
    patterns = store_prompt(client, pool, instance_id, tokens, CHUNKS, f"req-{rng.integers(1e9)}",
                            rng)
    page = client.call(OP_POLL_KV_EVENTS, MODEL, 0, 10000)
    by_tokens = {tuple(e["token_ids"]): e["block_hashes"][0] for e in page["events"]
                 if e["kind"] == "stored" and e["medium"] == "CPU"}
    hashes = [by_tokens.get(tuple(tokens[i * chunk:(i + 1) * chunk])) for i in range(CHUNKS)]
    assert None not in hashes, page
    return pool, chunk, hashes, patterns


def test_a_member_reads_a_stored_prompt_byte_for_byte_and_unlocks(fleet, zmq_ctx):
    client = Client(zmq_ctx, fleet.url)
    pool, chunk, hashes, patterns = stored_prompt(client, np.random.default_rng(42))
    member = peer(zmq_ctx, fleet, fleet.key)
    keys = [object_key(h) for h in hashes] + [object_key(b"\x07" * 32)]
    task = member.call(OP_P2P_LOOKUP_AND_LOCK, keys, layouts(chunk))
    assert isinstance(task, int)
    served = stats(client)["p2p"]["served"]
    assert served["locked_objects"] == CHUNKS
    addresses = member.call(OP_P2P_QUERY_LOOKUP_RESULTS, task)
    assert len(addresses) == len(keys)
    for i, address in enumerate(addresses[:CHUNKS]):
        assert address["offset"] >= 0 and address["size"] == patterns[i].nbytes, address
        got = np.asarray(pool[address["offset"]:address["offset"] + address["size"]]).view(np.uint16)
        assert np.array_equal(got, patterns[i].reshape(-1)), f"chunk {i}: wrong bytes"
    assert where(addresses[CHUNKS]) == (-1, 0)
    assert member.call(OP_P2P_QUERY_LOOKUP_RESULTS, task) is None  # exactly once
    # The reply of unlock is nil (0xc0) in frame 3, as the spec asks.
    reply = member.request(OP_P2P_UNLOCK_OBJECTS, keys[:CHUNKS])
    assert reply.frames[2] == b"\xc0" and reply.error is None
    served = stats(client)["p2p"]["served"]
    assert served["locked_objects"] == 0 and served["tasks"] == 0
    assert served["hit_keys"] >= CHUNKS
    assert stats(client)["p2p"]["fleet_admitted"] >= 1
    member.close()
    client.close()


def test_without_the_key_a_client_gets_misses_or_no_connection(fleet, zmq_ctx):
    client = Client(zmq_ctx, fleet.url)
    pool, chunk, hashes, _ = stored_prompt(client, np.random.default_rng(7))
    keys = [object_key(h) for h in hashes]
    before = stats(client)["p2p"]
    # The main endpoint speaks to everyone: a lookup there gets a task whose
    # every key is a miss, answered at the first query, and locks nothing.
    task = client.call(OP_P2P_LOOKUP_AND_LOCK, keys, layouts(chunk))
    answered = client.call(OP_P2P_QUERY_LOOKUP_RESULTS, task)
    assert [where(a) for a in answered] == [(-1, 0)] * CHUNKS
    assert client.call(OP_P2P_UNLOCK_OBJECTS, keys) is None
    after = stats(client)["p2p"]
    assert after["served"]["untrusted_keys"] == before["served"]["untrusted_keys"] + CHUNKS
    assert after["served"]["locked_objects"] == 0
    # A peer with another key is never connected to the fleet endpoint.
    stranger = peer(zmq_ctx, fleet, os.urandom(32), reply_timeout_s=1.5)
    with pytest.raises(AssertionError, match="no reply"):
        stranger.call(OP_P2P_LOOKUP_AND_LOCK, keys, layouts(chunk))
    assert stats(client)["p2p"]["fleet_refused"] > before["fleet_refused"]
    assert stats(client)["p2p"]["served"]["locked_objects"] == 0
    # The server goes on serving its members.
    member = peer(zmq_ctx, fleet, fleet.key)
    task = member.call(OP_P2P_LOOKUP_AND_LOCK, keys, layouts(chunk))
    assert all(a["offset"] >= 0 for a in member.call(OP_P2P_QUERY_LOOKUP_RESULTS, task))
    assert member.call(OP_P2P_UNLOCK_OBJECTS, keys) is None
    assert stats(client)["p2p"]["served"]["locked_objects"] == 0
    stranger.close()
    member.close()
    client.close()


def none_hash():
    """BLAKE3 of 12 zero bytes, the reference's NONE_HASH (spec 5.2), by b3sum."""
    out = subprocess.run(["b3sum", "--no-names"], input=b"\0" * 12, capture_output=True,
                         check=True)
    return bytes.fromhex(out.stdout.decode().strip())


def test_a_member_gets_the_handshake_in_server_info_and_nobody_else_does(fleet, zmq_ctx):
    client = Client(zmq_ctx, fleet.url)
    info = client.call("server_info")
    assert "p2p" not in info  # the main endpoint: no data channel, no fleet details
    member = peer(zmq_ctx, fleet, fleet.key)
    shake = member.call("server_info")["p2p"]
    assert shake["boot_id"] == info["boot_id"] and shake["chunk_size"] == info["chunk_size"]
    assert shake["hash_algorithm"] == "blake3" and shake["none_hash"] == none_hash()
    assert shake["advertise_url"] == fleet.fleet_url.removeprefix("tcp://")
    assert shake["key_fingerprint"] == hmac.new(fleet.key, FINGERPRINT_LABEL,
                                                hashlib.sha256).hexdigest()[:16]
    # The UCX descriptor (docs/protocol.md): "LUCX", version 4, a u32
    # little-endian address length, the worker's address, the pool's size.
    channel = shake["data_channel"]
    assert channel[:5] == b"LUCX\x04"
    length = int.from_bytes(channel[5:9], "little")
    assert 0 < length == len(channel) - 9 - 8
    assert int.from_bytes(channel[9 + length:], "little") == info["pool_size"]
    member.close()
    client.close()


def test_status_shows_p2p_but_the_keys_fingerprint_only_to_admins(fleet):
    with urllib.request.urlopen(fleet.status_url, timeout=30) as reply:
        status = json.load(reply)
    p2p = status["p2p"]
    assert p2p["enabled"] is True and p2p["serves_unauthenticated"] is False
    assert p2p["advertise_url"] == fleet.fleet_url.removeprefix("tcp://")
    # The fingerprint operators compare (HMAC-SHA256 under its own label, 8
    # bytes in hex) lets anyone test guessed keys offline: not on the open
    # route (issue 62); members see it in the handshake, operators in the log.
    assert "key_fingerprint" not in p2p
    fingerprint = hmac.new(fleet.key, FINGERPRINT_LABEL, hashlib.sha256).hexdigest()[:16]
    assert fingerprint not in json.dumps(status)
    assert fingerprint in fleet.log()
    assert fleet.key.hex()[:16] not in json.dumps(status)
    assert status["stats"]["p2p"]["served"]["locked_objects"] == p2p["locked_objects"]


@pytest.mark.parametrize("case", ["no key file", "key readable by others", "short key"])
def test_p2p_without_a_proper_fleet_key_refuses_to_start(tmp_path, case):
    args = [server_binary(), "--url", f"ipc://{tmp_path / 'lmc.sock'}", "--l1-size-gb", "0.01",
            "--http-port", "0", "--p2p-advertise-url", f"127.0.0.1:{free_tcp_port()}"]
    if case == "key readable by others":
        args += ["--p2p-auth-key-file", write_key(tmp_path / "k", os.urandom(32), 0o644)]
        want = "chmod"  # "chmod 600", or "chmod 440" for a file root owns
    elif case == "short key":
        args += ["--p2p-auth-key-file", write_key(tmp_path / "k", os.urandom(16))]
        want = "16 bytes"
    else:
        want = "--p2p-auth-key-file FILE"
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    assert want in done.stdout + done.stderr, done
