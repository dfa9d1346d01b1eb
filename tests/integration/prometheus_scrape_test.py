#!/usr/bin/env python3
"""A real Prometheus scrapes a real lmcache-server.

Starts lmcache-server with its HTTP endpoint on a free loopback port, checks
its /metrics with `promtool check metrics`, starts Debian's `prometheus` with a
scrape config pointing at it, drives some requests over ZMQ like a client, and
queries Prometheus's HTTP API until it returns lmcache_mp_l1_memory_usage_bytes
and a non-zero request counter. Bounded in time; exits 77 (ctest: skipped)
with a message when prometheus is not installed.

Usage: prometheus_scrape_test.py LMCACHE_SERVER_BINARY
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

import msgpack
import zmq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from free_ports import free_tcp_ports  # noqa: E402 (needs the path above)

DEADLINE_S = 90


def wait_for(what, check, seconds):
    deadline = time.monotonic() + seconds
    last = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
        except Exception as error:  # not up yet
            last = error
        time.sleep(0.2)
    raise SystemExit(f"FAIL: {what} within {seconds} s (last error: {last})")


def get(url):
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read().decode()


def query(prom_port, expr):
    body = json.loads(get(f"http://127.0.0.1:{prom_port}/api/v1/query?query=" +
                          urllib.parse.quote(expr)))
    return body["data"]["result"]


def drive_traffic(url):
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.connect(url)
    for uid in range(20):
        sock.send_multipart([msgpack.packb(uid), msgpack.packb(22), msgpack.packb(None)])  # ping
        sock.recv_multipart()
    sock.close(0)
    ctx.term()


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    server_binary = sys.argv[1]
    prometheus = shutil.which("prometheus")
    promtool = shutil.which("promtool")
    if not prometheus or not promtool:
        print("SKIPPED: Debian's prometheus package is not installed "
              "(apt install prometheus; tools/dev.sh deps installs it)")
        return 77
    work = tempfile.mkdtemp(prefix="lmcache_prom_")
    http_port, prom_port = free_tcp_ports(2)
    url = f"ipc://{work}/server.sock"
    procs = []
    try:
        server = subprocess.Popen(
            [server_binary, "--l1-size-gb", "0.25", "--url", url, "--port", "0",
             "--http-port", str(http_port), "--drain-timeout-seconds", "0"],
            stdout=open(f"{work}/server.log", "wb"), stderr=subprocess.STDOUT)
        procs.append(server)
        metrics = wait_for("the server's /metrics",
                           lambda: get(f"http://127.0.0.1:{http_port}/metrics"), 30)
        lint = subprocess.run([promtool, "check", "metrics"], input=metrics.encode(),
                              capture_output=True)
        if lint.returncode != 0:
            raise SystemExit("FAIL: promtool check metrics:\n" + lint.stdout.decode() +
                             lint.stderr.decode())
        print("promtool check metrics: OK")
        with open(f"{work}/prometheus.yml", "w") as config:
            config.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                         "scrape_configs:\n  - job_name: lmcache\n"
                         f"    static_configs:\n      - targets: ['127.0.0.1:{http_port}']\n")
        prom = subprocess.Popen(
            [prometheus, f"--config.file={work}/prometheus.yml",
             f"--storage.tsdb.path={work}/tsdb", f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=open(f"{work}/prometheus.log", "wb"), stderr=subprocess.STDOUT)
        procs.append(prom)
        drive_traffic(url)
        usage = wait_for("lmcache_mp_l1_memory_usage_bytes in Prometheus",
                         lambda: query(prom_port, "lmcache_mp_l1_memory_usage_bytes"), DEADLINE_S)
        print("scraped:", usage[0]["metric"].get("__name__"), usage[0]["value"])
        requests = wait_for(
            "a non-zero request counter in Prometheus",
            lambda: [r for r in query(prom_port, 'lmcache_mp_requests_total{operation="ping"}')
                     if float(r["value"][1]) > 0], DEADLINE_S)
        print("scraped: ping requests =", requests[0]["value"][1])
        up = query(prom_port, 'up{job="lmcache"}')
        if not up or up[0]["value"][1] != "1":
            raise SystemExit(f"FAIL: the scrape target is not up: {up}")
        print("PASS")
        return 0
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        if os.environ.get("LMC_KEEP_WORK"):
            print("work dir kept:", work)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
