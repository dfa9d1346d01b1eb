"""Cross-node sharing through a bad network and a dying peer (issue 42,
section 7), with real servers in network namespaces joined by a bridge,
real UCX over TCP between them:

- a slow and lossy link: every chunk still arrives byte for byte, and every
  lock ends;
- a server stopping (SIGTERM) while its lookup waits on a hung peer
  (SIGSTOP) exits at once, not at the lookup's deadline;
- a peer killed with SIGKILL while loads run both ways: every request on the
  survivor is answered within its deadline with bytes that are right (what
  was loaded before the kill, no more), the dead peer's locks on the
  survivor end once its restarted life says hello, and the restarted peer
  serves again.

The link is shaped where it leaves a node: with netem (delay and loss) where
the kernel has it; where it does not (these VMs' kernel has no sch_netem),
with a token bucket (tbf: a slow link, queueing delay) and iptables dropping
packets at random. Each test prints which it used. They need namespaces,
and skip by name where the machine cannot make them (root and iproute2).

The bytes are random patterns each server's own worker wrote.
"""

import os
import shutil
import signal
import subprocess
import threading
import time

import numpy as np
import pytest

from mp_client import (OP_LOOKUP, OP_QUERY_PREFETCH_STATUS, chunk_size, lookup_l2, make_key,
                       random_tokens, retrieve, stats, store_prompt, wait_until_directory_holds)
from test_p2p_membership import start_peer
from test_p2p_owner import write_key
from test_p2p_sharing import SETTLE_S, Namespaces, eventually, namespaces_possible, worker

PORT = 5556


def run(*cmd):
    subprocess.run(cmd, check=True, capture_output=True, timeout=30)


def has_qdisc(kind, *args):
    """Whether the kernel takes qdisc `kind` (tried on a throwaway namespace's lo)."""
    probe = f"lmcq{os.getpid() % 100000}"
    run("ip", "netns", "add", probe)
    try:
        return subprocess.run(["ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "lo",
                               "root", kind, *args], capture_output=True, timeout=30).returncode == 0
    finally:
        run("ip", "netns", "del", probe)


