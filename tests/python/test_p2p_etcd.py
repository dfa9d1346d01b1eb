"""Membership through a real etcd (issue 43, section 2): servers given
--p2p-peers etcd://HOST:PORT/PREFIX register under the prefix with a lease
and meet every server registered there; a server killed leaves its peers'
lists once its lease lapses; etcd out of reach leaves the last membership
serving, and /status and the stats say so until etcd is back; in a
3-member cluster with one member killed, the servers fail over to another
member and a server that joins then is met by all.

etcd is Debian's etcd-server (3.4), started by the tests on loopback, each
member with its own data directory; tools/dev.sh deps installs it.
"""

import base64
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request

import numpy as np
import pytest

from mp_client import (chunk_size, free_tcp_ports, lookup_l2, random_tokens, stats, store_prompt,
                       wait_until_directory_holds)
from test_p2p_membership import start_peer
from test_p2p_owner import write_key
from test_p2p_sharing import SETTLE_S, eventually, worker

ETCD = shutil.which("etcd") or "/usr/bin/etcd"
TTL_S = 3
pytestmark = pytest.mark.skipif(not os.path.exists(ETCD),
                                reason="etcd-server is not installed (tools/dev.sh deps)")


class Etcd:
    """A real etcd cluster of `members` on loopback."""

    def __init__(self, tmp, members=1):
        ports = free_tcp_ports(2 * members)
        self.tmp, self.client_ports, peer_ports = tmp, ports[:members], ports[members:]
        self.names = [f"etcd{i}" for i in range(members)]
        self.peer_urls = [f"http://127.0.0.1:{p}" for p in peer_ports]
        self.cluster = ",".join(f"{n}={u}" for n, u in zip(self.names, self.peer_urls))
        self.procs = [None] * members
        for i in range(members):
            self.start(i)
        for i in range(members):
            self.wait_healthy(i)

    def start(self, i):
        client = f"http://127.0.0.1:{self.client_ports[i]}"
        log = open(self.tmp / f"{self.names[i]}.log", "ab")
        self.procs[i] = subprocess.Popen(
            [ETCD, "--name", self.names[i], "--data-dir", str(self.tmp / self.names[i]),
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", self.peer_urls[i],
             "--initial-advertise-peer-urls", self.peer_urls[i],
             "--initial-cluster", self.cluster, "--initial-cluster-state", "new",
             "--initial-cluster-token", "lmcache-test"],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def wait_healthy(self, i):
        def healthy():
            try:
                url = f"http://127.0.0.1:{self.client_ports[i]}/health"
                with urllib.request.urlopen(url, timeout=2) as reply:
                    return json.load(reply).get("health") == "true"
            except OSError:
                return False
        eventually(healthy, f"etcd member {i} healthy")

    def kill(self, i):
        self.procs[i].send_signal(signal.SIGKILL)
        self.procs[i].wait(timeout=30)

    def peers_entries(self, prefix, members=None):
        members = range(len(self.names)) if members is None else members
        return ",".join(f"etcd://127.0.0.1:{self.client_ports[i]}{prefix}" for i in members)

    def close(self):
        for p in self.procs:
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(timeout=30)


def etcd_call(port, path, body, token=None):
    """One call to etcd's JSON gateway, as an operator's tool would make it."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = token
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                     data=json.dumps(body).encode(), method="POST",
                                     headers=headers)
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.load(reply)


def b64(text):
    return base64.b64encode(text.encode()).decode()


def enable_auth(etcd, prefix, user, password):
    """etcd's own authentication on, with `user` allowed to read and write
    `prefix` only (what an operator restricting the membership prefix does)."""
    port = etcd.client_ports[0]
    etcd_call(port, "/v3/auth/role/add", {"name": "root"})
    etcd_call(port, "/v3/auth/user/add", {"name": "root", "password": "root-secret"})
    etcd_call(port, "/v3/auth/user/grant", {"user": "root", "role": "root"})
    etcd_call(port, "/v3/auth/role/add", {"name": "fleet"})
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    etcd_call(port, "/v3/auth/role/grant",
              {"name": "fleet", "perm": {"permType": "READWRITE", "key": b64(prefix),
                                         "range_end": b64(end)}})
    etcd_call(port, "/v3/auth/user/add", {"name": user, "password": password})
    etcd_call(port, "/v3/auth/user/grant", {"user": user, "role": "fleet"})
    etcd_call(port, "/v3/auth/enable", {})


@pytest.fixture
def key_file(tmp_path):
    return write_key(tmp_path / "fleet.key", os.urandom(32))


def start_member(tmp_path, name, key_file, peers_list, extra=()):
    port, http_port = free_tcp_ports(2)
    server = start_peer(tmp_path, name, key_file, port,
                        ["--p2p-peers", peers_list, "--p2p-etcd-ttl", str(TTL_S),
                         "--p2p-probe-interval", "1", "--p2p-probe-timeout", "0.5", *extra],
                        http_port=http_port)
    server.fleet_url, server.http_port = f"tcp://127.0.0.1:{port}", http_port
    return server


def status_p2p(server):
    url = f"http://127.0.0.1:{server.http_port}/status"
    with urllib.request.urlopen(url, timeout=30) as reply:
        return json.load(reply)["p2p"]


def listed_peers(server):
    return {p["url"] for p in status_p2p(server)["peers"]}


def stop_all(servers):
    for s in servers:
        if s.proc.poll() is None:
            assert s.stop(timeout=60) == 0, s.log()


def test_servers_meet_through_etcd_share_and_a_killed_one_leaves_with_its_lease(
        tmp_path, key_file, zmq_ctx):
    etcd = Etcd(tmp_path)
    servers = []
    try:
        peers_list = etcd.peers_entries("/lmcache/fleet-a")
        servers = [start_member(tmp_path, n, key_file, peers_list) for n in ("a", "b", "c")]
        a, b, c = servers
        clients = [worker(zmq_ctx, s) for s in servers]
        for s, (client, _, _) in zip(servers, clients):
            others = {o.fleet_url for o in servers if o is not s}
            eventually(lambda s=s, others=others: listed_peers(s) == others,
                       f"{s.fleet_url} lists the other two")
            eventually(lambda client=client: stats(client)["p2p"]["peers"]["ready"] == 2,
                       "both ready")
            etcd_stats = stats(client)["p2p"]["etcd"]
            assert etcd_stats["reachable"] == 1 and etcd_stats["registered"] == 1, etcd_stats
            assert etcd_stats["peers"] == 2 and etcd_stats["lease_grants"] == 1, etcd_stats
        (view,) = status_p2p(a)["etcd"]
        assert view["prefix"] == "/lmcache/fleet-a" and view["reachable"] and view["registered"]
        assert view["endpoints"] == [f"127.0.0.1:{etcd.client_ports[0]}"]

        # A prompt stored on A is served to B, found through the peers etcd named.
        rng = np.random.default_rng(43)
        tokens = random_tokens(rng, 2 * chunk_size(clients[0][0]))
        store_prompt(clients[0][0], clients[0][2], clients[0][1], tokens, 2, "on-a", rng)
        wait_until_directory_holds(clients[1][0], 2)
        assert lookup_l2(clients[1][0], tokens, "on-b", timeout_s=SETTLE_S) == 2

        # C dies without a word: its lease lapses within the TTL, and it
        # leaves A's and B's lists.
        killed_at = time.monotonic()
        c.kill()
        for s in (a, b):
            eventually(lambda s=s: c.fleet_url not in listed_peers(s), f"{s.fleet_url} drops C")
        print(f"C left both lists {time.monotonic() - killed_at:.1f} s after its kill "
              f"(lease TTL {TTL_S} s)")
        # B stops cleanly: its lease is revoked, and A drops it.
        assert b.stop(timeout=60) == 0, b.log()
        eventually(lambda: listed_peers(a) == set(), "A drops B")
    finally:
        stop_all(servers)
        etcd.close()


def test_with_etcd_out_of_reach_the_last_membership_serves_until_it_is_back(
        tmp_path, key_file, zmq_ctx):
    etcd = Etcd(tmp_path)
    servers = []
    try:
        peers_list = etcd.peers_entries("/lmcache/fleet-b")
        servers = [start_member(tmp_path, n, key_file, peers_list) for n in ("a", "b")]
        a, b = servers
        a_client = worker(zmq_ctx, a)[0]
        eventually(lambda: stats(a_client)["p2p"]["peers"]["ready"] == 1, "A sees B ready")

        etcd.kill(0)
        eventually(lambda: stats(a_client)["p2p"]["etcd"]["reachable"] == 0,
                   "A finds etcd out of reach")
        (view,) = status_p2p(a)["etcd"]
        assert not view["reachable"] and view["last_error"], view
        # Past two TTLs without etcd: B is still A's ready peer.
        time.sleep(2 * TTL_S)
        assert stats(a_client)["p2p"]["peers"]["ready"] == 1
        assert listed_peers(a) == {b.fleet_url}
        assert stats(a_client)["p2p"]["etcd"]["failures"] > 0

        etcd.start(0)
        etcd.wait_healthy(0)
        eventually(lambda: stats(a_client)["p2p"]["etcd"]["reachable"] == 1 and
                   stats(a_client)["p2p"]["etcd"]["registered"] == 1, "A registered again")
        eventually(lambda: listed_peers(a) == {b.fleet_url}, "A lists B again")
        assert status_p2p(a)["etcd"][0]["last_error"] == ""
    finally:
        stop_all(servers)
        etcd.close()


def test_in_a_three_member_cluster_a_killed_member_is_failed_over(tmp_path, key_file, zmq_ctx):
    etcd = Etcd(tmp_path, members=3)
    servers = []
    try:
        peers_list = etcd.peers_entries("/lmcache/fleet-c")
        servers = [start_member(tmp_path, n, key_file, peers_list) for n in ("a", "b")]
        a, b = servers
        eventually(lambda: listed_peers(a) == {b.fleet_url}, "A lists B")

        etcd.kill(0)  # the first endpoint every server asks
        servers.append(start_member(tmp_path, "c", key_file, peers_list))
        c = servers[2]
        for s in (a, b):
            eventually(lambda s=s: c.fleet_url in listed_peers(s), f"{s.fleet_url} meets C")
        eventually(lambda: listed_peers(c) == {a.fleet_url, b.fleet_url}, "C lists A and B")
        c_client = worker(zmq_ctx, c)[0]
        eventually(lambda: stats(c_client)["p2p"]["peers"]["ready"] == 2, "C sees both ready")
        for s in servers:
            view = status_p2p(s)["etcd"][0]
            assert view["reachable"] and view["registered"], view
    finally:
        stop_all(servers)
        etcd.close()


def test_with_etcds_authentication_only_servers_given_its_credentials_join(tmp_path, key_file):
    """Whoever can write the membership prefix chooses the fleet's members
    (issue 62, section 6): with etcd's own authentication on, servers given
    --p2p-etcd-user and its password register and meet; one without them
    cannot register, says why in /status, and is met by nobody."""
    etcd = Etcd(tmp_path)
    servers = []
    try:
        prefix = "/lmcache/fleet-auth"
        enable_auth(etcd, prefix, "fleet-member", "m3mber-pw")
        password_file = tmp_path / "etcd.password"
        password_file.write_text("m3mber-pw\n")
        os.chmod(password_file, 0o600)
        credentials = ["--p2p-etcd-user", "fleet-member",
                       "--p2p-etcd-password-file", str(password_file)]
        peers_list = etcd.peers_entries(prefix)
        a = start_member(tmp_path, "auth-a", key_file, peers_list, credentials)
        b = start_member(tmp_path, "auth-b", key_file, peers_list, credentials)
        stranger = start_member(tmp_path, "auth-stranger", key_file, peers_list)
        servers = [a, b, stranger]
        eventually(lambda: listed_peers(a) == {b.fleet_url}, "A lists B")
        eventually(lambda: listed_peers(b) == {a.fleet_url}, "B lists A")
        (view,) = status_p2p(stranger)["etcd"]
        eventually(lambda: status_p2p(stranger)["etcd"][0]["last_error"] != "",
                   "the stranger says why")
        (view,) = status_p2p(stranger)["etcd"]
        assert not view["registered"], view
        print("without credentials:", view["last_error"])
        time.sleep(2 * TTL_S)
        assert stranger.fleet_url not in listed_peers(a)
        assert listed_peers(stranger) == set()
    finally:
        stop_all(servers)
        etcd.close()


def test_a_flooded_prefix_costs_at_most_the_bound_and_real_members_still_meet(
        tmp_path, key_file, zmq_ctx):
    """Issue 62, section 6: 400 bogus entries under the prefix (addresses
    nobody answers at) kept a new real member unreachable, silently: each
    peer costs sockets in a context capped at 1,023. Now the members meet
    beside the flood, and a server bounded below it refuses the rest, counts
    them and says so."""
    etcd = Etcd(tmp_path)
    servers = []
    try:
        prefix = "/lmcache/flooded"
        port = etcd.client_ports[0]
        # Under a sanitizer every server and its ZMQ thread run many times
        # slower, and three servers retrying 400 unreachable peers each would
        # starve two cores: a smaller flood, still past the bounded server's.
        flood = 120 if ("TSAN_OPTIONS" in os.environ or "ASAN_OPTIONS" in os.environ) else 400
        for i in range(flood):
            url = f"tcp://10.255.{i // 200}.{i % 200 + 1}:5556"
            etcd_call(port, "/v3/kv/put", {"key": b64(f"{prefix}/{url}"), "value": b64(url)})
        peers_list = etcd.peers_entries(prefix)
        a = start_member(tmp_path, "flood-a", key_file, peers_list, ["--p2p-max-peers", "512"])
        b = start_member(tmp_path, "flood-b", key_file, peers_list, ["--p2p-max-peers", "512"])
        bounded = start_member(tmp_path, "flood-c", key_file, peers_list,
                               ["--p2p-max-peers", "100"])
        servers = [a, b, bounded]
        clients = [worker(zmq_ctx, s) for s in (a, b, bounded)]
        for client, _, _ in clients[:2]:
            eventually(lambda client=client: stats(client)["p2p"]["peers"]["ready"] >= 1,
                       f"each real member ready with another beside {flood} bogus peers")
        peers = stats(clients[2][0])["p2p"]["peers"]
        eventually(lambda: stats(clients[2][0])["p2p"]["peers"]["refused"] > 0,
                   "the bounded server refuses the peers past its bound")
        peers = stats(clients[2][0])["p2p"]["peers"]
        listed = peers["connecting"] + peers["ready"] + peers["unreachable"] + peers["excluded"]
        assert listed == 100 and peers["refused"] == flood + 2 - 100, peers
        assert "--p2p-max-peers 100" in bounded.log()
    finally:
        stop_all(servers)
        etcd.close()
