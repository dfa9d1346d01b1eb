// DeviceProbe: whether this server can reach a CUDA device, asked only when a
// worker registers a GPU KV cache, never at startup (field notes #4019: a CUDA
// context made at startup takes memory on a GPU nobody asked for). Built
// without the CUDA toolkit, the answer is always no.
//
// Thread-safety: any thread (the CUDA runtime's own guarantees).
#pragma once

#include "lmcache/status.h"

namespace lmcache::gpu {

// OK when at least one CUDA device is visible; otherwise NOT_SUPPORTED with
// "no CUDA device visible to the server" and the reason.
Status CheckCudaDeviceVisible();

}  // namespace lmcache::gpu
