// UringReads: reads whole files into memory through io_uring, with every
// read of a batch in flight at once, and reports each read as it ends and
// then its batch through callbacks from a completion thread (the fs
// adapter's loads: the disk sees the batch's queue depth instead of one
// pread at a time, and each object is verified while the rest still read).
//
// It holds several rings, each with its own completion thread; a thread
// always submits to the same ring, and threads are spread over the rings.
// One ring would serialise every submitter: the kernel submits a ring's
// reads one call at a time, and copies a read the page cache holds inside
// that call.
//
// A read fills two buffers from offset 0 (an object's header, then its
// payload straight into the L1 buffer): short reads are resubmitted for the
// rest, so a read ends only with all bytes, the end of the file, or an error.
// At most `depth` reads are in one ring's kernel queue at once (its
// completion queue can then never overflow); a Submit beyond that waits for room on the caller's
// thread, which is a prefetch thread, never a request thread.
//
// Create fails where io_uring is not available: a kernel without it, a
// seccomp profile that refuses io_uring_setup (the default profiles of
// Docker and podman), kernel.io_uring_disabled, or a build without liburing
// (LMC_IO_URING=OFF). The fs adapter then reads with blocking calls.
//
// Thread-safety: Submit may be called from any number of threads. A batch's
// callbacks run one at a time: on its ring's completion thread, or on the
// submitting thread for a read of nothing and for `done` when every read
// ended before Submit returned. A callback must not Submit (the completion
// thread would wait for room that only it can make). The destructor waits
// for every read in flight and its callbacks.
#pragma once

#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "lmcache/status.h"

namespace lmcache::tier {

class UringReads {
 public:
  struct Read {
    int fd = -1;
    std::array<std::span<std::byte>, 2> buffers;  // filled in order from offset 0
  };
  // One read has ended: its index in the batch, and 1 all bytes read, 0 the
  // file ended first, or -errno.
  using ReadDone = std::function<void(std::size_t index, int result)>;
  // The batch has ended: every read_done has returned.
  using BatchDone = std::function<void()>;

  static Result<std::unique_ptr<UringReads>> Create(unsigned rings, unsigned depth);
  virtual ~UringReads() = default;

  // Starts `reads`; read_done runs once per read, then done once. The fds
  // and buffers must stay valid until done.
  virtual void Submit(std::vector<Read> reads, ReadDone read_done, BatchDone done) = 0;

 protected:
  UringReads() = default;
};

}  // namespace lmcache::tier
