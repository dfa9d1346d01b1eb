#include "restart/takeover.h"

#include <spdlog/spdlog.h>

namespace lmcache::restart {
namespace {

constexpr std::chrono::milliseconds kHelloTimeout{5'000};
constexpr std::uint64_t kMaxSmallFrame = 64 << 10;
// An image holds about a hundred bytes per object; objects are at least the
// alignment (64 bytes): the pool's size bounds it well.
std::uint64_t MaxImageBytes(const TakeoverGeometry& geometry) {
  return (64 << 20) +
         geometry.pool.pool_bytes / std::max<std::uint64_t>(geometry.pool.align_bytes, 64) * 4096;
}

}  // namespace

Result<std::unique_ptr<TakeoverService>> TakeoverService::Start(const std::string& path,
                                                                TakeoverGeometry ours,
                                                                std::function<void()> wake) {
  LMC_ASSIGN_OR_RETURN(TakeoverListener listener, TakeoverListener::Listen(path));
  std::unique_ptr<TakeoverService> service(
      new TakeoverService(std::move(listener), std::move(ours), std::move(wake)));
  service->thread_ = std::thread([raw = service.get()] { raw->Run(); });
  return service;
}

TakeoverService::TakeoverService(TakeoverListener listener, TakeoverGeometry ours,
                                 std::function<void()> wake)
    : listener_(std::move(listener)), ours_(std::move(ours)), wake_(std::move(wake)) {}

TakeoverService::~TakeoverService() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void TakeoverService::Run() {
  while (!stop_.load()) {
    Result<TakeoverSocket> peer = listener_.Accept(std::chrono::milliseconds(200));
    if (!peer.ok()) {
      if (peer.status().code() != ErrorCode::kTimeout) {
        spdlog::warn("takeover socket {}: {}", listener_.path(), peer.status().message());
      }
      continue;
    }
    if (Judge(std::move(peer).value())) {
      wake_();
      return;  // one successor; the main thread answers it
    }
  }
}

bool TakeoverService::Judge(TakeoverSocket socket) {
  Result<std::string> bytes = socket.Receive(FrameType::kHello, kHelloTimeout, kMaxSmallFrame);
  Result<TakeoverHello> hello =
      bytes.ok() ? DecodeHello(*bytes) : Result<TakeoverHello>(bytes.status());
  if (!hello.ok()) {
    spdlog::warn("takeover request refused: {}", hello.status().message());
    (void)socket.Send(FrameType::kVerdict,
                      EncodeVerdict({Verdict::kRefused, hello.status().message()}));
    return false;
  }
  TakeoverGeometry successor = hello->geometry;
  if (successor.shm_name.empty()) successor.shm_name = ours_.shm_name;  // it takes ours
  const std::string mismatch = GeometryMismatch(ours_, successor);
  if (!mismatch.empty() && !hello->cold_if_incompatible) {
    const std::string why = "the pool cannot be handed over, its geometry differs in " + mismatch +
                            "; start the successor with the same settings, or with "
                            "--takeover=if-compatible to start it cold";
    spdlog::warn("takeover request refused, serving on: {}", why);
    (void)socket.Send(FrameType::kVerdict, EncodeVerdict({Verdict::kRefused, why}));
    return false;
  }
  MutexLock lock(&mu_);
  pending_ = PendingTakeover{std::move(socket), *hello, !mismatch.empty(), mismatch};
  return true;
}

std::optional<PendingTakeover> TakeoverService::Take() {
  MutexLock lock(&mu_);
  std::optional<PendingTakeover> out = std::move(pending_);
  pending_.reset();
  return out;
}

Status HandOver(PendingTakeover& pending, int segment_fd, const HandoverImage& image,
                std::chrono::milliseconds timeout) {
  if (pending.cold) {
    return pending.socket.Send(
        FrameType::kVerdict,
        EncodeVerdict({Verdict::kCold, "geometry differs in " + pending.mismatch +
                                           "; the pool is removed and the successor starts cold"}));
  }
  LMC_RETURN_IF_ERROR(pending.socket.Send(FrameType::kVerdict,
                                          EncodeVerdict({Verdict::kHandover, "handing over"})));
  LMC_RETURN_IF_ERROR(pending.socket.Send(FrameType::kImage, EncodeImage(image), segment_fd));
  return pending.socket.Receive(FrameType::kAdopted, timeout, 0).status();
}

Result<std::optional<Inheritance>> RequestTakeover(const std::string& path,
                                                   const TakeoverHello& hello,
                                                   std::chrono::milliseconds timeout) {
  Result<TakeoverSocket> connected = TakeoverSocket::Connect(path);
  if (!connected.ok() && connected.status().code() == ErrorCode::kNotFound) {
    return std::optional<Inheritance>();
  }
  LMC_RETURN_IF_ERROR(connected.status());
  TakeoverSocket socket = std::move(connected).value();
  LMC_RETURN_IF_ERROR(socket.Send(FrameType::kHello, EncodeHello(hello)));
  LMC_ASSIGN_OR_RETURN(const std::string verdict_bytes,
                       socket.Receive(FrameType::kVerdict, timeout, kMaxSmallFrame));
  LMC_ASSIGN_OR_RETURN(const TakeoverVerdict verdict, DecodeVerdict(verdict_bytes));
  switch (verdict.verdict) {
    case Verdict::kRefused:
      return Status(ErrorCode::kWrongState,
                    "the running server refused the takeover: " + verdict.message);
    case Verdict::kCold:
      spdlog::warn("takeover: {}", verdict.message);
      // Its pool and endpoints are gone once it has exited (its end closes).
      if (!socket.WaitClosed(timeout)) {
        return Status(ErrorCode::kTimeout, "the running server did not exit after stepping down");
      }
      return std::optional<Inheritance>();
    case Verdict::kHandover: break;
  }
  Inheritance inheritance{std::move(socket), UniqueFd(), HandoverImage{}};
  LMC_ASSIGN_OR_RETURN(
      const std::string image_bytes,
      inheritance.socket.Receive(FrameType::kImage, timeout, MaxImageBytes(hello.geometry),
                                 &inheritance.segment));
  if (!inheritance.segment.valid()) {
    return Status(ErrorCode::kMalformedRequest, "the handover image came without the segment");
  }
  LMC_ASSIGN_OR_RETURN(inheritance.image, DecodeImage(image_bytes));
  return std::optional<Inheritance>(std::move(inheritance));
}

Status Acknowledge(Inheritance& inheritance) {
  return inheritance.socket.Send(FrameType::kAdopted, "");
}

}  // namespace lmcache::restart
