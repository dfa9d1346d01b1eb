// UcxChannel::Impl: the state of a UCX data channel and its progress
// thread, shared by the files that implement it (ucx_channel.cc: the
// worker, its endpoints and the loop; ucx_reads.cc: the reads, served and
// landed). Private to fleet/: nothing else includes it.
//
// Thread-safety: as UcxChannel (fleet/ucx_channel.h): `commands` under `mu`;
// everything else belongs to the progress thread, except the atomic counters.
#pragma once

#include <poll.h>
#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

#include "common/mailbox.h"
#include "common/mutex.h"
#include "fleet/ucx_channel.h"
#include "fleet/ucx_wire.h"

namespace lmcache::fleet {

inline constexpr int kIdleWaitMs = 100;  // the progress thread's longest sleep
// How long a stopping channel waits for reads whose bytes are landing.
inline constexpr std::chrono::seconds kShutdownWait{10};

// Read ids are 128 random bits: any 8 of them hash a table well.
struct ReadIdHash {
  std::size_t operator()(const ReadId& id) const {
    std::size_t h;
    std::memcpy(&h, id.data(), sizeof(h));
    return h;
  }
};

Status UcxError(const char* what, ucs_status_t status);

struct UcxChannel::Impl {
  struct Peer {
    ucp_ep_h ep = nullptr;
    std::uint64_t size = 0;
    bool failed = false;       // its endpoint ended: no more reads sent
    void* closing = nullptr;   // the close request while it completes
    bool disconnect_requested = false;
  };
  struct Batch {
    PeerHandle peer = 0;
    std::vector<UcxRead> reads;
    TimeMs deadline_ms = 0;
    UcxChannel::ReadsDone done;
    std::vector<bool> landed;  // per read: every byte of it arrived
    std::size_t pending = 0;  // reads not yet ended
    std::uint64_t bytes = 0;
    Status status;
    bool past_deadline = false;
  };
  // One read in flight, by its request id, until it ends.
  struct Read {
    Batch* batch = nullptr;
    std::size_t index = 0;  // in its batch
    std::uint64_t local_offset = 0;
    std::uint64_t size = 0;
    bool landing = false;  // its bytes are being received into the slot
    ReadReply reply;       // while landing: the header its bytes are checked against
  };
  // A message being sent: its header lives until the send completes.
  struct Sending {
    Impl* impl = nullptr;
    ReadRequest request;
    ReadReply reply;
    bool is_request = false;  // a request: its read fails if it cannot be sent
  };
  // A rendezvous receive landing bytes in a slot.
  struct Landing {
    Impl* impl = nullptr;
    ReadId read_id;
  };
  struct ConnectCommand {
    UcxDescriptor descriptor;
    std::promise<Result<PeerHandle>> reply;
  };
  struct DisconnectCommand {
    PeerHandle peer;
  };
  struct GuardCommand {
    ServeGuard guard;
    std::promise<void> set;
  };
  using Command = std::variant<std::unique_ptr<ConnectCommand>, DisconnectCommand,
                               std::unique_ptr<Batch>, std::unique_ptr<GuardCommand>>;

  std::byte* pool = nullptr;
  std::size_t pool_size = 0;
  const Clock* clock = nullptr;
  DataChannelKeys keys{};
  UcxChannelOptions options;
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  ucp_mem_h memh = nullptr;
  int ucx_fd = -1;
  // What other threads ask of the progress thread, and its wake-up.
  Mailbox<Command> mailbox;
  std::thread thread;
  std::atomic<bool> stop{false};
  std::atomic<bool> reads_ended{false};  // EndReads: every batch is past its deadline

  // The progress thread's own.
  ServeGuard serve_guard;  // unset: every read refused
  std::map<PeerHandle, Peer> peers;
  std::vector<std::unique_ptr<Batch>> batches;  // with reads in flight, or ended this turn
  std::unordered_map<ReadId, Read, ReadIdHash> reads_in_flight;  // by request id
  PeerHandle next_peer = 1;
  std::size_t sends_in_flight = 0;

  // Every figure of UcxChannelStats, counted where it happens (peers: the
  // endpoints open now).
  LMC_STATS_COUNTERS(Counters, UcxChannelStats, LMC_UCX_CHANNEL_STATS);
  Counters counters;

  ~Impl() {
    keys.Wipe();
    if (memh != nullptr) ucp_mem_unmap(context, memh);
    if (worker != nullptr) ucp_worker_destroy(worker);
    if (context != nullptr) ucp_cleanup(context);
  }

  Status Init(std::byte* base, std::size_t size, UcxDescriptor* descriptor);
  Status SetHandler(unsigned id, ucp_am_recv_callback_t callback);
  // Never refused: the mailbox is not closed (Shutdown takes what is left
  // and fails it; nothing is posted once the channel is being destroyed).
  void Post(Command command) { (void)mailbox.Post(std::move(command)); }
  void Run();
  void RunCommands();
  void Connect(ConnectCommand& command);
  void StartBatch(std::unique_ptr<Batch> batch);
  void SendRequest(Peer& peer, Batch* batch, std::size_t index);
  // Ends read `id` (if still in flight) with `status`.
  void EndRead(const ReadId& id, const Status& status);
  // Whether a reply came on the endpoint `read`'s request went to.
  bool FromItsOwner(const Read& read, const ucp_am_recv_param_t* p) const;
  // A reply's bytes landed in `read`'s slot: ends it, Ok only if they are
  // the bytes the owner digested.
  void Landed(const ReadId& id, ucs_status_t status);
  void EndPeer(Peer& peer);
  void ReapPeers();
  void CheckDeadlines();
  void FinishBatches();
  void Sleep();
  void Shutdown();
  ucs_status_t Serve(const void* header, std::size_t header_length, const ucp_am_recv_param_t* p);
  ucs_status_t Land(const void* header, std::size_t header_length, void* data, std::size_t length,
                    const ucp_am_recv_param_t* p);
  void Reply(ucp_ep_h ep, const ReadRequest& request, ErrorCode status);

  static ucs_status_t OnReadRequest(void* arg, const void* header, std::size_t header_length,
                                    void*, std::size_t, const ucp_am_recv_param_t* param) {
    return static_cast<Impl*>(arg)->Serve(header, header_length, param);
  }
  static ucs_status_t OnReadReply(void* arg, const void* header, std::size_t header_length,
                                  void* data, std::size_t length, const ucp_am_recv_param_t* p) {
    return static_cast<Impl*>(arg)->Land(header, header_length, data, length, p);
  }
  static void OnSent(void* request, ucs_status_t status, void* user_data);
  static void OnLanded(void* request, ucs_status_t status, std::size_t length, void* user_data);
  static void OnPeerError(void* arg, ucp_ep_h ep, ucs_status_t status);
};

}  // namespace lmcache::fleet
