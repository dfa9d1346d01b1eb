"""The operator's page (issue 44, section 7) in a real headless browser
(Debian's chromium): GET /dashboard loads without a console error, asks for
nothing but the server's own /status, and once its script ran shows the
figures the stats operation reports at the same moment (the server is idle
between the two reads, so they agree exactly), and plots the last minutes
(issue 65, section 7) from its own polling: one per series, each agreeing
with the reply it was drawn from."""

import os
import re
import shutil
import subprocess
import time
import urllib.request

import numpy as np
import pytest

from mp_client import (Client, free_tcp_ports, lookup, new_instance_id, random_tokens, register,
                       map_pool, start_server, stats, store_prompt)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def rendered_dom(url, profile_dir):
    """The page's DOM after its script ran, and the browser's log."""
    done = subprocess.run(
        [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-extensions", "--disable-background-networking", f"--user-data-dir={profile_dir}",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", "--dump-dom", url],
        capture_output=True, text=True, timeout=120, check=True)
    return done.stdout, done.stderr


def plots(dom):
    """data-series -> (data-points, data-last or None) of every plot the page draws."""
    found = {}
    for tag in re.finditer(r"<svg[^>]*>", dom):
        attrs = dict(re.findall(r'data-([a-z]+)="([^"]*)"', tag.group(0)))
        if "series" in attrs:
            found[attrs["series"]] = (int(attrs["points"]), attrs.get("last"))
    return found


def figures(dom):
    """data-field -> data-value of every figure the page shows."""
    return {m.group(1): m.group(2)
            for m in re.finditer(r'data-field="([^"]+)" data-value="([^"]*)"', dom)}


def test_the_dashboard_shows_what_the_stats_operation_reports(binary, tmp_path, zmq_ctx):
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (tools/dev.sh deps installs it)")
        pytest.skip("chromium is not installed")
    url_port, http_port = free_tcp_ports(2)
    url = f"tcp://127.0.0.1:{url_port}"
    server = start_server(binary, url, tmp_path / "server.log",
                          ["--l1-size-gb", "0.1", "--http-port", str(http_port),
                           "--http-admin-open", "--quota", "tenant-a=0.5",
                           "--l2-adapter", '{"type": "mock"}'])
    try:
        page = urllib.request.urlopen(f"http://127.0.0.1:{http_port}/dashboard")
        csp = page.headers["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "connect-src 'self'" in csp, csp
        html = page.read().decode()
        assert not re.search(r"(src|href)=\"?(https?:)?//", html), "the page loads from elsewhere"

        client = Client(zmq_ctx, url)
        instance_id = new_instance_id()
        reg = register(client, instance_id)
        pool = map_pool(reg["shm_name"], reg["pool_size"])
        rng = np.random.default_rng(3)
        tokens = random_tokens(rng, 4 * 256)
        store_prompt(client, pool, instance_id, tokens, 4, "dash", rng)
        assert lookup(client, tokens, "dash-lookup") == 4
        # With an L2 tier a miss is asked of it too: None while that lookup
        # runs (slow under a sanitizer), then 0.
        miss = random_tokens(rng, 2 * 256)
        deadline = time.monotonic() + 60
        while (found := lookup(client, miss, "dash-miss")) is None:
            assert time.monotonic() < deadline, "the miss was still pending after 60 s"
            time.sleep(0.05)
        assert found == 0

        # Idle from here: pre-faulting done (its progress moves the pool's
        # figures), the prompt written behind to the mock tier.
        deadline = time.monotonic() + 60
        while not (stats(client)["l1"]["prefault_done"]
                   and stats(client)["l2"]["adapters"][0]["stored_objects"] == 4):
            assert time.monotonic() < deadline, "the pool was not pre-faulted within 60 s"
            time.sleep(0.05)
        before = stats(client)
        dom, log = rendered_dom(f"http://127.0.0.1:{http_port}/dashboard", tmp_path / "profile")
        after = stats(client)
        client.close()

        assert 'data-state="ok"' in dom, dom[:2000]
        console = [line for line in log.splitlines() if "CONSOLE" in line]
        assert not console, console
        shown = figures(dom)
        for path in ["l1.capacity_bytes", "l1.resident_bytes", "l1.resident_objects",
                     "l1.locked_objects", "l1.staging_objects", "l1.quarantined_objects",
                     "lookup.lookups", "lookup.requested_tokens", "lookup.hit_tokens",
                     "quota.other_used_bytes", "quota.tenants.tenant-a.used_bytes"]:
            reported, later = before, after
            for key in path.split("."):
                reported, later = reported[key], later[key]
            # The server was idle: the figure did not move while the page read it.
            assert reported == later, (path, reported, later)
            assert path in shown, f"the page shows no {path}"
            assert float(shown[path]) == float(reported), (path, shown[path], reported)
        rate = before["lookup"]["hit_tokens"] / before["lookup"]["requested_tokens"]
        assert abs(float(shown["lookup.hit_rate"]) - rate) < 1e-9
        # The table of every figure follows the stats reply: each leaf shows.
        assert "eviction.passes" in shown and "router.received" in shown
        assert shown["quota.mode"] == before["quota"]["mode"] == "on"

        # The plots: one per series, drawn from the page's reads of /status
        # (several within the browser's 5 s of virtual time, one every 2 s).
        # The server was idle throughout: every rate is 0, and the usage is
        # what the stats reply says.
        drawn = plots(dom)
        adapter = before["l2"]["adapters"][0]["name"]
        assert adapter == "mock-1", adapter
        for name in ["l1.usage_ratio", "lookup.hit_rate", "l1.admitted_bytes",
                     "eviction.evicted_objects", f"l2.{adapter}.stored_bytes",
                     f"l2.{adapter}.loaded_bytes"]:
            assert name in drawn, f"no plot of {name}: {sorted(drawn)}"
        points, last = drawn["l1.usage_ratio"]
        assert points >= 2, drawn
        usage = before["l1"]["used_bytes"] / before["l1"]["capacity_bytes"]
        assert float(last) == usage, (last, usage)
        for name in ["l1.admitted_bytes", "eviction.evicted_objects", f"l2.{adapter}.stored_bytes",
                     f"l2.{adapter}.loaded_bytes"]:
            points, last = drawn[name]
            assert points >= 1 and float(last) == 0, (name, drawn[name])
        # No lookup while the page read: no interval had a hit rate to draw.
        assert drawn["lookup.hit_rate"] == (0, None), drawn["lookup.hit_rate"]
    finally:
        assert server.stop() == 0, server.log()
