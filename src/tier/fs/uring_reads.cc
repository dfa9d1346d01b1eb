#include "tier/fs/uring_reads.h"

#include <liburing.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <string>
#include <thread>

#include "common/logging.h"
#include "common/mutex.h"

namespace lmcache::tier {
namespace {

using Read = UringReads::Read;
using ReadDone = UringReads::ReadDone;
using BatchDone = UringReads::BatchDone;

// One io_uring instance and the thread that reaps its completions.
class Ring {
 public:
  explicit Ring(unsigned depth) : depth_(depth) {}
  ~Ring();
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;
  // Sets the ring up in place and starts the completion thread.
  Status Start();
  void Submit(std::vector<Read> reads, ReadDone read_done, BatchDone done);

 private:
  struct Batch;
  // One read in the kernel: what is left of it, where.
  struct Op {
    Batch* batch = nullptr;
    std::size_t index = 0;
    int fd = -1;
    std::array<iovec, 2> iov{};
    unsigned first = 0;  // iov[first..] is what is still to read
    std::uint64_t offset = 0;
  };
  struct Batch {
    std::vector<Op> ops;
    std::atomic<std::size_t> left{0};
    ReadDone read_done;
    BatchDone done;
  };

  // Queues `op`'s next read (the caller holds mu_ and made room for it).
  void Queue(Op* op) LMC_REQUIRES(mu_);
  io_uring_sqe* NextSqe() LMC_REQUIRES(mu_);
  // The completion thread: reaps until the stop marker (a nop without data).
  void Reap();
  // One completion: resubmits the rest of a short read, or ends the op.
  void Complete(Op* op, int res);
  // Moves `op` past the `res` bytes just read; true with its result when it
  // has ended (all read: 1, the file ended: 0, an error: -errno).
  static bool Advance(Op* op, int res, int* result);
  // Counts one end of `batch`'s (an op's, or the submission's); the last runs done.
  void Finish(Batch* batch);

