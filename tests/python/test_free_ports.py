"""The port picker the tests and tools share (free_ports.py): pickers in many
processes at once never hand out one port twice while it is reserved, a
reservation expires, and the registry stays one "PORT EXPIRY" line per port.

Each case gives the picker a private registry and a narrow range
(LMCACHE_TEST_PORT_REGISTRY, LMCACHE_TEST_PORT_RANGE), so that pickers that
did not share their picks would collide at once: 160 picks from 200 ports
drawn independently hold a repeat with a probability of 1 - 7e-42. (A python
test of the etcd fleet once failed because two tests' servers were handed
port 12095: "cannot serve HTTP on 127.0.0.1:12095 (in use ...)".)
"""

import os
import socket
import subprocess
import sys
import time

import pytest

import free_ports

HERE = os.path.dirname(os.path.abspath(__file__))
RANGE_LOW = 9400  # below the default range (from 10000): no other test picks these


def require_free(low, high):
    """Skips the test unless every port of [low, high] can be bound now: the
    cases expect exact sets of ports, and on some hosts a service listens in
    this range (NVIDIA's dcgm-exporter on 9400, for one)."""
    for port in range(low, high + 1):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                pytest.skip(f"port {port} of the test's range {low}-{high} is in use here")


def picker_env(tmp_path, low, high):
    return {**os.environ, "LMCACHE_TEST_PORT_REGISTRY": str(tmp_path / "registry"),
            "LMCACHE_TEST_PORT_RANGE": f"{low}-{high}"}


@pytest.fixture
def narrow(tmp_path, monkeypatch):
    """A private registry and the 8 ports from RANGE_LOW for this process's picks."""
    require_free(RANGE_LOW, RANGE_LOW + 7)
    for name, value in picker_env(tmp_path, RANGE_LOW, RANGE_LOW + 7).items():
        monkeypatch.setenv(name, value)
    return tmp_path / "registry"


def test_pickers_in_many_processes_never_share_a_port(tmp_path):
    low, high = RANGE_LOW, RANGE_LOW + 199
    require_free(low, high)
    script = ("import free_ports\n"
              "print(' '.join(str(free_ports.free_tcp_port()) for _ in range(40)))\n")
    procs = [subprocess.Popen([sys.executable, "-c", script], cwd=HERE, text=True,
                              stdout=subprocess.PIPE, env=picker_env(tmp_path, low, high))
             for _ in range(4)]
    picked = []
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        picked += [int(p) for p in out.split()]
    assert len(picked) == 160
    repeats = sorted(p for p in set(picked) if picked.count(p) > 1)
    assert not repeats, f"ports handed out twice: {repeats}"
    assert all(low <= p <= high for p in picked), "a pick left the range with room in it"


def test_one_call_takes_every_port_of_a_range_once(narrow):
    assert sorted(free_ports.free_tcp_ports(8)) == list(range(RANGE_LOW, RANGE_LOW + 8))


def test_with_every_port_reserved_a_pick_falls_back_to_the_kernel(narrow):
    free_ports.free_tcp_ports(8)
    fallback = free_ports.free_tcp_port()
    assert fallback >= free_ports._ephemeral_port_floor()


def test_an_expired_reservation_frees_its_port(narrow):
    now = int(time.time())
    narrow.write_text("".join(f"{p} {now - 1}\n" for p in range(RANGE_LOW, RANGE_LOW + 8)))
    assert sorted(free_ports.free_tcp_ports(8)) == list(range(RANGE_LOW, RANGE_LOW + 8))


def test_the_registry_keeps_one_line_per_live_reservation(narrow):
    now = int(time.time())
    narrow.write_text(f"{RANGE_LOW} {now + 100}\nnot a line\n{RANGE_LOW + 1} {now - 5}\n"
                 f"{RANGE_LOW + 2} {now + 100} extra\n")
    picked = free_ports.free_tcp_ports(2)
    assert RANGE_LOW not in picked
    lines = narrow.read_text().splitlines()
    ports = [int(line.split()[0]) for line in lines]
    assert ports == sorted([RANGE_LOW, *picked])
    for line in lines:
        port, expiry = (int(f) for f in line.split())
        if port in picked:
            assert expiry >= now + free_ports.RESERVE_S


def test_a_registry_path_that_is_a_link_is_never_followed(narrow, tmp_path):
    """Another local user may plant the registry's name in a shared /tmp as a
    link to a file of ours: the picker must not rewrite (truncate) it, and
    picks anyway, unregistered."""
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    os.symlink(victim, narrow)
    picked = free_ports.free_tcp_ports(2)
    assert len(set(picked)) == 2
    assert victim.read_text() == "precious\n"
