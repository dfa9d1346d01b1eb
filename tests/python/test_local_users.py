"""Who may connect (issue 44, section 6): over a loopback tcp endpoint a
process of another local user than the server's is refused, each request
answered with PERMISSION_DENIED (105) and its declared failure value, so it
cannot learn which of another user's prompts are cached; the server's own
user is served; --allow-uids admits the users it names. The other user is
nobody (uid 65534), reached by a child that drops root before it connects;
its client is inline Python with only zmq and msgpack, so that it reads no
file of this checkout (which nobody may not be allowed to read)."""

import json
import os
import subprocess
import sys
import time

import pytest

from mp_client import Client, free_tcp_ports, start_server, stats

NOBODY = 65534

# Sends server_info and a lookup by name, prints each reply's error frame
# (null when served) as JSON.
CLIENT = r"""
import json, sys, msgpack, zmq
sock = zmq.Context().socket(zmq.DEALER)
sock.setsockopt(zmq.LINGER, 0)
sock.connect(sys.argv[1])
out = []
for uid, op in enumerate(["server_info", "stats"]):
    sock.send_multipart([msgpack.packb(uid), msgpack.packb(op)])
    if not sock.poll(30000):
        out.append("no reply")
        continue
    frames = sock.recv_multipart()
    out.append(msgpack.unpackb(frames[3], raw=False) if len(frames) > 3 else None)
print(json.dumps(out))
"""


# The review's attack (issue 62, section 2): `clear` behind 16 MiB of
# padding and 12,000 pings, the socket closed at once, so that the server
# reads the clear after the client's socket is gone (an orphan the kernel
# reports as uid 0: root, when the server runs as root).
CLEAR_AND_CLOSE = r"""
import sys, msgpack, zmq
ctx = zmq.Context()
sock = ctx.socket(zmq.DEALER)
sock.setsockopt(zmq.LINGER, -1)
sock.setsockopt(zmq.SNDHWM, 0)
sock.connect(sys.argv[1])
sock.send_multipart([msgpack.packb(0), msgpack.packb("ping"), b"x" * (16 << 20)])
sock.send_multipart([msgpack.packb(1), msgpack.packb("clear")])
for uid in range(12000):
    sock.send_multipart([msgpack.packb(uid + 2), msgpack.packb("ping")])
sock.close()
ctx.term()
"""


def as_user(uid, url):
    """The errors of the inline client's two requests, run as `uid`."""
    def drop():
        os.setgid(uid)
        os.setuid(uid)
    done = subprocess.run([sys.executable, "-c", CLIENT, url], preexec_fn=drop, check=True,
                          capture_output=True, timeout=90, cwd="/")
    return json.loads(done.stdout)


def needs_root():
    if os.geteuid() != 0:
        pytest.skip("connecting as another local user needs root (to become nobody)")


def test_another_local_user_is_refused_over_loopback_tcp(binary, tmp_path, zmq_ctx):
    needs_root()
    url = f"tcp://127.0.0.1:{free_tcp_ports(1)[0]}"
    server = start_server(binary, url, tmp_path / "server.log", ["--l1-size-gb", "0.1"])
    try:
        errors = as_user(NOBODY, url)
        assert len(errors) == 2 and all(e is not None for e in errors), errors
        assert all(e["code"] == 105 for e in errors), errors
        assert "--allow-uids" in errors[0]["message"], errors
        own = Client(zmq_ctx, url)
        assert own.request("server_info").error is None  # the server's own user
        router = stats(own)["router"]
        assert router["refused_users"] == 2, router
        own.close()
        log = server.wait_for_log("refusing requests over TCP from uid 65534")
        assert log.count("from uid 65534") == 1, log  # once per uid
    finally:
        assert server.stop() == 0, server.log()


