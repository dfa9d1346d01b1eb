"""The fleet and operator surfaces against hostile neighbours (issue 62), on
the real binary, each attack made as the review made it:

- 1,100 idle TCP connections (no key, no bytes) to the fleet port of a
  server started under `prlimit --nofile=1024`: a new worker's ping is still
  answered and /healthcheck still answers (before: the ping went
  unanswered); the connections beyond the per-source cap are counted;
- UCX's data channel listens only on the interface of the advertised
  address (before: on every interface of the host);
- slow HTTP clients (a byte every few seconds) beside health probes: every
  probe is answered (before: none of 10 in 20 s).
"""

import json
import os
import resource
import socket
import subprocess
import threading
import time
import urllib.request

import pytest

from mp_client import OP_PING, Client, free_tcp_ports, start_server
from test_p2p_owner import write_key


def http_get(port, path, timeout=10):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as reply:
        return reply.status, reply.read()


def p2p_server(binary, tmp_path, name, extra=(), prefix=()):
    url_port, fleet_port, http_port = free_tcp_ports(3)
    key_file = write_key(tmp_path / f"{name}.key", os.urandom(32))
    args = ["--l1-size-gb", "0.05", "--drain-timeout-seconds", "0", "--http-port", str(http_port),
            "--p2p-advertise-url", f"127.0.0.1:{fleet_port}", "--p2p-auth-key-file", key_file,
            *extra]
    server = start_server(binary, f"tcp://127.0.0.1:{url_port}", tmp_path / f"{name}.log", args,
                          prefix)
    return server, url_port, fleet_port, http_port


def test_idle_connections_to_the_fleet_port_starve_no_worker(binary, tmp_path, zmq_ctx):
    if subprocess.run(["which", "prlimit"], capture_output=True).returncode != 0:
        pytest.skip("prlimit (util-linux) is not installed")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 2048:
        pytest.skip(f"this test opens 1,100 connections; the hard descriptor limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    server, url_port, fleet_port, http_port = p2p_server(
        binary, tmp_path, "flooded", prefix=("prlimit", "--nofile=1024:1024", "--"))
    idle = []
    try:
        stuck = 0  # an attacker does not care whether each connect completes
        for _ in range(1100):
            try:
                idle.append(socket.create_connection(("127.0.0.1", fleet_port), timeout=5))
                stuck = 0
            except OSError:
                stuck += 1
                if stuck == 3:
                    break
        client = Client(zmq_ctx, f"tcp://127.0.0.1:{url_port}", reply_timeout_s=10)
        started = time.monotonic()
        client.call(OP_PING)
        took = time.monotonic() - started
        client.close()
        status, _ = http_get(http_port, "/healthcheck")
        assert status == 200
        figures = json.loads(http_get(http_port, "/status")[1])
        router = figures["stats"]["router"]
        # The connections past the source's 64 are shut as the server's loop
        # reads their accepts: while the attacker still holds all of them,
        # the server holds few descriptors.
        assert router["capped_connections"] > 0, router
        deadline = time.monotonic() + 30  # a sanitizer build's loop is slower to shut them
        held = len(os.listdir(f"/proc/{server.proc.pid}/fd"))
        while held >= 500 and time.monotonic() < deadline:
            time.sleep(0.2)
            held = len(os.listdir(f"/proc/{server.proc.pid}/fd"))
        assert held < 500, f"the server holds {held} descriptors beside {len(idle)} idle sockets"
        print(f"ping answered in {took * 1000:.1f} ms beside {len(idle)} idle connections; "
              f"{router['capped_connections']} capped, the server holding {held} descriptors")
        # The idle ones within the cap end at the handshake deadline (3 s).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if json.loads(http_get(http_port, "/status")[1])["stats"]["router"][
                    "connections"] <= 1:
                break
            time.sleep(0.5)
        router = json.loads(http_get(http_port, "/status")[1])["stats"]["router"]
        assert router["connections"] <= 1, router
    finally:
        for s in idle:
            s.close()
        server.stop()


def listening_addresses(pid):
    """The (address, port) of every TCP socket process `pid` listens on."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        with open(f"/proc/{pid}/net/{table}") as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                    continue
                address, port = fields[1].split(":")
                raw = bytes.fromhex(address)
                if family == socket.AF_INET:
                    raw = raw[::-1]
                else:
                    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                found.append((socket.inet_ntop(family, raw), int(port, 16)))
    return found


def test_the_data_channel_listens_only_where_the_fleet_does(binary, tmp_path):
    # UCX's TCP transport only: the one that listens on a port.
    env = dict(os.environ, UCX_TLS="tcp")
    server, url_port, fleet_port, http_port = None, None, None, None
    url_port, fleet_port, http_port = free_tcp_ports(3)
    key_file = write_key(tmp_path / "local.key", os.urandom(32))
    server = start_server(binary, f"tcp://127.0.0.1:{url_port}", tmp_path / "local.log",
                          ["--l1-size-gb", "0.05", "--drain-timeout-seconds", "0",
                           "--http-port", str(http_port),
                           "--p2p-advertise-url", f"127.0.0.1:{fleet_port}",
                           "--p2p-auth-key-file", key_file], env=env)
    try:
        listening = listening_addresses(server.proc.pid)
        print("listening:", listening)
        assert any(port == fleet_port for _, port in listening)
        elsewhere = [(a, p) for a, p in listening if a not in ("127.0.0.1", "::1")]
        assert not elsewhere, f"listening beyond loopback: {elsewhere}"
    finally:
        server.stop()


def test_slow_http_clients_do_not_starve_health_probes(binary, tmp_path, zmq_ctx):
    url_port, http_port = free_tcp_ports(2)
    server = start_server(binary, f"tcp://127.0.0.1:{url_port}", tmp_path / "slow.log",
                          ["--l1-size-gb", "0.05", "--drain-timeout-seconds", "0",
                           "--http-port", str(http_port)])
    stop = threading.Event()
    slow = []

    def trickle(s):
        request = b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 64
        for byte in request:
            if stop.wait(3):
                return
            try:
                s.send(bytes([byte]))
            except OSError:
                return

    try:
        for _ in range(8):
            s = socket.create_connection(("127.0.0.1", http_port), timeout=10)
            slow.append(s)
            threading.Thread(target=trickle, args=(s,), daemon=True).start()
        time.sleep(1)
        answered = 0
        started = time.monotonic()
        for _ in range(10):
            try:
                status, _ = http_get(http_port, "/healthcheck", timeout=2)
                answered += status == 200
            except OSError:
                pass
        took = time.monotonic() - started
        print(f"{answered} of 10 probes answered in {took:.1f} s beside 8 slow clients")
        assert answered == 10
    finally:
        stop.set()
        for s in slow:
            s.close()
        server.stop()
