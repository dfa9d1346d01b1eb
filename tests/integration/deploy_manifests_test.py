#!/usr/bin/env python3
"""The deployment files in docs/ parse and say what docs/deploy/README.md says.

Checks docs/deploy/daemonset.yaml (every YAML document parses; the DaemonSet
has hostIPC, probes on /healthcheck:8080, memory request = limit and larger
than the pool, a grace period longer than preStop + drain, the socket path in
the args and in a hostPath volume), docs/deploy/vllm.yaml (an engine beside
it: the connector's JSON parses and dials a URL the DaemonSet binds, hostIPC,
the server's uid, the socket directory), docs/deploy/lmcache-server.service (its
sections and a stop timeout longer than the drain) and that
docs/grafana-dashboard.json is a dashboard whose queries use served metrics.

Usage: deploy_manifests_test.py REPO_ROOT
"""
import configparser
import json
import re
import sys

import yaml


def fail(message):
    raise SystemExit("FAIL: " + message)


def flag(args, name):
    if name not in args:
        fail(f"{name} missing from the server's args")
    return args[args.index(name) + 1]


def gib(quantity):
    match = re.fullmatch(r"(\d+)Gi", quantity)
    if not match:
        fail(f"memory quantity {quantity!r} is not in Gi")
    return int(match.group(1))


