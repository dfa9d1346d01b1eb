#!/usr/bin/env python3
"""A throwaway Redis Cluster (and a standalone redis-server) on loopback, for tests.

Starts N redis-server masters from the machine's own redis-server binary, on
free 127.0.0.1 ports inside a private temp dir, joins them with
`redis-cli --cluster create`, and can kill, restart and reshard them while a
test runs. Nothing listens on any other address, nothing persists (no RDB, no
AOF), and every wait is bounded: a step that does not finish in time raises
ClusterError saying which step and why.

Used as a module (tests/integration/redis_cluster_test.py):

    with RedisCluster(masters=3) as cluster:
        cluster.urls()               # ["redis://127.0.0.1:P", ...]
        cluster.node_for_key("k")    # index of the master owning k's slot
        cluster.kill(1); cluster.restart(1)
        cluster.reshard(0, 2, 100)

and as a CLI:

    tools/redis_cluster.py selftest     # start, SET/GET, kill, restart, reshard, stop: PASS
    tools/redis_cluster.py run          # start one and print its urls until Ctrl-C

Queries (PING, CLUSTER INFO/NODES/KEYSLOT/MYID, SCAN) go through the small RESP
client below rather than redis-cli: redis-cli prints an error reply on stdout
with exit status 0, so its output cannot tell a value from an error. redis-cli
is used for what it alone does well: `--cluster create` and `--cluster reshard`.
"""

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

LOOPBACK = "127.0.0.1"
SLOTS = 16384
BUS_PORT_OFFSET = 10000  # Redis Cluster's bus listens on port + 10000

START_TIMEOUT_S = 15.0  # one redis-server answering PING
CLUSTER_OK_TIMEOUT_S = 45.0  # every node agreeing the cluster is whole
CREATE_TIMEOUT_S = 60.0
RESHARD_TIMEOUT_S = 180.0
COMMAND_TIMEOUT_S = 5.0  # one RESP command

# Options the harness cannot do without; any other option an older
# redis-server does not know is dropped (with a note) instead of failing.
ESSENTIAL_OPTIONS = {"port", "bind", "dir", "cluster-enabled", "cluster-config-file",
                     "unixsocket", "save", "appendonly"}


class ClusterError(RuntimeError):
    """A harness step failed or ran past its time bound."""


class RespError(RuntimeError):
    """An error reply (-ERR ..., -MOVED ...) from a Redis server."""


# --------------------------------------------------------------------------- RESP client


def _encode_command(args):
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def _read_reply(stream):
    line = stream.readline()
    if not line.endswith(b"\r\n"):
        raise ConnectionError("connection closed mid-reply")
    kind, body = line[:1], line[1:-2]
    if kind == b"+":
        return body.decode()
    if kind == b"-":
        raise RespError(body.decode(errors="replace"))
    if kind == b":":
        return int(body)
    if kind == b"$":
        size = int(body)
        if size < 0:
            return None
        data = stream.read(size + 2)
        if len(data) != size + 2:
            raise ConnectionError("connection closed mid-reply")
        return data[:-2]
    if kind == b"*":
        count = int(body)
        return None if count < 0 else [_read_reply(stream) for _ in range(count)]
    raise ConnectionError(f"not a RESP reply: {line!r}")


def resp_command(address, *args, timeout=COMMAND_TIMEOUT_S):
    """One command on a fresh connection; `address` is a port on 127.0.0.1 or a
    unix socket path. Bulk strings come back as bytes, error replies raise
    RespError, and no step waits longer than `timeout`."""
    if isinstance(address, int):
        sock = socket.create_connection((LOOPBACK, address), timeout=timeout)
    else:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        sock.connect(address)
    with sock, sock.makefile("rb") as stream:
        sock.sendall(_encode_command(args))
        return _read_reply(stream)


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def _responds(address):
    try:
        return resp_command(address, "PING", timeout=1.0) == "PONG"
    except (OSError, RespError):
        return False


# --------------------------------------------------------------------------- processes


