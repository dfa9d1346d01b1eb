// Takeover: the two sides of a warm restart's handover (docs/architecture.md,
// "Restarts and upgrades").
//
// The predecessor runs a TakeoverService: a thread that accepts a successor
// on the takeover socket, judges its hello against this pool's geometry
// (refusing a mismatch unless the successor accepts a cold start) and then
// wakes the main thread, which stops serving, exports the pool and hands it
// over (HandOver). The successor calls RequestTakeover before it binds
// anything: it gets the segment's descriptor and the image, adopts them, and
// acknowledges (Acknowledge) before it serves.
//
// Thread-safety: TakeoverService's Take() may be called from any thread
// while its own thread runs; everything else belongs to one thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "lmcache/status.h"
#include "restart/handover_codec.h"
#include "restart/takeover_socket.h"

namespace lmcache::restart {

// A successor whose hello was accepted: the main thread answers it.
struct PendingTakeover {
  TakeoverSocket socket;
  TakeoverHello hello;
  bool cold = false;     // geometry differs; the successor starts cold
  std::string mismatch;  // what differs, when cold
};

class TakeoverService {
 public:
  // Listens at `path`. `wake` is called (on the service's thread) once a
  // successor's hello was accepted; the service then accepts no one else.
  static Result<std::unique_ptr<TakeoverService>> Start(const std::string& path, TakeoverGeometry ours,
                                                        std::function<void()> wake);
  ~TakeoverService();
  TakeoverService(const TakeoverService&) = delete;
  TakeoverService& operator=(const TakeoverService&) = delete;

  // The accepted successor, once (nullopt before one came, or after).
  std::optional<PendingTakeover> Take() LMC_EXCLUDES(mu_);
  const std::string& path() const { return listener_.path(); }

 private:
  TakeoverService(TakeoverListener listener, TakeoverGeometry ours, std::function<void()> wake);
  void Run();
  // Reads and judges one successor's hello; true when it was accepted.
  bool Judge(TakeoverSocket socket);

  TakeoverListener listener_;
  const TakeoverGeometry ours_;
  const std::function<void()> wake_;
  std::atomic<bool> stop_{false};
  Mutex mu_;
  std::optional<PendingTakeover> pending_ LMC_GUARDED_BY(mu_);
  std::thread thread_;
};

// The predecessor's last act: sends the verdict, then (unless cold) the
// segment's descriptor with `image`, and waits up to `timeout` for the
// successor's acknowledgement. OK means the successor owns the pool now.
Status HandOver(PendingTakeover& pending, int segment_fd, const HandoverImage& image,
                std::chrono::milliseconds timeout);

// What a successor inherits.
struct Inheritance {
  TakeoverSocket socket;  // Acknowledge() on it once adopted
  UniqueFd segment;
  HandoverImage image;
};

// The successor's side: nullopt when nobody listens at `path` or the
// predecessor stepped down for a cold start (after it exited); an error when
// it refused (its reason) or the exchange failed. Waits up to `timeout` for
// the predecessor's drain.
Result<std::optional<Inheritance>> RequestTakeover(const std::string& path,
                                                   const TakeoverHello& hello,
                                                   std::chrono::milliseconds timeout);
Status Acknowledge(Inheritance& inheritance);

}  // namespace lmcache::restart
