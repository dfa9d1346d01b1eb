"""vLLM's LMCacheMPConnector dials f"{lmcache.mp.host}:{lmcache.mp.port}"
(vllm/distributed/kv_transfer/kv_connector/v1/lmcache_mp_connector.py): with
an ipc host, the port becomes part of the socket's file name. The DaemonSet
binds that name (docs/deploy/daemonset.yaml, docs/deploy/vllm.yaml); this
checks that the server binds and serves it, as the connector would build it.

    LMCACHE_SERVER_BINARY=build/src/lmcache-server /usr/bin/python3 -m pytest -q tests/python/test_connector_url.py
"""

import pytest

from mp_client import OP_PING, Client, ServerStartError, chunk_size, server_binary, start_server


def test_the_connectors_host_and_port_form_an_ipc_path_the_server_binds(tmp_path, zmq_ctx):
    extra_config = {"lmcache.mp.host": f"ipc://{tmp_path}/lmcache.sock", "lmcache.mp.port": 5555}
    server_url = f"{extra_config['lmcache.mp.host']}:{extra_config['lmcache.mp.port']}"
    try:
        srv = start_server(server_binary(), server_url, tmp_path / "server.log",
                           ["--l1-size-gb", "0.05", "--http-port", "0", "--drain-timeout-seconds", "0"])
    except ServerStartError as e:
        pytest.fail(str(e))
    try:
        assert (tmp_path / "lmcache.sock:5555").is_socket()
        client = Client(zmq_ctx, server_url)
        assert client.call(OP_PING) is True
        assert chunk_size(client) == 256
        client.close()
    finally:
        assert srv.stop(timeout=60) == 0, srv.log()
