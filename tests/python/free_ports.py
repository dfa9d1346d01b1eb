"""Loopback tcp ports for tests and tools that start servers on them by number.

A port is drawn at random below the kernel's ephemeral range
(/proc/sys/net/ipv4/ip_local_port_range), where the kernel never hands one to
an outgoing connection or a port-0 listener on its own. Between the pick and
the server's bind, then, only another picker can take it: the tests of one
ctest run pick in many processes at once, and a server killed and restarted
on its port leaves the port free for a while. So every pick is written, under
an flock, to a registry shared by all pickers of one user
(tests/fakes/free_port.h keeps the same file in the same format), and a port
stays reserved there for RESERVE_S seconds: longer than any test's ctest
timeout, so no other test picks it while its test may still bind it.

The registry is one line per port, "PORT EXPIRY" (EXPIRY in whole seconds of
the epoch), rewritten whole under the lock. Where it cannot be used (it
cannot be created or locked, or is not a regular file of this user's), picks
go unregistered, as before it existed; where the range has no free port
left, the kernel picks one.

LMCACHE_TEST_PORT_REGISTRY (a path) and LMCACHE_TEST_PORT_RANGE ("LOW-HIGH",
both included) replace the registry and the range, for the picker's own tests.
"""

import fcntl
import os
import random
import socket
import stat
import time

RESERVE_S = 900  # > the longest ctest TIMEOUT of a test that picks ports (600 s)
LOWEST_PORT = 10000
ATTEMPTS = 200


def _ephemeral_port_floor():
    """The lowest port the kernel hands out on its own (bind to port 0, an
    outgoing connection, a UCX listener): a port below it is taken only by
    someone who asked for it by number."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def pick_range():
    """(low, high), both included, the ports picks are drawn from; None where
    the ephemeral range starts too low to leave room below it."""
    override = os.environ.get("LMCACHE_TEST_PORT_RANGE")
    if override:
        low, high = (int(part) for part in override.split("-"))
        return low, high
    floor = _ephemeral_port_floor()
    return (LOWEST_PORT, floor - 1) if floor > LOWEST_PORT + 2000 else None


def registry_path():
    """LMCACHE_TEST_PORT_REGISTRY, else lmcache-test-ports.UID in $TMPDIR where
    that is a directory, else in /tmp: the rule free_port.h follows too, so
    both languages always meet in one file."""
    override = os.environ.get("LMCACHE_TEST_PORT_REGISTRY")
    if override:
        return override
    tmpdir = os.environ.get("TMPDIR")
    directory = tmpdir if tmpdir and os.path.isdir(tmpdir) else "/tmp"
    return os.path.join(directory, f"lmcache-test-ports.{os.getuid()}")


def _open_registry():
    """The registry, opened and flocked; None where it cannot be (then picks go
    unregistered). Never follows a symbolic link and takes only a regular file
    of this user's: in a shared /tmp another user could otherwise plant a link
    to a file of ours, which the rewrite would truncate."""
    try:
        fd = os.open(registry_path(), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
    except OSError:
        return None
    registry = os.fdopen(fd, "r+")
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            registry.close()
            return None
        fcntl.flock(fd, fcntl.LOCK_EX)  # Python retries it after a signal (PEP 475)
    except OSError:
        registry.close()
        return None
    return registry


def _read_reservations(f, now):
    """{port: expiry} of the registry's unexpired lines; malformed ones are dropped."""
    f.seek(0)
    reserved = {}
    for line in f.read().splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0].isdigit() and fields[1].isdigit():
            if int(fields[1]) > now:
                reserved[int(fields[0])] = int(fields[1])
    return reserved


def _write_reservations(f, reserved):
    """Rewrites the registry: written over from the start, then cut to length,
    so a writer killed midway leaves the reservations it had read."""
    f.seek(0)
    f.write("".join(f"{port} {expiry}\n" for port, expiry in sorted(reserved.items())))
    f.flush()
    f.truncate()


def _bind_one(s, ports, reserved):
    """Binds `s` to a random port of `ports` that is neither reserved nor in
    use; False when ATTEMPTS draws found none."""
    for _ in range(ATTEMPTS if ports else 0):
        port = random.randint(*ports)
        if port in reserved:
            continue
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            continue
    return False


def free_tcp_ports(count):
    """`count` distinct loopback ports nobody listens on now and no other
    picker of this user was handed in the last RESERVE_S seconds, each held
    bound until all are picked."""
    ports = pick_range()
    sockets = []
    registry = _open_registry()
    try:
        now = int(time.time())
        reserved = _read_reservations(registry, now) if registry is not None else {}
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(s)
            if not _bind_one(s, ports, reserved):
                s.bind(("127.0.0.1", 0))
            reserved[s.getsockname()[1]] = now + RESERVE_S
        if registry is not None:
            _write_reservations(registry, reserved)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()
        if registry is not None:
            registry.close()  # and with it the lock


def free_tcp_port():
    """One port as free_tcp_ports picks them."""
    return free_tcp_ports(1)[0]