def shape(namespaces, i, rate_mbit, loss_percent=0.0, delay_ms=0):
    """What leaves node i is slowed to `rate_mbit` and, where asked, delayed
    and dropped at random. Returns how, in words."""
    ns, dev = namespaces.names[i], namespaces.node_ends[i]
    if has_qdisc("netem", "delay", "1ms"):
        args = ["rate", f"{rate_mbit}mbit"]
        if delay_ms:
            args = ["delay", f"{delay_ms}ms", *args]
        if loss_percent:
            args += ["loss", f"{loss_percent}%"]
        run("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "netem", *args)
        return f"netem {' '.join(args)}"
    # No netem: a token bucket queues what is over the rate (the queue is the
    # delay), and iptables drops both ways at random.
    run("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf",
        "rate", f"{rate_mbit}mbit", "burst", "32kbit", "latency", "400ms")
    how = f"tbf rate {rate_mbit}mbit (no sch_netem in this kernel)"
    if loss_percent:
        for chain in ("INPUT", "OUTPUT"):
            run("ip", "netns", "exec", ns, "iptables", "-A", chain, "-m", "statistic",
                "--mode", "random", "--probability", str(loss_percent / 100), "-j", "DROP")
        how += f", iptables dropping {loss_percent}% each way"
    return how


class Fleet:
    """Servers A (0) and B (1) in namespaces, each the other's peer."""

    def __init__(self, tmp_path, extra=()):
        if not namespaces_possible():
            pytest.skip("test_p2p_faults needs network namespaces: root and iproute2 "
                        "(tools/dev.sh installs it)")
        if shutil.which("tc") is None:
            pytest.skip("test_p2p_faults needs tc (iproute2)")
        self.tmp_path, self.extra = tmp_path, list(extra)
        self.key_file = write_key(tmp_path / "fleet.key", os.urandom(32))
        self.namespaces = Namespaces(2)
        self.urls = [f"tcp://{h}:{PORT}" for h in self.namespaces.hosts]
        self.servers = [None, None]
        try:
            for i in (0, 1):
                self.start(i)
        except BaseException:
            self.close()
            raise

    def start(self, i):
        self.servers[i] = start_peer(
            self.tmp_path, "ab"[i], self.key_file, PORT,
            ["--p2p-peers", self.urls[1 - i], *self.extra], host=self.namespaces.hosts[i],
            prefix=self.namespaces.prefix(i), env=dict(os.environ, UCX_TLS="tcp"))
        return self.servers[i]

    def close(self):
        try:
            for s in self.servers:
                if s is not None and s.proc.poll() is None:
                    assert s.stop(timeout=60) == 0, s.log()
        finally:
            self.namespaces.close()


def p2p(client):
    return stats(client)["p2p"]


def locked_here(client):
    """Bytes this server's L1 holds locked for its peers."""
    return p2p(client)["served"]["locked_bytes"]


def loaded(client):
    return stats(client)["l2"]["adapters"][0]["loaded_objects"]


def expect_patterns(data, patterns, first=0):
    for offset, chunk_bytes in enumerate(data):
        index = first + offset
        expected = patterns[index]
        assert np.array_equal(chunk_bytes.view(np.uint16).reshape(expected.shape), expected), \
            f"chunk {index} differs"


def test_a_slow_lossy_link_still_delivers_every_byte_and_ends_every_lock(tmp_path, zmq_ctx):
    # Generous deadlines: a lost segment costs TCP a retransmission timeout.
    fleet = Fleet(tmp_path, ["--p2p-lookup-timeout", "10"])
    try:
        a, b = (worker(zmq_ctx, s) for s in fleet.servers)
        eventually(lambda: p2p(b[0])["peers"]["ready"] == 1, "B sees A ready")
        how = shape(fleet.namespaces, 0, rate_mbit=40, loss_percent=2, delay_ms=20)
        print(f"A's link: {how}")
        rng = np.random.default_rng(42)
        chunks = 16
        tokens = random_tokens(rng, chunks * chunk_size(a[0]))
        patterns = store_prompt(a[0], a[2], a[1], tokens, chunks, "on-a", rng)
        wait_until_directory_holds(b[0], chunks)

        assert lookup_l2(b[0], tokens, "through-loss", timeout_s=SETTLE_S) == chunks
        expect_patterns(retrieve(b[0], b[2], b[1], tokens, chunks, "through-loss"), patterns)
        assert loaded(b[0]) == chunks
        eventually(lambda: locked_here(a[0]) == 0, "A's locks for B ended")
        assert stats(b[0])["l2"]["adapters"][0]["objects"] == 0
    finally:
        fleet.close()


def test_a_peer_killed_mid_load_costs_only_its_chunks_and_its_restart_ends_its_locks(
        tmp_path, zmq_ctx):
    load_timeout_s = 20
    fleet = Fleet(tmp_path, ["--p2p-lookup-timeout", "5", "--p2p-load-timeout",
                             str(load_timeout_s)])
    try:
        a, b = (worker(zmq_ctx, s) for s in fleet.servers)
        eventually(lambda: p2p(b[0])["peers"]["ready"] == 1, "B sees A ready")
        eventually(lambda: p2p(a[0])["peers"]["ready"] == 1, "A sees B ready")
        rng = np.random.default_rng(99)
        chunk = chunk_size(a[0])
        chunks = 48  # 12 MiB each way: about 5 s at 20 Mbit/s
        on_a = random_tokens(rng, chunks * chunk)
        on_b = random_tokens(rng, chunks * chunk)
        a_patterns = store_prompt(a[0], a[2], a[1], on_a, chunks, "on-a", rng)
        b_patterns = store_prompt(b[0], b[2], b[1], on_b, chunks, "on-b", rng)
        wait_until_directory_holds(a[0], chunks)
        wait_until_directory_holds(b[0], chunks)
        for i in (0, 1):
            print(f"node {'ab'[i]}'s link: {shape(fleet.namespaces, i, rate_mbit=20)}")

        # Both load from each other at once; each lookup on its own client.
        results, errors = {}, []

        def load(name, server, tokens):
            try:
                client = worker(zmq_ctx, server)[0]
                started = time.monotonic()
                results[name] = (lookup_l2(client, tokens, f"{name}-loads", timeout_s=SETTLE_S),
                                 time.monotonic() - started)
            except Exception as e:  # a dying A's own lookup fails: expected, recorded
                errors.append((name, e))

        b_loads = threading.Thread(target=load, args=("b", fleet.servers[1], on_a))
        a_loads = threading.Thread(target=load, args=("a", fleet.servers[0], on_b))
        b_loads.start()
        a_loads.start()
        # Each holds locks at the other (its lookup was answered) and has
        # begun to answer the other's reads: the loads are under way.
        eventually(lambda: locked_here(a[0]) > 0 and locked_here(b[0]) > 0 and
                   p2p(a[0])["channel"]["served_reads"] > 0 and
                   p2p(b[0])["channel"]["served_reads"] > 0,
                   "both lookups answered, both owners serving reads")
        fleet.servers[0].kill()
        b_loads.join(timeout=SETTLE_S + 30)
        assert not b_loads.is_alive()
        a_loads.join(timeout=SETTLE_S + 30)

        # B's request was answered within its deadlines, with what landed.
        assert "b" in results, errors
        hits, took_s = results["b"]
        print(f"B's lookup: {hits} of {chunks} chunks, in {took_s:.1f} s")
        assert hits < chunks, "the kill came after every load: the link was not slow enough"
        # Within its own deadlines (lookup 5 s, then load), with slack for a slow machine.
        assert took_s < 5 + load_timeout_s + 10, "B waited past its deadlines"
        if hits:
            expect_patterns(retrieve(b[0], b[2], b[1], on_a, hits, "b-loads"), a_patterns)
        # Nothing of B's is held for the dead A... yet: its locks could still
        # be read through by a live twin of A, so they stay until A's next
        # life says hello.
        assert locked_here(b[0]) > 0
        eventually(lambda: p2p(b[0])["peers"]["unreachable"] == 1, "B finds A unreachable")
        assert stats(b[0])["l2"]["adapters"][0]["objects"] == 0  # B holds nothing at A

        # A's restart: its hello ends its old life's locks on B, and it rejoins.
        fleet.start(0)
        a = worker(zmq_ctx, fleet.servers[0])
        eventually(lambda: locked_here(b[0]) == 0, "B ended the dead A's locks")
        eventually(lambda: p2p(b[0])["peers"]["ready"] == 1, "B sees A's new life ready")
        assert p2p(b[0])["peers"]["restarts"] >= 1
        assert p2p(b[0])["served"]["ended_life_tasks"] >= 1
        again = store_prompt(a[0], a[2], a[1], on_a, chunks, "on-a-again", rng)
        wait_until_directory_holds(b[0], chunks)  # A's new life, listed and read again
        assert lookup_l2(b[0], on_a, "after-restart", timeout_s=SETTLE_S) == chunks
        data = retrieve(b[0], b[2], b[1], on_a, chunks, "after-restart")
        # The first `hits` chunks B had from A's first life; the rest from its second.
        expect_patterns(data[:hits], a_patterns)
        expect_patterns(data[hits:], again, first=hits)
        eventually(lambda: locked_here(a[0]) == 0, "A's new locks for B ended")
        eventually(lambda: locked_here(b[0]) == 0, "no lock left on B")
        expect_patterns(retrieve(b[0], b[2], b[1], on_b, chunks, "b-own"), b_patterns)
    finally:
        fleet.close()


def test_a_server_stopping_while_a_lookup_waits_on_a_hung_peer_exits_at_once(tmp_path, zmq_ctx):
    deadline_s = 120  # far past what the test allows the stop
    # Broadcast: a lookup of a prompt nobody holds still asks A (directed
    # lookups would ask nobody, and there would be no call to wait on).
    # Probes as slow as the deadline: with the default 3 s probe timeout, a
    # probe of A unanswered once it stopped made A unreachable, a broadcast
    # then asked nobody, and the lookup was never seen out at A (once in a
    # loaded run; every time with a 0.1 s probe timeout and a 1 s pause after
    # the SIGSTOP). The stop must not wait on that probe either.
    fleet = Fleet(tmp_path, ["--p2p-lookup-timeout", str(deadline_s), "--p2p-load-timeout",
                             str(deadline_s), "--p2p-lookup", "broadcast",
                             "--p2p-probe-interval", str(deadline_s),
                             "--p2p-probe-timeout", str(deadline_s)])
    try:
        b_client = worker(zmq_ctx, fleet.servers[1])[0]
        eventually(lambda: p2p(b_client)["peers"]["ready"] == 1, "B sees A ready")
        fleet.servers[0].proc.send_signal(signal.SIGSTOP)  # hung: its sockets stay open
        chunk = chunk_size(b_client)
        tokens = random_tokens(np.random.default_rng(3), 4 * chunk)
        key = make_key(tokens, 0, len(tokens), "waits-on-a", worker_id=None)
        assert b_client.call(OP_LOOKUP, key, 1) is None
        # B's p2p adapter has the lookup out at A, and its prefetch waits on
        # an answer that will not come.
        eventually(lambda: stats(b_client)["l2"]["adapters"][0]["looking_up_keys"] > 0,
                   "B's lookup out at A")
        assert b_client.call(OP_QUERY_PREFETCH_STATUS, "waits-on-a") is None
        started = time.monotonic()
        code = fleet.servers[1].stop(timeout=deadline_s + 30)
        took_s = time.monotonic() - started
        print(f"B stopped in {took_s:.1f} s (its lookup's deadline: {deadline_s} s)")
        assert code == 0, fleet.servers[1].log()
        # Against the deadline it would otherwise have waited out.
        assert took_s < deadline_s / 4, f"B's stop waited {took_s:.0f} s on the hung peer"
    finally:
        fleet.servers[0].proc.send_signal(signal.SIGCONT)
        fleet.close()