def test_a_request_read_after_its_client_closed_is_not_taken_as_roots(binary, tmp_path,
                                                                      zmq_ctx):
    needs_root()
    url = f"tcp://127.0.0.1:{free_tcp_ports(1)[0]}"
    server = start_server(binary, url, tmp_path / "server.log",
                          ["--l1-size-gb", "0.1", "--admin-ops", "local"])
    try:
        def drop():
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        subprocess.run([sys.executable, "-c", CLEAR_AND_CLOSE, url], preexec_fn=drop, check=True,
                       capture_output=True, timeout=120, cwd="/")
        own = Client(zmq_ctx, url)
        deadline = time.monotonic() + 60
        while stats(own)["router"]["refused_users"] < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        router = stats(own)["router"]
        assert router["refused_users"] >= 2, router  # the padding's ping and the clear at least
        assert "clear(" not in server.log(), "a clear sent by nobody was executed"
        own.close()
    finally:
        assert server.stop() == 0, server.log()


def host_address():
    """An address of this host beyond loopback, or None."""
    import socket
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: this picks the outgoing address
        address = probe.getsockname()[0]
    except OSError:
        return None
    finally:
        probe.close()
    return None if address.startswith("127.") else address


def test_another_local_user_is_refused_through_the_hosts_own_address(binary, tmp_path):
    """Bound beyond loopback, the endpoint still refuses a local user of
    another uid who connects to the host's own address: the kernel knows its
    socket, whatever the address."""
    needs_root()
    address = host_address()
    if address is None:
        pytest.skip("this host has no address beyond loopback")
    port = free_tcp_ports(1)[0]
    server = start_server(binary, f"tcp://0.0.0.0:{port}", tmp_path / "server.log",
                          ["--l1-size-gb", "0.1"])
    try:
        errors = as_user(NOBODY, f"tcp://{address}:{port}")
        assert [e and e["code"] for e in errors] == [105, 105], errors
    finally:
        assert server.stop() == 0, server.log()


def test_allow_uids_admits_the_users_it_names(binary, tmp_path):
    needs_root()
    url = f"tcp://127.0.0.1:{free_tcp_ports(1)[0]}"
    for allowed in ("nobody", "all"):
        server = start_server(binary, url, tmp_path / f"server-{allowed}.log",
                              ["--l1-size-gb", "0.1", "--allow-uids", allowed])
        try:
            assert as_user(NOBODY, url) == [None, None], allowed
        finally:
            assert server.stop() == 0, server.log()


def test_allow_uids_refuses_a_name_that_is_no_user(binary, tmp_path):
    done = subprocess.run([binary, "--allow-uids", "no-such-user-here", "--l1-size-gb", "0.1"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "--allow-uids: 'no-such-user-here' is neither a uid nor a user" in \
        done.stdout + done.stderr


def test_a_models_own_endpoints_are_guarded_as_the_main_one(binary, tmp_path, zmq_ctx):
    """The endpoints of --model-url (issue 63) are surfaces of their own: a
    tcp one refuses another local user as --url does, an ipc one is a socket
    file only the server's user may open (0600), and both serve the owner."""
    needs_root()
    main_port, glm_port = free_tcp_ports(2)
    glm_url = f"tcp://127.0.0.1:{glm_port}"
    qwen_path = tmp_path / "qwen.sock"
    server = start_server(binary, f"tcp://127.0.0.1:{main_port}", tmp_path / "server.log",
                          ["--l1-size-gb", "0.1",
                           "--model-chunk-size", "glm=640", "--model-url", f"glm={glm_url}",
                           "--model-chunk-size", "qwen=400",
                           "--model-url", f"qwen=ipc://{qwen_path}"])
    try:
        errors = as_user(NOBODY, glm_url)
        assert [e and e["code"] for e in errors] == [105, 105], errors
        assert (os.stat(qwen_path).st_mode & 0o777) == 0o600, oct(os.stat(qwen_path).st_mode)
        for url, size in ((glm_url, 640), (f"ipc://{qwen_path}", 400)):
            own = Client(zmq_ctx, url)
            assert own.call("get_chunk_size") == size, url
            own.close()
    finally:
        assert server.stop() == 0, server.log()
