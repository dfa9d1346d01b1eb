"""Membership of cross-node sharing, with real servers in separate processes:
a server given --p2p-peers meets each peer over its fleet endpoint and
/status shows what it found: a compatible peer ready, a peer that cuts
chunks of another size excluded with the reason, an address nobody answers
for unreachable, and a peer killed and restarted on the same address ready
again as a new life (docs/architecture.md, "Where the fleet goes").
"""

import json
import os
import time
import urllib.request

import pytest

from mp_client import ServerStartError, free_tcp_ports, server_binary, start_server
from test_p2p_owner import write_key

SETTLE_S = 60  # a bound on waiting for a state, not a measurement


def start_peer(tmp, name, key_file, fleet_port, extra=(), http_port=None, host="127.0.0.1",
               prefix=(), env=None):
    args = ["--l1-size-gb", "0.05", "--drain-timeout-seconds", "0",
            "--http-port", str(http_port or 0),
            "--p2p-advertise-url", f"{host}:{fleet_port}", "--p2p-auth-key-file", key_file,
            *extra]
    try:
        return start_server(server_binary(), f"ipc://{tmp / (name + '.sock')}",
                            tmp / f"{name}.log", args, prefix, env)
    except ServerStartError as e:
        pytest.fail(str(e))


def peers(http_port):
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/status", timeout=30) as reply:
        return {p["url"]: p for p in json.load(reply)["p2p"]["peers"]}


def wait_for(http_port, url, accept, what):
    deadline = time.monotonic() + SETTLE_S
    seen = None
    while time.monotonic() < deadline:
        seen = peers(http_port).get(url)
        if seen is not None and accept(seen):
            return seen
        time.sleep(0.1)
    pytest.fail(f"{url} never became {what}; last seen: {seen}")


def test_a_server_meets_its_peers_and_status_says_what_each_is(tmp_path):
    key_file = write_key(tmp_path / "fleet.key", os.urandom(32))
    good_port, odd_port, dead_port, own_port, http_port = free_tcp_ports(5)
    good = start_peer(tmp_path, "good", key_file, good_port)
    odd = start_peer(tmp_path, "odd", key_file, odd_port, ["--chunk-size", "512"])
    listed = ",".join(f"tcp://127.0.0.1:{p}" for p in (good_port, odd_port, dead_port, own_port))
    server = start_peer(tmp_path, "a", key_file, own_port, ["--p2p-peers", listed], http_port)
    try:
        good_url, odd_url = f"tcp://127.0.0.1:{good_port}", f"tcp://127.0.0.1:{odd_port}"
        dead_url = f"tcp://127.0.0.1:{dead_port}"
        first = wait_for(http_port, good_url, lambda p: p["state"] == "ready", "ready")
        assert first["lives"] == 1 and first["seconds_since_answer"] >= 0
        excluded = wait_for(http_port, odd_url, lambda p: p["state"] == "excluded", "excluded")
        assert "chunk size is 512 tokens, ours is 256 tokens" in excluded["reason"]
        unreachable = wait_for(http_port, dead_url, lambda p: p["state"] == "unreachable",
                               "unreachable")
        assert "no answer" in unreachable["reason"] and unreachable["seconds_since_answer"] == -1
        assert f"tcp://127.0.0.1:{own_port}" not in peers(http_port)  # never its own peer

        # Killed and restarted on the same address: unreachable, then a new life.
        good.kill()
        wait_for(http_port, good_url, lambda p: p["state"] == "unreachable", "unreachable")
        good = start_peer(tmp_path, "good-again", key_file, good_port)
        again = wait_for(http_port, good_url,
                         lambda p: p["state"] == "ready" and p["lives"] == 2, "ready again")
        assert again["boot_id"] != first["boot_id"]
        # One line per change (the log is the operator's record of it).
        server.wait_for_log(f"p2p: peer {good_url} restarted")
        server.wait_for_log(f"p2p: peer {odd_url} is excluded: its chunk size is 512")
    finally:
        for s in (server, good, odd):
            if s.proc.poll() is None:
                assert s.stop(timeout=60) == 0, s.log()