def check_daemonset(path):
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    kinds = [d["kind"] for d in docs]
    if "DaemonSet" not in kinds:
        fail(f"no DaemonSet in {path}: {kinds}")
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    if ds["spec"]["selector"]["matchLabels"].items() - \
            ds["spec"]["template"]["metadata"]["labels"].items():
        fail("the selector does not match the pod template's labels")
    if pod.get("hostIPC") is not True:
        fail("hostIPC must be true: engines in other pods map the pool from the node's /dev/shm")
    server = next(c for c in pod["containers"] if c["name"] == "lmcache-server")
    args = server["args"]
    pool_gib = float(flag(args, "--l1-size-gb"))
    drain = float(flag(args, "--drain-timeout-seconds"))
    url = flag(args, "--url")
    port = int(flag(args, "--http-port"))
    if flag(args, "--http-host") != "0.0.0.0":
        fail("the kubelet probes the pod IP: --http-host must be 0.0.0.0")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = server[probe]["httpGet"]
        if get["path"] != "/healthcheck" or int(get["port"]) != port:
            fail(f"{probe} must GET /healthcheck on {port}: {get}")
    live = server["livenessProbe"]
    if live["periodSeconds"] * live["failureThreshold"] <= drain:
        fail("the liveness probe would kill a draining server")
    resources = server["resources"]
    request, limit = gib(resources["requests"]["memory"]), gib(resources["limits"]["memory"])
    if request != limit:
        fail(f"memory request {request}Gi != limit {limit}Gi")
    if request <= pool_gib:
        fail(f"memory {request}Gi must include the {pool_gib} GiB pool")
    prestop = " ".join(server["lifecycle"]["preStop"]["exec"]["command"])
    sleep = float(re.search(r"sleep (\d+)", prestop).group(1))
    if pod["terminationGracePeriodSeconds"] <= sleep + drain:
        fail("terminationGracePeriodSeconds must exceed preStop + the drain timeout")
    socket_dir = url.removeprefix("ipc://").rsplit("/", 1)[0]
    mounts = {m["name"]: m["mountPath"] for m in server["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    shared = [n for n, p in mounts.items() if p == socket_dir and "hostPath" in volumes.get(n, {})]
    if not shared:
        fail(f"the socket directory {socket_dir} is not a hostPath volume shared with engines")
    security = server["securityContext"]
    if not security.get("runAsNonRoot") or security.get("allowPrivilegeEscalation") is not False:
        fail("the server container must run as non-root without privilege escalation")
    check_fleet_service(docs, ds, server, path)
    print(f"daemonset: OK (pool {pool_gib:g} GiB, memory {request}Gi, drain {drain:g} s)")


def check_fleet_service(docs, ds, server, path):
    """The headless Service P2P's dns:// peers resolve: it selects the
    DaemonSet's pods, lists their own IPs (clusterIP None), and its port is
    the fleet endpoint the commented P2P args bind and POD_IP advertises."""
    service = next((d for d in docs if d["kind"] == "Service"
                    and d["metadata"]["name"] == "lmcache-fleet"), None)
    if service is None:
        fail(f"no Service lmcache-fleet in {path}")
    spec = service["spec"]
    if spec.get("clusterIP") != "None":
        fail("lmcache-fleet must be headless (clusterIP: None): peers need every pod's own IP")
    if spec["selector"].items() - ds["spec"]["template"]["metadata"]["labels"].items():
        fail("lmcache-fleet does not select the DaemonSet's pods")
    if service["metadata"]["namespace"] != ds["metadata"]["namespace"]:
        fail("lmcache-fleet must be in the DaemonSet's namespace")
    fleet_port = next((p for p in server["ports"] if p["name"] == "fleet"), None)
    if fleet_port is None or [p["port"] for p in spec["ports"]] != [fleet_port["containerPort"]]:
        fail(f"lmcache-fleet's port must be the container's fleet port: {spec['ports']}")
    env = {e["name"]: e for e in server.get("env", [])}
    if env.get("POD_IP", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") != \
            "status.podIP":
        fail("POD_IP (for --p2p-advertise-url) must come from status.podIP")
    with open(path) as f:
        text = f.read()
    name = f"dns://lmcache-fleet.{service['metadata']['namespace']}.svc.cluster.local:" \
           f"{fleet_port['containerPort']}"
    if name not in text or f"$(POD_IP):{fleet_port['containerPort']}" not in text:
        fail(f"the P2P args must name {name} and advertise $(POD_IP) on the fleet port")


def daemonset_urls(path):
    with open(path) as f:
        ds = next(d for d in yaml.safe_load_all(f) if d and d["kind"] == "DaemonSet")
    args = next(c for c in ds["spec"]["template"]["spec"]["containers"]
                if c["name"] == "lmcache-server")["args"]
    return [args[i + 1] for i, a in enumerate(args) if a == "--url"]


def check_vllm(path, daemonset_path):
    """The vLLM engine beside the DaemonSet: vLLM's LMCacheMPConnector dials
    f"{lmcache.mp.host}:{lmcache.mp.port}" (lmcache_mp_connector.py), which must
    be an endpoint the DaemonSet's server binds."""
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    deployment = next((d for d in docs if d["kind"] == "Deployment"), None) or \
        fail(f"no Deployment in {path}")
    pod = deployment["spec"]["template"]["spec"]
    if pod.get("hostIPC") is not True:
        fail("the engine pod needs hostIPC: true to map the pool in the node's /dev/shm")
    if pod.get("securityContext", {}).get("runAsUser") != 10001:
        fail("the engine must run as the server's uid 10001 (socket and pool are mode 0600)")
    engine = pod["containers"][0]
    args = engine["args"]
    if "--disable-hybrid-kv-cache-manager" not in args:
        fail("LMCacheMPConnector refuses the hybrid KV cache manager")
    config = json.loads(flag(args, "--kv-transfer-config"))
    if config.get("kv_connector") != "LMCacheMPConnector" or config.get("kv_role") != "kv_both":
        fail(f"unexpected connector config {config}")
    extra = config["kv_connector_extra_config"]
    url = f"{extra['lmcache.mp.host']}:{extra['lmcache.mp.port']}"
    if url not in daemonset_urls(daemonset_path):
        fail(f"the connector dials {url}, which the DaemonSet does not bind")
    # The image has no CUDA toolkit: only the engine-driven (shared-memory) path serves.
    env = {e["name"]: e.get("value") for e in engine.get("env", [])}
    if extra.get("lmcache.mp.mp_transfer_mode") != "engine_driven" or \
            env.get("LMCACHE_MP_TRANSFER_MODE") != "engine_driven":
        fail("beside the CUDA-less image the connector must use engine_driven")
    socket_dir = url.removeprefix("ipc://").rsplit("/", 1)[0]
    mounts = {m["name"]: m["mountPath"] for m in engine["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    if not any(p == socket_dir and volumes.get(n, {}).get("hostPath", {}).get("path") == socket_dir
               for n, p in mounts.items()):
        fail(f"the engine does not mount the node's {socket_dir}")
    print(f"vllm: OK (dials {url}, engine_driven)")


def check_unit(path):
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    with open(path) as f:
        text = re.sub(r"\\\n\s*", " ", f.read())  # systemd line continuations
    unit.read_string(text)
    for section in ("Unit", "Service", "Install"):
        if section not in unit:
            fail(f"{path} has no [{section}]")
    service = unit["Service"]
    start = service["ExecStart"].split()
    if not start[0].endswith("lmcache-server"):
        fail(f"ExecStart does not run lmcache-server: {start[0]}")
    drain = float(flag(start, "--drain-timeout-seconds"))
    if float(service["TimeoutStopSec"]) <= drain:
        fail("TimeoutStopSec must exceed the drain timeout")
    if "User" not in service or service["User"] == "root":
        fail("the unit must run as a dedicated user")
    if service.get("KillSignal", "SIGTERM") != "SIGTERM":
        fail("SIGTERM starts the drain")
    print(f"systemd unit: OK (drain {drain:g} s, stop timeout {service['TimeoutStopSec']} s)")


def check_dashboard(path, metrics_doc):
    with open(path) as f:
        dashboard = json.load(f)
    with open(metrics_doc) as f:
        documented = set(re.findall(r"`(lmcache_mp_[a-z0-9_]+)`", f.read()))
    panels = dashboard.get("panels") or fail("the dashboard has no panels")
    used = set()
    for panel in panels:
        for target in panel.get("targets", []):
            used.update(re.findall(r"lmcache_mp_[a-z0-9_]+", target.get("expr", "")))
    if not used:
        fail("no panel queries an lmcache_mp_ metric")
    # Histogram queries name _bucket/_sum/_count series of a documented family.
    unknown = {m for m in used
               if m not in documented and re.sub(r"_(bucket|sum|count)$", "", m) not in documented}
    if unknown:
        fail(f"the dashboard queries metrics the server does not serve: {sorted(unknown)}")
    print(f"dashboard: OK ({len(panels)} panels, {len(used)} metrics)")


def main():
    root = sys.argv[1]
    check_daemonset(f"{root}/docs/deploy/daemonset.yaml")
    check_vllm(f"{root}/docs/deploy/vllm.yaml", f"{root}/docs/deploy/daemonset.yaml")
    check_unit(f"{root}/docs/deploy/lmcache-server.service")
    check_dashboard(f"{root}/docs/grafana-dashboard.json", f"{root}/docs/metrics.md")
    print("PASS")


if __name__ == "__main__":
    main()
