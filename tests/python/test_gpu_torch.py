"""The CUDA-IPC path end to end with real PyTorch tensors, made the way
current vLLM makes them and wrapped the way the LMCache MP connector wraps
them (../shared/reference/gpu-registration.md): runs only where PyTorch sees
a CUDA device (the GPU kit, tools/gpu_kit/, runs it there); skipped
elsewhere, where test_gpu_emulated.py runs the same flows on the emulation.

What is real here: the tensors (torch.empty on the GPU, as_strided views),
the IPC handles (UntypedStorage._share_cuda_(): PyTorch >= 2.5's 66-byte
versioned 'c' handle of the caching allocator's segment, the storage's byte
offset in it, the refcounter file), the interprocess events
(torch.cuda.Event(interprocess=True).ipc_handle()), and the worker
processes (spawned, one CUDA context each). The wrapper class is LMCache's
CudaIPCWrapper by name and attribute layout (make_ipc_pickles.py), pickled
by Python's own pickle with PyTorch's own dtypes, after LMCache's
attempt_permute_to_contiguous_view.

Layouts (vLLM version in brackets):
  lbhnc        [>= 0.29] every layer an as_strided [NB, NH, BS, 2*HS] bf16
               view into one int8 allocation (format 12, hint LBHNC)
  mla          [<= 0.28] per layer a [NB, BS, 576] bf16 tensor (format 3),
               separate allocations of one caching-allocator segment
  flash_attn   [<= 0.22] per layer a [2, NB, BS, NH, HS] bf16 tensor
               (FlashAttention, format 1, hint NHD)
For each: worker A fills its cache from a seed, stores a two-chunk prompt
from its blocks; worker B, another process, retrieves it into other block
ids and compares on its GPU with the same seed's cache; then both leave and
the server closes every mapping. A worker killed while its store waits on
its event leaves no object, no lease and no mapping behind.
"""

import multiprocessing
import os
import signal
import time
import uuid

import pytest

# PyTorch first: on the GPU machine its libraries are loaded before the kit's
# (libzmq's, through the zmq stand-in), so a library both name is PyTorch's.
try:
    import torch
    if not hasattr(torch, "cuda"):  # make_ipc_pickles' stand-in, where PyTorch is not installed
        torch = None
except ImportError:  # CI: no PyTorch
    torch = None

from mp_client import (OP_END_SESSION, OP_LOOKUP, OP_QUERY_PREFETCH_STATUS, Client, ServerStartError,
                       free_tcp_port, make_key, new_instance_id, random_tokens, server_binary,
                       start_server, stats)


CHUNK = 256
BLOCK = 16
BLOCKS = 64
LAYERS = 4
HEADS = 8
HEAD_SIZE = 128
MLA_WIDTH = 576
PROMPT_CHUNKS = 2
EVENT_TIMEOUT_MS = 3000
LAYOUTS = ("lbhnc", "mla", "flash_attn")


def torch_cuda_or_skip():
    if torch is None or not torch.cuda.is_available():
        pytest.skip(f"needs PyTorch with a CUDA device ({'no PyTorch' if torch is None else 'no device'} "
                    "here; the GPU kit runs it on one)")


# ------------------------------------------------------------ the worker side