def _port_free(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def _pick_port(taken):
    """A loopback port whose cluster bus port (+10000) is free as well."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((LOOPBACK, 0))
            port = s.getsockname()[1]
        if port + BUS_PORT_OFFSET > 65535 or port in taken or port + BUS_PORT_OFFSET in taken:
            continue
        if _port_free(port + BUS_PORT_OFFSET):
            return port
    raise ClusterError("no free loopback port pair (port, port + 10000) found")


def _read_file(path):
    try:
        with open(path, "r", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def _bad_directive(log):
    """The option redis-server refused as 'Bad directive', or None."""
    if "Bad directive" not in log:
        return None
    for line in log.splitlines():
        if line.startswith(">>> '"):
            return line[5:].split(" ", 1)[0].strip("'")
    return None


def require_binaries():
    """Raises ClusterError naming what is missing (the tests turn it into a skip)."""
    missing = [b for b in ("redis-server", "redis-cli") if shutil.which(b) is None]
    if missing:
        raise ClusterError(f"{' and '.join(missing)} not found: apt-get install -y "
                           "redis-server redis-tools")


class _RedisProcess:
    """One redis-server: started from an option dict, waited on until it
    answers PING, killed on demand. `address` is its port or socket path."""

    def __init__(self, address, options, log_path):
        self.address = address
        self.options = options
        self.log_path = log_path
        self.proc = None

    def start(self, dropped):
        """Starts it; an option this redis-server does not know is dropped
        (recorded in `dropped`) unless essential, and the start is retried."""
        while True:
            args = ["redis-server"]
            for name, value in self.options.items():
                if name not in dropped:
                    args += [f"--{name}", value]
            with open(self.log_path, "ab") as log:
                # Own session: a Ctrl-C meant for the test does not kill the
                # servers before the test's cleanup gets to them.
                self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, start_new_session=True)
            bad = self._wait_ready()
            if bad is None:
                return
            if bad in ESSENTIAL_OPTIONS or bad not in self.options:
                raise ClusterError(f"redis-server refused option '{bad}':\n"
                                   f"{_read_file(self.log_path)}")
            print(f"note: this redis-server does not know --{bad}; dropped",
                  file=sys.stderr)
            dropped.add(bad)

    def _wait_ready(self):
        """None once it answers PING; the refused option's name if it exited
        on a bad directive. Raises on any other failure or after the bound."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log = _read_file(self.log_path)
                bad = _bad_directive(log)
                if bad is not None:
                    return bad
                raise ClusterError(f"redis-server ({self.address}) exited with "
                                   f"{self.proc.returncode}:\n{log}")
            if _responds(self.address):
                return None
            time.sleep(0.05)
        self.kill()
        raise ClusterError(f"redis-server ({self.address}) did not answer PING within "
                           f"{START_TIMEOUT_S} s:\n{_read_file(self.log_path)}")

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            raise ClusterError(f"redis-server ({self.address}) survived SIGKILL for 10 s")


# --------------------------------------------------------------------------- cluster


def _parse_nodes(text):
    """CLUSTER NODES -> {node id: (port, flags, [(first, last), ...])}. Slots in
    brackets ([slot->-id], [slot-<-id]) are migrations in flight, not owned."""
    nodes = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 8:
            continue
        port = int(fields[1].split("@", 1)[0].rsplit(":", 1)[1])
        ranges = []
        for token in fields[8:]:
            if token.startswith("["):
                continue
            first, _, last = token.partition("-")
            ranges.append((int(first), int(last or first)))
        nodes[fields[0]] = (port, fields[2], sorted(ranges))
    return nodes


class RedisCluster:
    """N redis-server masters on loopback joined into one cluster, no replicas."""

    def __init__(self, masters=3, maxmemory="256mb", parent_dir=None, node_timeout_ms=2000):
        if masters < 3:
            raise ValueError("a Redis Cluster needs at least 3 masters")
        self.masters = masters
        self.maxmemory = maxmemory
        self.parent_dir = parent_dir
        self.node_timeout_ms = node_timeout_ms
        self.dir = None
        self.nodes = []
        self.dropped_options = set()
        self._ids = {}

    # -- lifecycle

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        require_binaries()
        self.dir = tempfile.mkdtemp(prefix="lmc-redis-cluster-", dir=self.parent_dir)
        try:
            taken = set()
            for _ in range(self.masters):
                self.nodes.append(self._start_node(taken))
            self._create()
            self.wait_ok()
            self._ids = {i: _text(self._cmd(i, "CLUSTER", "MYID")) for i in range(self.masters)}
        except BaseException:
            self.stop()
            raise
        return self

    def _start_node(self, taken):
        """A master on a fresh port pair; a port taken by someone else between
        the pick and the bind (parallel tests) costs a retry on another."""
        for attempt in range(3):
            port = _pick_port(taken)
            taken.update((port, port + BUS_PORT_OFFSET))
            node = _RedisProcess(port, self._options(port),
                                 os.path.join(self.dir, f"redis-{port}.log"))
            try:
                node.start(self.dropped_options)
                return node
            except ClusterError as e:
                if "Address already in use" not in str(e) or attempt == 2:
                    raise

    def _options(self, port):
        return {
            "port": str(port),
            "bind": LOOPBACK,
            "protected-mode": "no",
            "dir": self.dir,
            "cluster-enabled": "yes",
            "cluster-config-file": os.path.join(self.dir, f"nodes-{port}.conf"),
            "cluster-node-timeout": str(self.node_timeout_ms),
            "cluster-require-full-coverage": "no",
            "cluster-allow-reads-when-down": "yes",
            "save": "",
            "appendonly": "no",
            "maxmemory": self.maxmemory,
            "maxmemory-policy": "allkeys-lru",
        }

    def _create(self):
        endpoints = [f"{LOOPBACK}:{n.address}" for n in self.nodes]
        self._redis_cli(["--cluster", "create", *endpoints, "--cluster-replicas", "0",
                         "--cluster-yes"], CREATE_TIMEOUT_S, "cluster create")

    def stop(self):
        """Kills every server and removes the temp dir; safe to call twice."""
        errors = []
        for node in self.nodes:
            try:
                node.kill()
            except ClusterError as e:
                errors.append(str(e))
        self.nodes = []
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
        if errors:
            raise ClusterError("; ".join(errors))

    # -- faults

    def kill(self, i):
        """SIGKILLs master i (its data is lost: nothing persists)."""
        self.nodes[i].kill()

    def restart(self, i):
        """Starts master i again on its port with its nodes-<port>.conf, so it
        rejoins with its slots; returns once the cluster is whole again."""
        node = self.nodes[i]
        if node.alive():
            raise ClusterError(f"master {i} is still running")
        node.start(self.dropped_options)
        self.wait_ok()

    def wait_failed(self, i, timeout=CLUSTER_OK_TIMEOUT_S):
        """Waits until every live master flags master i as failed (after about
        the node timeout), so its slots are known to be down."""
        node_id = self._ids[i]
        self._wait(lambda: all("fail" in self._nodes_seen_by(j)[node_id][1].split(",")
                               for j in self._live()),
                   timeout, f"the masters to flag master {i} as failed")

    def reshard(self, from_i, to_i, slots):
        """Moves `slots` slots (with their keys) from master from_i to to_i."""
        self.wait_ok()  # redis-cli refuses to reshard while nodes disagree
        self._redis_cli(["--cluster", "reshard", f"{LOOPBACK}:{self.nodes[from_i].address}",
                         "--cluster-from", self._ids[from_i], "--cluster-to", self._ids[to_i],
                         "--cluster-slots", str(slots), "--cluster-yes"],
                        RESHARD_TIMEOUT_S, f"reshard of {slots} slots {from_i} -> {to_i}")
        self.wait_ok()

    # -- queries

    def urls(self):
        return [f"redis://{LOOPBACK}:{n.address}" for n in self.nodes]

    def ports(self):
        return [n.address for n in self.nodes]

    def node_for_key(self, key):
        """Index of the master that owns `key`'s slot, as a live master sees it."""
        return self.node_for_slot(self.key_slot(key))

    def key_slot(self, key):
        return self._cmd(self._live()[0], "CLUSTER", "KEYSLOT", key)

    def node_for_slot(self, slot):
        by_port = {n.address: i for i, n in enumerate(self.nodes)}
        for port, _, ranges in self._nodes_seen_by(self._live()[0]).values():
            if any(first <= slot <= last for first, last in ranges):
                return by_port[port]
        raise ClusterError(f"no master owns slot {slot}")

    def slot_ranges(self, i):
        """The [(first, last), ...] slot ranges master i owns, ascending, as the
        first live master sees it (`--cluster reshard` moves a source's slots
        in this order, lowest first)."""
        port = self.nodes[i].address
        return next(ranges for p, _, ranges in self._nodes_seen_by(self._live()[0]).values()
                    if p == port)

    def slot_counts(self):
        """Slots owned by each master, as the first live master sees it."""
        counts = [0] * self.masters
        by_port = {n.address: i for i, n in enumerate(self.nodes)}
        for port, _, ranges in self._nodes_seen_by(self._live()[0]).values():
            counts[by_port[port]] += sum(last - first + 1 for first, last in ranges)
        return counts

    def scan(self, i, pattern, timeout=COMMAND_TIMEOUT_S):
        """Every key of master i matching `pattern` (bytes), by SCAN."""
        keys, cursor = [], b"0"
        deadline = time.monotonic() + timeout
        while True:
            cursor, batch = self._cmd(i, "SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
            keys += batch
            if cursor == b"0":
                return keys
            if time.monotonic() > deadline:
                raise ClusterError(f"SCAN of master {i} ran past {timeout} s")

    def command(self, i, *args):
        """One command on master i (no redirection followed)."""
        return self._cmd(i, *args)

    # -- waits

    def wait_ok(self, timeout=CLUSTER_OK_TIMEOUT_S):
        """Until every live master says cluster_state:ok with all 16384 slots
        served by healthy masters, knows every master, and all of them list the
        same slot owners with no migration open (what reshard requires)."""
        last = {"why": "not checked yet"}

        def whole():
            live = self._live()
            if len(live) != self.masters:
                last["why"] = f"only masters {live} are running"
                return False
            views = []
            for i in live:
                info = self._info(i)
                expected = {"cluster_state": "ok", "cluster_slots_ok": str(SLOTS),
                            "cluster_known_nodes": str(self.masters)}
                wrong = {k: info.get(k) for k, v in expected.items() if info.get(k) != v}
                if wrong:
                    last["why"] = f"master {i}: {wrong}"
                    return False
                text = _text(self._cmd(i, "CLUSTER", "NODES"))
                if "[" in text:
                    last["why"] = f"master {i} has a slot migration open"
                    return False
                views.append({nid: (port, ranges) for nid, (port, _, ranges)
                              in _parse_nodes(text).items()})
            if any(v != views[0] for v in views):
                last["why"] = "the masters disagree about the slot owners"
                return False
            return True

        self._wait(whole, timeout, "the cluster to be whole (cluster_state:ok)",
                   lambda: last["why"])

    def _wait(self, predicate, timeout, what, why=lambda: ""):
        deadline = time.monotonic() + timeout
        while True:
            try:
                if predicate():
                    return
            except (OSError, RespError) as e:
                error = e
                why = (lambda e=error: f"{type(e).__name__}: {e}")
            if time.monotonic() > deadline:
                raise ClusterError(f"timed out after {timeout} s waiting for {what}: {why()}")
            time.sleep(0.1)

    # -- plumbing

    def _live(self):
        live = [i for i, n in enumerate(self.nodes) if n.alive()]
        if not live:
            raise ClusterError("no master is running")
        return live

    def _cmd(self, i, *args):
        return resp_command(self.nodes[i].address, *args)

    def _info(self, i):
        text = _text(self._cmd(i, "CLUSTER", "INFO"))
        return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)

    def _nodes_seen_by(self, i):
        return _parse_nodes(_text(self._cmd(i, "CLUSTER", "NODES")))

    def _redis_cli(self, args, timeout, what):
        try:
            done = subprocess.run(["redis-cli", *args], capture_output=True, text=True,
                                  timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            raise ClusterError(f"redis-cli {what} did not finish within {timeout} s:\n"
                               f"{e.stdout or ''}{e.stderr or ''}")
        # --cluster reports most failures as [ERR] lines, not always by its status.
        if done.returncode != 0 or "[ERR]" in done.stdout:
            raise ClusterError(f"redis-cli {what} failed ({done.returncode}):\n"
                               f"{done.stdout}{done.stderr}")
        return done.stdout


# --------------------------------------------------------------------------- standalone


class StandaloneRedis:
    """One plain redis-server on a unix socket only (no TCP port)."""

    def __init__(self, directory, maxmemory="256mb"):
        self.dir = directory
        self.socket_path = os.path.join(directory, "redis.sock")
        if len(self.socket_path) >= 104:  # sun_path is 108 bytes on Linux, less elsewhere
            raise ClusterError(f"unix socket path too long: {self.socket_path}")
        self.node = _RedisProcess(self.socket_path, {
            "port": "0",
            "unixsocket": self.socket_path,
            "unixsocketperm": "700",
            "dir": directory,
            "save": "",
            "appendonly": "no",
            "maxmemory": maxmemory,
            "maxmemory-policy": "allkeys-lru",
        }, os.path.join(directory, "redis-standalone.log"))

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        require_binaries()
        self.node.start(set())
        return self

    def stop(self):
        self.node.kill()
        try:
            os.unlink(self.socket_path)
        except FileNotFoundError:
            pass

    def url(self):
        return f"unix://{self.socket_path}"

    def command(self, *args):
        return resp_command(self.socket_path, *args)


def standalone_unix(directory, maxmemory="256mb"):
    """Starts a plain redis-server on `directory`/redis.sock; stop() it when done."""
    return StandaloneRedis(directory, maxmemory).start()


# --------------------------------------------------------------------------- CLI


def _cli_c(port, *args):
    """redis-cli -c (follows MOVED) through one node, as an operator would."""
    done = subprocess.run(["redis-cli", "-c", "-h", LOOPBACK, "-p", str(port), *args],
                          capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
    return done.returncode, done.stdout.strip()


def _check(condition, message):
    if not condition:
        raise ClusterError(f"selftest: {message}")


def _selftest_set_get(cluster, keys, through):
    """SET each key through one master and GET it through another (redis-cli -c
    follows the redirections); each key must then live on node_for_key's
    master, readable there without a redirection."""
    for k, key in enumerate(keys):
        value = f"value-{key}"
        rc, out = _cli_c(cluster.ports()[through[k % len(through)]], "SET", key, value)
        _check(rc == 0 and out == "OK", f"SET {key} answered {rc} {out!r}")
        rc, out = _cli_c(cluster.ports()[through[(k + 1) % len(through)]], "GET", key)
        _check(rc == 0 and out == value, f"GET {key} answered {rc} {out!r}")
        owner = cluster.node_for_key(key)
        _check(cluster.command(owner, "GET", key) == value.encode(),
               f"{key} is not on master {owner}, which node_for_key names")
    return {key: cluster.node_for_key(key) for key in keys}


def selftest(masters, maxmemory):
    started = time.monotonic()
    cluster = RedisCluster(masters=masters, maxmemory=maxmemory)
    cluster.start()
    directory = cluster.dir
    pids = [n.proc.pid for n in cluster.nodes]
    try:
        print(f"started {masters} masters: {' '.join(cluster.urls())} "
              f"({time.monotonic() - started:.1f} s)")
        keys = [f"selftest-key-{k}" for k in range(30)]
        owners = _selftest_set_get(cluster, keys, list(range(masters)))
        _check(len(set(owners.values())) == masters, f"30 keys did not spread: {owners}")
        print(f"SET/GET through every master: ok, owners {sorted(set(owners.values()))}")

        victim = 1
        cluster.kill(victim)
        survivors = [i for i in range(masters) if i != victim]
        for key, owner in owners.items():
            rc, out = _cli_c(cluster.ports()[survivors[0]], "GET", key)
            if owner == victim:
                _check(out != f"value-{key}", f"{key} read from the dead master")
            else:
                _check(rc == 0 and out == f"value-{key}",
                       f"{key} on a surviving master answered {rc} {out!r}")
        print(f"killed master {victim}: keys on the survivors still read")

        t = time.monotonic()
        cluster.restart(victim)
        print(f"restarted master {victim}: cluster ok again in {time.monotonic() - t:.1f} s")
        _selftest_set_get(cluster, [f"selftest-after-{k}" for k in range(30)],
                          list(range(masters)))
        lost = [k for k, o in owners.items() if o == victim]
        _check(all(cluster.command(victim, "EXISTS", k) == 0 for k in lost),
               "the restarted master kept keys (nothing should persist)")

        before = cluster.slot_counts()
        t = time.monotonic()
        cluster.reshard(0, 2, 100)
        after = cluster.slot_counts()
        _check(after[0] == before[0] - 100 and after[2] == before[2] + 100,
               f"reshard moved the wrong slots: {before} -> {after}")
        for key, owner in owners.items():
            if owner != victim:
                rc, out = _cli_c(cluster.ports()[1], "GET", key)
                _check(out == f"value-{key}", f"{key} after reshard answered {rc} {out!r}")
        print(f"resharded 100 slots 0 -> 2 in {time.monotonic() - t:.1f} s: {before} -> {after}")
    finally:
        cluster.stop()
    _check(not os.path.exists(directory), f"{directory} is still there after stop")
    for pid in pids:
        _check(not os.path.exists(f"/proc/{pid}") or
               "zombie" in _read_file(f"/proc/{pid}/status").lower(),
               f"redis-server {pid} survived stop")
    with tempfile.TemporaryDirectory(prefix="lmc-redis-sa-") as d:
        standalone = standalone_unix(d)
        try:
            _check(standalone.command("SET", "k", "v") == "OK", "standalone SET")
            _check(standalone.command("GET", "k") == b"v", "standalone GET")
        finally:
            standalone.stop()
    print("standalone over a unix socket: ok")
    print(f"PASS ({time.monotonic() - started:.1f} s)")


def run(masters, maxmemory):
    with RedisCluster(masters=masters, maxmemory=maxmemory) as cluster:
        print(" ".join(cluster.urls()), flush=True)
        stop = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.append(True))
        while not stop:
            time.sleep(0.2)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["selftest", "run"])
    parser.add_argument("--masters", type=int, default=3)
    parser.add_argument("--maxmemory", default="256mb")
    args = parser.parse_args(argv)
    try:
        (selftest if args.command == "selftest" else run)(args.masters, args.maxmemory)
    except ClusterError as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