  const unsigned depth_;
  io_uring ring_{};
  bool started_ = false;
  Mutex mu_;  // the submission queue and the count of reads in the kernel
  CondVar room_;
  unsigned in_flight_ LMC_GUARDED_BY(mu_) = 0;
  std::thread reaper_;
};

Status Ring::Start() {
  const int rc = io_uring_queue_init(depth_, &ring_, 0);
  if (rc < 0) {
    return Status(ErrorCode::kUnavailable,
                  std::string("io_uring is not available here (io_uring_setup: ") +
                      std::strerror(-rc) +
                      "; a container's seccomp profile, kernel.io_uring_disabled or an old kernel)");
  }
  started_ = true;
  reaper_ = std::thread([this] { Reap(); });
  return Status::Ok();
}

Ring::~Ring() {
  if (!started_) return;
  {
    MutexLock lock(&mu_);
    while (in_flight_ > 0) room_.Wait(&lock);
    io_uring_sqe* sqe = NextSqe();
    io_uring_prep_nop(sqe);
    io_uring_sqe_set_data(sqe, nullptr);
    io_uring_submit(&ring_);
  }
  reaper_.join();
  io_uring_queue_exit(&ring_);
}

void Ring::Submit(std::vector<Read> reads, ReadDone read_done, BatchDone done) {
  auto* batch = new Batch;  // deleted by Finish, after its done
  batch->ops.resize(reads.size());
  batch->read_done = std::move(read_done);
  batch->done = std::move(done);
  for (std::size_t i = 0; i < reads.size(); ++i) {
    Op& op = batch->ops[i];
    op.batch = batch;
    op.index = i;
    op.fd = reads[i].fd;
    for (std::size_t b = 0; b < 2; ++b) {
      op.iov[b] = {reads[i].buffers[b].data(), reads[i].buffers[b].size()};
    }
    while (op.first < 2 && op.iov[op.first].iov_len == 0) ++op.first;
  }
  // A read of nothing has all its bytes: it ends here, before any read of
  // the batch is queued. The last op to end runs `done`, so the batch counts
  // one extra until every op is queued.
  std::size_t queued = 0;
  for (Op& op : batch->ops) {
    if (op.first == 2) {
      batch->read_done(op.index, 1);
    } else {
      ++queued;
    }
  }
  batch->left.store(queued + 1, std::memory_order_relaxed);
  {
    MutexLock lock(&mu_);
    for (Op& op : batch->ops) {
      if (op.first == 2) continue;
      while (in_flight_ == depth_) {
        io_uring_submit(&ring_);  // what is queued must reach the kernel before we wait on it
        room_.Wait(&lock);
      }
      ++in_flight_;
      Queue(&op);
    }
    io_uring_submit(&ring_);
  }
  Finish(batch);
}

io_uring_sqe* Ring::NextSqe() {
  // The queue has depth_ entries and at most depth_ reads are in flight, but
  // entries queued since the last submit may still fill it: push them.
  for (;;) {
    if (io_uring_sqe* sqe = io_uring_get_sqe(&ring_)) return sqe;
    io_uring_submit(&ring_);
  }
}

void Ring::Queue(Op* op) {
  io_uring_sqe* sqe = NextSqe();
  io_uring_prep_readv(sqe, op->fd, &op->iov[op->first], 2 - op->first, op->offset);
  io_uring_sqe_set_data(sqe, op);
}

void Ring::Reap() {
  for (;;) {
    io_uring_cqe* cqe = nullptr;
    const int rc = io_uring_wait_cqe(&ring_, &cqe);
    if (rc == -EINTR) continue;
    if (rc < 0) {
      // Not seen in practice; should it persist, the loop must neither flood
      // the log nor spin a core.
      static RateLimitedLog wait_failed(std::chrono::seconds(10));
      wait_failed.Error("io_uring: waiting for a completion failed: {}", std::strerror(-rc));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    auto* op = static_cast<Op*>(io_uring_cqe_get_data(cqe));
    const int res = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    if (op == nullptr) return;  // the destructor's stop marker
    Complete(op, res);
  }
}

void Ring::Complete(Op* op, int res) {
  int result = 0;
  {
    // Under the lock: the submitter wrote `op` before it queued it under
    // this lock, and a short read's rest is queued under it too.
    MutexLock lock(&mu_);
    if (!Advance(op, res, &result)) {
      Queue(op);  // the rest of a short read, in the slot this op holds
      io_uring_submit(&ring_);
      return;
    }
    --in_flight_;
  }
  room_.NotifyAll();
  op->batch->read_done(op->index, result);
  Finish(op->batch);
}

bool Ring::Advance(Op* op, int res, int* result) {
  const bool interrupted = res == -EINTR || res == -EAGAIN;  // read the same again
  if (res < 0 && !interrupted) {
    *result = res;
    return true;
  }
  std::size_t n = interrupted ? 0 : static_cast<std::size_t>(res);
  if (!interrupted && n == 0) {
    *result = 0;  // the file ended first
    return true;
  }
  op->offset += n;
  while (op->first < 2 && n >= op->iov[op->first].iov_len) {
    n -= op->iov[op->first].iov_len;
    ++op->first;
  }
  if (op->first == 2) {
    *result = 1;
    return true;
  }
  op->iov[op->first].iov_base = static_cast<std::byte*>(op->iov[op->first].iov_base) + n;
  op->iov[op->first].iov_len -= n;
  return false;
}

void Ring::Finish(Batch* batch) {
  if (batch->left.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  batch->done();
  delete batch;
}

// Several rings, each thread submitting to one of its own (round robin by
// the order threads first submit): a ring's submissions are serialised in
// the kernel, and a read the page cache holds is copied inside the submit.
class RingSet final : public UringReads {
 public:
  explicit RingSet(std::vector<std::unique_ptr<Ring>> rings) : rings_(std::move(rings)) {}
  void Submit(std::vector<Read> reads, ReadDone read_done, BatchDone done) override {
    static std::atomic<unsigned> threads{0};
    static thread_local const unsigned thread_number = threads.fetch_add(1);
    rings_[thread_number % rings_.size()]->Submit(std::move(reads), std::move(read_done),
                                                  std::move(done));
  }

 private:
  const std::vector<std::unique_ptr<Ring>> rings_;
};

}  // namespace

Result<std::unique_ptr<UringReads>> UringReads::Create(unsigned rings, unsigned depth) {
  if (rings == 0 || depth == 0) {
    return InvalidConfig("io_uring: the ring count and queue depth must be at least 1");
  }
  std::vector<std::unique_ptr<Ring>> set;
  for (unsigned r = 0; r < rings; ++r) {
    auto ring = std::make_unique<Ring>(depth);
    LMC_RETURN_IF_ERROR(ring->Start());
    set.push_back(std::move(ring));
  }
  return std::unique_ptr<UringReads>(new RingSet(std::move(set)));
}

}  // namespace lmcache::tier