def make_cache(layout, seed):
    """The per-layer KV tensors vLLM hands the connector, filled from `seed`
    (every byte of the allocation, so the same seed makes the same cache)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    if layout == "lbhnc":
        per_layer = BLOCKS * HEADS * BLOCK * 2 * HEAD_SIZE  # bf16 elements
        raw = torch.empty(LAYERS * per_layer * 2, dtype=torch.int8, device="cuda")
        raw.copy_(torch.randint(-128, 128, raw.shape, generator=gen, device="cuda", dtype=torch.int8))
        as_bf16 = raw.view(torch.bfloat16)
        shape = (BLOCKS, HEADS, BLOCK, 2 * HEAD_SIZE)
        stride = (HEADS * BLOCK * 2 * HEAD_SIZE, BLOCK * 2 * HEAD_SIZE, 2 * HEAD_SIZE, 1)
        layers = [as_bf16.as_strided(shape, stride, storage_offset=l * per_layer) for l in range(LAYERS)]
        return layers, "LBHNC", [raw]
    if layout == "mla":
        layers = []
        for _ in range(LAYERS):
            t = torch.empty((BLOCKS, BLOCK, MLA_WIDTH), dtype=torch.bfloat16, device="cuda")
            t.view(torch.int16).copy_(torch.randint(-2**15, 2**15, t.shape, generator=gen, device="cuda",
                                                    dtype=torch.int16))
            layers.append(t)
        return layers, "NHD", layers
    if layout == "flash_attn":
        layers = []
        for _ in range(LAYERS):
            t = torch.empty((2, BLOCKS, BLOCK, HEADS, HEAD_SIZE), dtype=torch.bfloat16, device="cuda")
            t.view(torch.int16).copy_(torch.randint(-2**15, 2**15, t.shape, generator=gen, device="cuda",
                                                    dtype=torch.int16))
            layers.append(t)
        return layers, "NHD", layers
    raise ValueError(layout)


def block_view(layout, tensor, block):
    """One block of one layer, as 16-bit integers: compared bit for bit (random
    bytes read as bfloat16 hold NaNs, which torch.equal calls unequal)."""
    view = tensor[:, block] if layout == "flash_attn" else tensor[block]
    return view.view(torch.int16)


def wrap(tensor):
    """msgpack ext 1 holding pickle.dumps(CudaIPCWrapper(tensor)), as LMCache
    makes it: the view permuted into physical order unless PyTorch calls it
    contiguous, the storage shared with _share_cuda_()."""
    import pickle

    import msgpack

    import make_ipc_pickles as wrappers

    if not tensor.is_contiguous():
        order = sorted(range(tensor.dim()), key=lambda i: tensor.stride(i), reverse=True)
        tensor = tensor.permute(order)
    cls = wrappers.CUDA[wrappers.NEWEST]
    w = cls.__new__(cls)
    w.handle = tensor.untyped_storage()._share_cuda_()
    w.dtype = tensor.dtype
    w.shape = tuple(tensor.shape)
    w.stride = tuple(tensor.stride())
    w.storage_offset = tensor.storage_offset()
    w.device_uuid = str(torch.cuda.get_device_properties(tensor.device).uuid)
    return msgpack.ExtType(1, pickle.dumps(w))


def engine_event():
    """An interprocess event recorded now on the current stream, and its 64-byte handle."""
    event = torch.cuda.Event(interprocess=True)
    event.record()
    return event, bytes(event.ipc_handle())


def wait_server_event(handle):
    torch.cuda.Event.from_ipc_handle(torch.cuda.current_device(), handle).synchronize()


def worker_main(role, url, layout, model, seed, ids, peer_ids, tokens, inbox, outbox):
    """One engine process: registers its cache, then stores (role "store"),
    retrieves and compares ("retrieve"), or stores and waits to be killed
    with its event never recorded ("killed")."""
    import zmq

    torch.cuda.set_device(0)
    ctx = zmq.Context()
    client = Client(ctx, url, reply_timeout_s=60)
    instance = new_instance_id()
    try:
        layers, hint, keep_alive = make_cache(layout, seed if role != "retrieve" else seed + 1)
        torch.cuda.synchronize()
        reply = client.request("register_kv_cache", instance, [wrap(t) for t in layers], model, 1,
                               "vllm", {"kv_layout": hint}, [])
        if reply.error is not None:
            outbox.put(("error", f"register_kv_cache: {reply.error}"))
            return
        request_id = f"{role}-{uuid.uuid4().hex[:8]}"
        key = make_key(tokens, 0, len(tokens), request_id, model=model)
        if role == "killed":
            # A long kernel before the event: the server's transfer waits on it
            # when this process dies.
            torch.cuda._sleep(4_000_000_000)
            event, handle = engine_event()
            client.send("store", key, instance, [ids], handle)
            outbox.put(("sent", None))
            time.sleep(3600)
            return
        if role == "store":
            event, handle = engine_event()
            reply = client.request("store", key, instance, [ids], handle)
            if reply.error is not None or reply.value[1] is not True:
                outbox.put(("error", f"store: {reply}"))
                return
            wait_server_event(reply.value[0])
            outbox.put(("stored", None))
        else:
            scheduler = Client(ctx, url, reply_timeout_s=60)
            lookup_key = make_key(tokens, 0, len(tokens), request_id, worker_id=None, model=model)
            assert scheduler.call(OP_LOOKUP, lookup_key, 1) is None
            hits = scheduler.call(OP_QUERY_PREFETCH_STATUS, request_id)
            if hits != PROMPT_CHUNKS:
                outbox.put(("error", f"lookup found {hits} of {PROMPT_CHUNKS} chunks"))
                return
            event, handle = engine_event()
            reply = client.request("retrieve", key, instance, [ids], handle, 0)
            if reply.error is not None or reply.value[1] is not True:
                outbox.put(("error", f"retrieve: {reply}"))
                return
            wait_server_event(reply.value[0])
            assert scheduler.call(OP_END_SESSION, request_id) is None
            scheduler.close()
            # The store's cache, made again from its seed, compared on the GPU.
            expected, _, _ = make_cache(layout, seed)
            bad = []
            for l, (got, want) in enumerate(zip(layers, expected)):
                for mine, theirs in zip(ids, peer_ids):
                    if not torch.equal(block_view(layout, got, mine), block_view(layout, want, theirs)):
                        bad.append((l, theirs, mine))
            untouched = [b for b in range(1, BLOCKS) if b not in ids]
            fresh, _, _ = make_cache(layout, seed + 1)
            changed = sum(1 for l in range(LAYERS) for b in untouched
                          if not torch.equal(block_view(layout, layers[l], b), block_view(layout, fresh[l], b)))
            outbox.put(("compared", {"bad_blocks": bad, "changed_elsewhere": changed}))
        inbox.get(timeout=600)  # stay registered until the parent has looked
        client.call("unregister_kv_cache", instance)
    except Exception as e:  # reported to the parent, and the exit status says so
        outbox.put(("error", repr(e)))
        raise
    finally:
        client.close()
        ctx.destroy(linger=0)


# ------------------------------------------------------------ the parent side


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    torch_cuda_or_skip()
    tmp = tmp_path_factory.mktemp("torch")
    args = ["--l1-size-gb", "2", "--chunk-size", str(CHUNK), "--port", str(free_tcp_port()),
            "--http-port", "0", "--drain-timeout-seconds", "0", "--gpu-backend", "cuda",
            "--gpu-event-timeout-ms", str(EVENT_TIMEOUT_MS)]
    try:
        srv = start_server(server_binary(), f"ipc://{tmp / 'lmc.sock'}", tmp / "server.log", args)
    except ServerStartError as e:
        pytest.fail(str(e))
    yield srv
    assert srv.stop(timeout=60) == 0, srv.log()


@pytest.fixture(scope="module")
def observer(server):
    import zmq

    ctx = zmq.Context()
    c = Client(ctx, server.url)
    yield c
    c.close()
    ctx.destroy(linger=0)


def spawn(role, server, layout, model, seed, ids, peer_ids, tokens):
    mp = multiprocessing.get_context("spawn")
    inbox, outbox = mp.Queue(), mp.Queue()
    p = mp.Process(target=worker_main, args=(role, server.url, layout, model, seed, ids, peer_ids, tokens,
                                             inbox, outbox))
    p.start()
    return p, inbox, outbox


def expect(outbox, what, server, timeout=180):
    kind, value = outbox.get(timeout=timeout)
    assert kind == what, f"{kind}: {value}\n{server.log()[-4000:]}"
    return value


def wait_for(observer, predicate, what, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        s = stats(observer)
        if predicate(s):
            return s
        assert time.monotonic() < deadline, f"{what}: {s['gpu']} {s['l1']}"
        time.sleep(0.05)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_prompt_stored_by_one_torch_worker_is_retrieved_into_another(server, observer, layout):
    import numpy as np

    rng = np.random.default_rng(LAYOUTS.index(layout))
    model = f"torch/{layout}/{uuid.uuid4().hex[:6]}"
    tokens = random_tokens(rng, PROMPT_CHUNKS * CHUNK)
    blocks = PROMPT_CHUNKS * CHUNK // BLOCK
    ids_a = [int(i) for i in rng.choice(np.arange(1, BLOCKS), size=blocks, replace=False)]
    ids_b = [int(i) for i in rng.choice(np.arange(1, BLOCKS), size=blocks, replace=False)]
    seed = 1000 + LAYOUTS.index(layout)
    before = stats(observer)["gpu"]["mapped_allocations"]
    a = spawn("store", server, layout, model, seed, ids_a, ids_b, tokens)
    b = None
    try:
        expect(a[2], "stored", server)
        b = spawn("retrieve", server, layout, model, seed, ids_b, ids_a, tokens)
        result = expect(b[2], "compared", server)
        assert result["bad_blocks"] == [], f"blocks (layer, from, to) that differ: {result['bad_blocks'][:10]}"
        assert result["changed_elsewhere"] == 0, "the retrieve wrote blocks it was not given"
        s = stats(observer)
        assert s["gpu"]["mapped_allocations"] >= before + 2, s["gpu"]
    finally:
        for proc in (a, b):
            if proc is not None:
                proc[1].put("exit")
                proc[0].join(timeout=120)
                if proc[0].is_alive():
                    proc[0].kill()
    for proc in (a, b):
        assert proc is not None and proc[0].exitcode == 0, f"worker exited with {proc and proc[0].exitcode}"
    wait_for(observer, lambda s: s["gpu"]["mapped_allocations"] == before and
             s["gpu"]["transfers_in_flight"] == 0, "the departed workers' mappings stayed open")


def test_a_worker_killed_mid_store_leaves_nothing_behind(server, observer):
    import numpy as np

    rng = np.random.default_rng(99)
    model = f"torch/killed/{uuid.uuid4().hex[:6]}"
    tokens = random_tokens(rng, PROMPT_CHUNKS * CHUNK)
    ids = [int(i) for i in range(1, 1 + PROMPT_CHUNKS * CHUNK // BLOCK)]
    before = stats(observer)
    proc, _, outbox = spawn("killed", server, "lbhnc", model, 7, ids, ids, tokens)
    try:
        expect(outbox, "sent", server)
        wait_for(observer, lambda s: s["gpu"]["transfers_in_flight"] >= 1, "the store never started")
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(timeout=60)
    finally:
        if proc.is_alive():
            proc.kill()
    wait_for(observer, lambda s: s["gpu"]["mapped_allocations"] == before["gpu"]["mapped_allocations"]
             and s["gpu"]["transfers_in_flight"] == 0 and s["l1"]["write_leases"] == 0,
             "the killed worker's transfer, lease or mapping stayed", timeout=60 + EVENT_TIMEOUT_MS / 1000)
    # Whether a dead engine's event reads as complete or failed is the
    # driver's to say; either way a chunk is there whole or not at all.
    lookup_key = make_key(tokens, 0, len(tokens), "after-kill", worker_id=None, model=model)
    assert observer.call(OP_LOOKUP, lookup_key, 1) is None
    assert observer.call(OP_QUERY_PREFETCH_STATUS, "after-kill") in (0, PROMPT_CHUNKS)
    assert observer.call(OP_END_SESSION, "after-kill") is None
    assert stats(observer)["l1"]["locked_objects"] == 0
    assert observer.call("ping", None) is True
