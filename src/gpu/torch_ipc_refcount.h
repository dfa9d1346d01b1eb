// TorchIpcRefCount: gives back PyTorch's IPC reference of each shared
// storage a registration used, as PyTorch's own receiver does when it frees
// a storage it rebuilt with _new_shared_cuda (StorageSharing.cpp), so the
// engine may free (or reuse) that memory once no receiver holds it.
//
// The sender's _share_cuda_() put a counter of 1 in slot handle[5] of the
// shared-memory file handle[4] (RefcountedMapAllocator: an int map count at
// byte 0, int64 slots from byte 64, 10000 of them). The receiver maps the
// file (map count + 1), decrements its slot, unmaps (map count - 1) and
// unlinks the file when the map count reaches 0 (the sender is gone).
// Files that are not shaped like one (too small or too large for the slot,
// one of this server's own segments) are left alone and logged: a client
// names the file, and a name must never make the server write elsewhere.
//
// Thread-safety: any thread; the counters are updated atomically.
#pragma once

#include <span>

#include "protocol/device_ipc_wrapper.h"

namespace lmcache::gpu {

// Decrements the refcounter slot of every CudaIPCWrapper tensor (once each)
// and returns how many were decremented.
std::size_t ReleaseTorchRefCounters(std::span<const protocol::DeviceIpcWrapper> tensors);

}  // namespace lmcache::gpu
