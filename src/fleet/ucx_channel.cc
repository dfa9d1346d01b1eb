#include "fleet/ucx_channel.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <unordered_map>
#include <optional>
#include <thread>
#include <variant>

#include "common/mutex.h"
#include "common/unique_fd.h"

namespace lmcache::fleet {
namespace {

constexpr char kMagic[4] = {'L', 'U', 'C', 'X'};
constexpr std::uint8_t kDescriptorVersion = 2;  // 1 carried a remote key (never released)
// Active message ids: a read request, and its reply carrying the bytes.
constexpr unsigned kReadRequestId = 0x4c31;  // "L1"
constexpr unsigned kReadReplyId = 0x4c32;
constexpr std::size_t kMacBytes = 16;
constexpr std::size_t kMaxBlobBytes = 64 * 1024;  // a worker address or a packed rkey
constexpr int kIdleWaitMs = 100;                  // the progress thread's longest sleep

void PutU32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}
void PutU64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

// Reads little-endian fields from an untrusted byte string, failing on a short one.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}
  bool Take(std::size_t n, std::string_view* out) {
    if (bytes_.size() < n) return false;
    *out = bytes_.substr(0, n);
    bytes_.remove_prefix(n);
    return true;
  }
  template <typename T>
  bool Int(T* out) {
    std::string_view raw;
    if (!Take(sizeof(T), &raw)) return false;
    *out = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) {
      *out |= static_cast<T>(static_cast<unsigned char>(raw[i])) << (8 * i);
    }
    return true;
  }
  bool Blob(std::string* out) {
    std::uint32_t length = 0;
    std::string_view raw;
    if (!Int(&length) || length == 0 || length > kMaxBlobBytes || !Take(length, &raw)) return false;
    out->assign(raw);
    return true;
  }
  bool empty() const { return bytes_.empty(); }

 private:
  std::string_view bytes_;
};

Status UcxError(const char* what, ucs_status_t status) {
  return Status(ErrorCode::kIoError, std::string(what) + ": " + ucs_status_string(status));
}

}  // namespace

std::string UcxDescriptor::Encode() const {
  std::string out(kMagic, sizeof(kMagic));
  out.push_back(static_cast<char>(kDescriptorVersion));
  PutU32(out, static_cast<std::uint32_t>(worker_address.size()));
  out += worker_address;
  PutU64(out, size);
  return out;
}

Result<UcxDescriptor> UcxDescriptor::Parse(std::string_view bytes) {
  Reader in(bytes);
  std::string_view magic;
  std::uint8_t version = 0;
  UcxDescriptor d;
  if (!in.Take(sizeof(kMagic), &magic) || magic != std::string_view(kMagic, sizeof(kMagic)) ||
      !in.Int(&version)) {
    return Status(ErrorCode::kMalformedRequest, "not a UCX descriptor");
  }
  if (version != kDescriptorVersion) {
    return Status(ErrorCode::kNotSupported, "UCX descriptor version " + std::to_string(version) +
                                                " (this server reads " +
                                                std::to_string(kDescriptorVersion) + ")");
  }
  if (!in.Blob(&d.worker_address) || !in.Int(&d.size) || !in.empty()) {
    return Status(ErrorCode::kMalformedRequest,
                  "a UCX descriptor's fields are missing, empty, over 64 KiB or trailed by bytes");
  }
  if (d.size == 0) return Status(ErrorCode::kMalformedRequest, "a UCX descriptor's pool is empty");
  return d;
}

namespace {

// The wire form of a read request and its reply (little-endian hosts only:
// the fleet's members run the same build on x86-64 or arm64).
struct ReadRequest {
  std::uint64_t id = 0;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  std::uint8_t mac[kMacBytes] = {};
};
struct ReadReply {
  std::uint64_t id = 0;
  std::uint32_t status = 0;  // ErrorCode: 0 = the bytes follow as the message's data
  std::uint32_t reserved = 0;
};
static_assert(sizeof(ReadRequest) == 40 && sizeof(ReadReply) == 16);

// MAC of a request's fields under the fleet's data key (truncated HMAC-SHA256).
void MacOf(const UcxDataKey& key, const ReadRequest& request, std::uint8_t* out) {
  std::uint8_t fields[24];
  std::memcpy(fields, &request.id, 8);
  std::memcpy(fields + 8, &request.offset, 8);
  std::memcpy(fields + 16, &request.size, 8);
  std::uint8_t digest[32];
  unsigned int length = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), fields, sizeof(fields), digest,
       &length);
  std::memcpy(out, digest, kMacBytes);
}

}  // namespace

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
    std::function<void(Status)> done;
    std::size_t pending = 0;  // reads not yet ended
    std::uint64_t bytes = 0;
    Status status;
    bool past_deadline = false;
  };
  // One read in flight, by its request id, until it ends.
  struct Read {
    Batch* batch = nullptr;
    std::uint64_t local_offset = 0;
    std::uint64_t size = 0;
    bool landing = false;  // its bytes are being received into the slot
  };
  // A message being sent: its header lives until the send completes.
  struct Sending {
    Impl* impl = nullptr;
    ReadRequest request;
    ReadReply reply;
    std::uint64_t read_id = 0;  // a request's: which read fails if it cannot be sent
  };
  // A rendezvous receive landing bytes in a slot.
  struct Landing {
    Impl* impl = nullptr;
    std::uint64_t read_id = 0;
  };
  struct ConnectCommand {
    UcxDescriptor descriptor;
    std::promise<Result<PeerHandle>> reply;
  };
  struct DisconnectCommand {
    PeerHandle peer;
  };
  using Command = std::variant<std::unique_ptr<ConnectCommand>, DisconnectCommand,
                               std::unique_ptr<Batch>>;

  std::byte* pool = nullptr;
  std::size_t pool_size = 0;
  const Clock* clock = nullptr;
  UcxDataKey key{};
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  ucp_mem_h memh = nullptr;
  int ucx_fd = -1;
  UniqueFd wake_fd;
  std::thread thread;
  std::atomic<bool> stop{false};

  Mutex mu;
  std::deque<Command> commands LMC_GUARDED_BY(mu);

  // The progress thread's own.
  std::map<PeerHandle, Peer> peers;
  std::vector<std::unique_ptr<Batch>> batches;  // with reads in flight, or ended this turn
  std::unordered_map<std::uint64_t, Read> reads_in_flight;  // by request id
  PeerHandle next_peer = 1;
  std::uint64_t next_read_id = 1;
  std::size_t sends_in_flight = 0;

  std::atomic<std::uint64_t> open_peers{0}, reads{0}, read_bytes{0}, failed_reads{0},
      deadline_reads{0}, refused_reads{0}, served_reads{0}, served_bytes{0}, refused_serves{0},
      late_replies{0};

  ~Impl() {
    OPENSSL_cleanse(key.data(), key.size());
    if (memh != nullptr) ucp_mem_unmap(context, memh);
    if (worker != nullptr) ucp_worker_destroy(worker);
    if (context != nullptr) ucp_cleanup(context);
  }

  Status Init(std::byte* base, std::size_t size, UcxDescriptor* descriptor);
  Status SetHandler(unsigned id, ucp_am_recv_callback_t callback);
  void Wake() {
    const std::uint64_t one = 1;
    (void)!::write(wake_fd.get(), &one, sizeof(one));
  }
  void Post(Command command) LMC_EXCLUDES(mu) {
    {
      MutexLock lock(&mu);
      commands.push_back(std::move(command));
    }
    Wake();
  }
  void Run();
  void RunCommands() LMC_EXCLUDES(mu);
  void Connect(ConnectCommand& command);
  void StartBatch(std::unique_ptr<Batch> batch);
  void SendRequest(Peer& peer, Batch* batch, const UcxRead& read);
  // Ends read `id` (if still in flight) with `status`.
  void EndRead(std::uint64_t id, const Status& status);
  void EndPeer(Peer& peer);
  void ReapPeers();
  void CheckDeadlines();
  void FinishBatches();
  void Sleep();
  void Shutdown();
  ucs_status_t Serve(const void* header, std::size_t header_length, const ucp_am_recv_param_t* p);
  ucs_status_t Land(const void* header, std::size_t header_length, void* data, std::size_t length,
                    const ucp_am_recv_param_t* p);
  void Reply(ucp_ep_h ep, std::uint64_t id, ErrorCode status, std::uint64_t offset,
             std::uint64_t size);

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

Status UcxChannel::Impl::SetHandler(unsigned id, ucp_am_recv_callback_t callback) {
  ucp_am_handler_param_t param{};
  param.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                     UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  param.id = id;
  param.flags = UCP_AM_FLAG_WHOLE_MSG;
  param.cb = callback;
  param.arg = this;
  if (ucs_status_t s = ucp_worker_set_am_recv_handler(worker, &param); s != UCS_OK) {
    return UcxError("ucp_worker_set_am_recv_handler", s);
  }
  return Status::Ok();
}

Status UcxChannel::Impl::Init(std::byte* base, std::size_t size, UcxDescriptor* descriptor) {
  pool = base;
  pool_size = size;
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  // Active messages only: a context without UCP_FEATURE_RMA serves no get.
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  ucp_config_t* config = nullptr;
  if (ucs_status_t s = ucp_config_read(nullptr, nullptr, &config); s != UCS_OK) {
    return UcxError("ucp_config_read", s);
  }
  const ucs_status_t init = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (init != UCS_OK) return UcxError("ucp_init", init);

  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  worker_params.thread_mode = UCS_THREAD_MODE_SINGLE;  // only the progress thread touches it
  if (ucs_status_t s = ucp_worker_create(context, &worker_params, &worker); s != UCS_OK) {
    return UcxError("ucp_worker_create", s);
  }
  if (ucs_status_t s = ucp_worker_get_efd(worker, &ucx_fd); s != UCS_OK) {
    return UcxError("ucp_worker_get_efd", s);
  }
  LMC_RETURN_IF_ERROR(SetHandler(kReadRequestId, &Impl::OnReadRequest));
  LMC_RETURN_IF_ERROR(SetHandler(kReadReplyId, &Impl::OnReadReply));

  // Registered once, so rendezvous moves the pool's bytes without registering per read.
  ucp_mem_map_params_t map{};
  map.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  map.address = base;
  map.length = size;
  if (ucs_status_t s = ucp_mem_map(context, &map, &memh); s != UCS_OK) {
    return UcxError("ucp_mem_map of the L1 pool", s);
  }

  ucp_address_t* address = nullptr;
  std::size_t address_length = 0;
  if (ucs_status_t s = ucp_worker_get_address(worker, &address, &address_length); s != UCS_OK) {
    return UcxError("ucp_worker_get_address", s);
  }
  descriptor->worker_address.assign(reinterpret_cast<const char*>(address), address_length);
  ucp_worker_release_address(worker, address);
  if (descriptor->worker_address.size() > kMaxBlobBytes) {
    return Status(ErrorCode::kInternal, "UCX's worker address exceeds 64 KiB");
  }
  descriptor->size = size;

  wake_fd = UniqueFd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_fd.valid()) {
    return Status(ErrorCode::kIoError, std::string("eventfd: ") + std::strerror(errno));
  }
  return Status::Ok();
}

void UcxChannel::Impl::Run() {
  while (!stop.load()) {
    RunCommands();
    while (ucp_worker_progress(worker) != 0) {
    }
    CheckDeadlines();
    FinishBatches();
    ReapPeers();
    Sleep();
  }
  Shutdown();
}

void UcxChannel::Impl::RunCommands() {
  std::deque<Command> now;
  {
    MutexLock lock(&mu);
    now.swap(commands);
  }
  for (Command& command : now) {
    if (auto* connect = std::get_if<std::unique_ptr<ConnectCommand>>(&command)) {
      Connect(**connect);
    } else if (auto* disconnect = std::get_if<DisconnectCommand>(&command)) {
      auto peer = peers.find(disconnect->peer);
      if (peer != peers.end()) {
        peer->second.disconnect_requested = true;
        EndPeer(peer->second);
      }
    } else {
      StartBatch(std::move(std::get<std::unique_ptr<Batch>>(command)));
    }
  }
}

void UcxChannel::Impl::Connect(ConnectCommand& command) {
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(command.descriptor.worker_address.data());
  // A peer that dies fails its endpoint's sends instead of hanging them.
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = &Impl::OnPeerError;
  params.err_handler.arg = this;
  Peer peer;
  if (ucs_status_t s = ucp_ep_create(worker, &params, &peer.ep); s != UCS_OK) {
    command.reply.set_value(UcxError("ucp_ep_create", s));
    return;
  }
  peer.size = command.descriptor.size;
  const PeerHandle handle = next_peer++;
  peers.emplace(handle, peer);
  open_peers.fetch_add(1, std::memory_order_relaxed);
  command.reply.set_value(handle);
}

void UcxChannel::Impl::StartBatch(std::unique_ptr<Batch> batch) {
  Batch* b = batch.get();
  batches.push_back(std::move(batch));
  auto peer = peers.find(b->peer);
  if (peer == peers.end() || peer->second.failed) {
    b->status = Status(ErrorCode::kUnavailable, "the peer's endpoint is closed");
    return;
  }
  // Every read inside both pools, or none is sent.
  for (const UcxRead& r : b->reads) {
    const std::uint64_t remote = peer->second.size;
    const bool remote_ok = r.size > 0 && r.remote_offset <= remote && r.size <= remote - r.remote_offset;
    const bool local_ok = r.local_offset <= pool_size && r.size <= pool_size - r.local_offset;
    if (!remote_ok || !local_ok) {
      refused_reads.fetch_add(1, std::memory_order_relaxed);
      b->status = Status(ErrorCode::kInvalidArgument,
                         std::string("a read outside ") + (remote_ok ? "this" : "the peer's") +
                             " pool: offset " +
                             std::to_string(remote_ok ? r.local_offset : r.remote_offset) + ", " +
                             std::to_string(r.size) + " bytes");
      return;
    }
  }
  for (const UcxRead& r : b->reads) SendRequest(peer->second, b, r);
}

void UcxChannel::Impl::SendRequest(Peer& peer, Batch* batch, const UcxRead& read) {
  const std::uint64_t id = next_read_id++;
  reads_in_flight.emplace(id, Read{batch, read.local_offset, read.size, false});
  batch->pending += 1;
  batch->bytes += read.size;
  auto* sending = new Sending{this, {}, {}, id};
  sending->request.id = id;
  sending->request.offset = read.remote_offset;
  sending->request.size = read.size;
  MacOf(key, sending->request, sending->request.mac);
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.cb.send = &Impl::OnSent;
  param.user_data = sending;
  param.flags = UCP_AM_SEND_FLAG_REPLY;  // the owner answers on a reply endpoint
  sends_in_flight += 1;
  ucs_status_ptr_t request = ucp_am_send_nbx(peer.ep, kReadRequestId, &sending->request,
                                             sizeof(sending->request), nullptr, 0, &param);
  if (!UCS_PTR_IS_PTR(request)) OnSent(nullptr, UCS_PTR_STATUS(request), sending);
}

void UcxChannel::Impl::OnSent(void* request, ucs_status_t status, void* user_data) {
  std::unique_ptr<Sending> sending(static_cast<Sending*>(user_data));
  Impl* impl = sending->impl;
  impl->sends_in_flight -= 1;
  if (status != UCS_OK && sending->read_id != 0) {
    impl->EndRead(sending->read_id, UcxError("a read request could not be sent", status));
  }
  if (request != nullptr) ucp_request_free(request);
}

void UcxChannel::Impl::EndRead(std::uint64_t id, const Status& status) {
  auto read = reads_in_flight.find(id);
  if (read == reads_in_flight.end()) return;
  Batch* batch = read->second.batch;
  if (!status.ok() && batch->status.ok()) batch->status = status;
  batch->pending -= 1;
  reads_in_flight.erase(read);
}

// The owner's side: a peer asks for a range of our pool.
ucs_status_t UcxChannel::Impl::Serve(const void* header, std::size_t header_length,
                                     const ucp_am_recv_param_t* p) {
  if (header_length != sizeof(ReadRequest) ||
      (p->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0) {
    refused_serves.fetch_add(1, std::memory_order_relaxed);
    return UCS_OK;  // not our request's shape: nobody to answer
  }
  ReadRequest request;
  std::memcpy(&request, header, sizeof(request));
  std::uint8_t mac[kMacBytes];
  MacOf(key, request, mac);
  ErrorCode verdict = ErrorCode::kOk;
  if (CRYPTO_memcmp(mac, request.mac, kMacBytes) != 0) {
    verdict = ErrorCode::kPermissionDenied;
  } else if (request.size == 0 || request.offset > pool_size ||
             request.size > pool_size - request.offset) {
    verdict = ErrorCode::kInvalidArgument;
  }
  if (verdict != ErrorCode::kOk) refused_serves.fetch_add(1, std::memory_order_relaxed);
  Reply(p->reply_ep, request.id, verdict, request.offset, request.size);
  return UCS_OK;
}

void UcxChannel::Impl::Reply(ucp_ep_h ep, std::uint64_t id, ErrorCode status, std::uint64_t offset,
                             std::uint64_t size) {
  auto* sending = new Sending{this, {}, {}, 0};
  sending->reply.id = id;
  sending->reply.status = static_cast<std::uint32_t>(status);
  const bool with_bytes = status == ErrorCode::kOk;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = &Impl::OnSent;
  param.user_data = sending;
  if (with_bytes) {
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    param.memh = memh;
    served_reads.fetch_add(1, std::memory_order_relaxed);
    served_bytes.fetch_add(size, std::memory_order_relaxed);
  }
  sends_in_flight += 1;
  ucs_status_ptr_t request =
      ucp_am_send_nbx(ep, kReadReplyId, &sending->reply, sizeof(sending->reply),
                      with_bytes ? pool + offset : nullptr, with_bytes ? size : 0, &param);
  if (!UCS_PTR_IS_PTR(request)) OnSent(nullptr, UCS_PTR_STATUS(request), sending);
}

// The requester's side: a peer's answer to one of our reads.
ucs_status_t UcxChannel::Impl::Land(const void* header, std::size_t header_length, void* data,
                                    std::size_t length, const ucp_am_recv_param_t* p) {
  if (header_length != sizeof(ReadReply)) return UCS_OK;
  ReadReply reply;
  std::memcpy(&reply, header, sizeof(reply));
  auto read = reads_in_flight.find(reply.id);
  if (read == reads_in_flight.end() || read->second.landing) {
    late_replies.fetch_add(1, std::memory_order_relaxed);
    return UCS_OK;  // ended (deadline, peer error) or never ours: its bytes are dropped
  }
  if (reply.status != 0) {
    EndRead(reply.id, Status(static_cast<ErrorCode>(reply.status), "the peer refused the read"));
    return UCS_OK;
  }
  if (length != read->second.size) {
    EndRead(reply.id, Status(ErrorCode::kCorrupt, "the peer answered " + std::to_string(length) +
                                                      " bytes for a read of " +
                                                      std::to_string(read->second.size)));
    return UCS_OK;
  }
  std::byte* slot = pool + read->second.local_offset;
  if ((p->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0) {
    std::memcpy(slot, data, length);
    EndRead(reply.id, Status::Ok());
    return UCS_OK;
  }
  read->second.landing = true;
  auto* landing = new Landing{this, reply.id};
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH;
  param.cb.recv_am = &Impl::OnLanded;
  param.user_data = landing;
  param.memh = memh;
  ucs_status_ptr_t request = ucp_am_recv_data_nbx(worker, data, slot, length, &param);
  if (!UCS_PTR_IS_PTR(request)) OnLanded(nullptr, UCS_PTR_STATUS(request), length, landing);
  return UCS_OK;
}

void UcxChannel::Impl::OnLanded(void* request, ucs_status_t status, std::size_t, void* user_data) {
  std::unique_ptr<Landing> landing(static_cast<Landing*>(user_data));
  landing->impl->EndRead(landing->read_id,
                         status == UCS_OK ? Status::Ok()
                                          : UcxError("receiving a peer's bytes failed", status));
  if (request != nullptr) ucp_request_free(request);
}

void UcxChannel::Impl::OnPeerError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* impl = static_cast<Impl*>(arg);
  for (auto& [handle, peer] : impl->peers) {
    if (peer.ep != ep) continue;
    impl->EndPeer(peer);
    // Its reads not yet landing end now; a landing one ends with its receive.
    for (auto it = impl->reads_in_flight.begin(); it != impl->reads_in_flight.end();) {
      const auto current = it++;
      if (current->second.batch->peer == handle && !current->second.landing) {
        impl->EndRead(current->first, UcxError("the peer failed", status));
      }
    }
  }
}

// Forces the endpoint closed: sends on it complete with an error.
void UcxChannel::Impl::EndPeer(Peer& peer) {
  if (peer.ep == nullptr) return;
  if (!peer.failed) open_peers.fetch_sub(1, std::memory_order_relaxed);
  peer.failed = true;
  ucp_request_param_t close{};
  close.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  close.flags = UCP_EP_CLOSE_FLAG_FORCE;
  void* request = ucp_ep_close_nbx(std::exchange(peer.ep, nullptr), &close);
  if (UCS_PTR_IS_PTR(request)) peer.closing = request;
}

// Forgets peers whose endpoint has closed, once Disconnect asked; a peer that
// failed on its own stays (failed) until then.
void UcxChannel::Impl::ReapPeers() {
  for (auto it = peers.begin(); it != peers.end();) {
    Peer& peer = it->second;
    if (peer.closing != nullptr && ucp_request_check_status(peer.closing) != UCS_INPROGRESS) {
      ucp_request_free(peer.closing);
      peer.closing = nullptr;
    }
    const bool closed = peer.ep == nullptr && peer.closing == nullptr;
    it = closed && peer.disconnect_requested ? peers.erase(it) : std::next(it);
  }
}

// A batch past its deadline ends its reads not yet landing (a later reply is
// dropped); a read already landing is waited for.
void UcxChannel::Impl::CheckDeadlines() {
  const TimeMs now = clock->NowMs();
  for (auto& batch : batches) {
    if (batch->pending == 0 || batch->past_deadline || now < batch->deadline_ms) continue;
    batch->past_deadline = true;
    const Status late(ErrorCode::kTimeout, "the peer's read missed its deadline");
    for (auto it = reads_in_flight.begin(); it != reads_in_flight.end();) {
      const auto current = it++;
      if (current->second.batch == batch.get() && !current->second.landing) {
        EndRead(current->first, late);
      }
    }
    if (batch->status.ok()) batch->status = late;
  }
}

void UcxChannel::Impl::FinishBatches() {
  auto finished = std::stable_partition(batches.begin(), batches.end(),
                                        [](const auto& b) { return b->pending != 0; });
  std::vector<std::unique_ptr<Batch>> done(std::make_move_iterator(finished),
                                           std::make_move_iterator(batches.end()));
  batches.erase(finished, batches.end());
  for (auto& batch : done) {
    reads.fetch_add(1, std::memory_order_relaxed);
    if (batch->status.ok()) {
      read_bytes.fetch_add(batch->bytes, std::memory_order_relaxed);
    } else {
      failed_reads.fetch_add(1, std::memory_order_relaxed);
      if (batch->past_deadline) deadline_reads.fetch_add(1, std::memory_order_relaxed);
    }
    batch->done(std::move(batch->status));
  }
}

// Sleeps until UCX or a caller has something, or the next deadline.
void UcxChannel::Impl::Sleep() {
  if (ucp_worker_arm(worker) == UCS_ERR_BUSY) return;  // events already pending
  int timeout = kIdleWaitMs;
  const TimeMs now = clock->NowMs();
  for (const auto& batch : batches) {
    if (batch->pending != 0 && !batch->past_deadline) {
      timeout = static_cast<int>(std::clamp<TimeMs>(batch->deadline_ms - now, 0, timeout));
    }
  }
  pollfd fds[2] = {{ucx_fd, POLLIN, 0}, {wake_fd.get(), POLLIN, 0}};
  (void)::poll(fds, 2, timeout);
  if (fds[1].revents & POLLIN) {
    std::uint64_t count = 0;
    (void)!::read(wake_fd.get(), &count, sizeof(count));
  }
}

// At stop: queued commands fail, every endpoint closes, reads not landing
// end, and the thread progresses until every landing read and every send has
// completed (a slot is never left being written), then every batch ends.
void UcxChannel::Impl::Shutdown() {
  std::deque<Command> left;
  {
    MutexLock lock(&mu);
    left.swap(commands);
  }
  const Status stopping(ErrorCode::kUnavailable, "the UCX channel is stopping");
  for (Command& command : left) {
    if (auto* connect = std::get_if<std::unique_ptr<ConnectCommand>>(&command)) {
      (*connect)->reply.set_value(stopping);
    } else if (auto* batch = std::get_if<std::unique_ptr<Batch>>(&command)) {
      (*batch)->status = stopping;
      batches.push_back(std::move(*batch));
    }
  }
  for (auto& [handle, peer] : peers) {
    peer.disconnect_requested = true;
    EndPeer(peer);
  }
  for (auto it = reads_in_flight.begin(); it != reads_in_flight.end();) {
    const auto current = it++;
    if (!current->second.landing) EndRead(current->first, stopping);
  }
  while (!peers.empty() || !reads_in_flight.empty() || sends_in_flight != 0) {
    ucp_worker_progress(worker);
    ReapPeers();
  }
  FinishBatches();
}

UcxChannel::UcxChannel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<UcxChannel>> UcxChannel::Create(std::byte* pool, std::size_t size,
                                                       const Clock* clock, const UcxDataKey& key) {
  auto impl = std::make_unique<Impl>();
  impl->clock = clock;
  impl->key = key;
  UcxDescriptor descriptor;
  LMC_RETURN_IF_ERROR(impl->Init(pool, size, &descriptor));
  std::unique_ptr<UcxChannel> channel(new UcxChannel(std::move(impl)));
  channel->descriptor_ = std::move(descriptor);
  Impl* running = channel->impl_.get();
  running->thread = std::thread([running] { running->Run(); });
  return channel;
}

UcxChannel::~UcxChannel() {
  impl_->stop.store(true);
  impl_->Wake();
  impl_->thread.join();
}

Result<PeerHandle> UcxChannel::Connect(const UcxDescriptor& descriptor) {
  auto command = std::make_unique<Impl::ConnectCommand>();
  command->descriptor = descriptor;
  std::future<Result<PeerHandle>> reply = command->reply.get_future();
  impl_->Post(std::move(command));
  return reply.get();
}

void UcxChannel::Disconnect(PeerHandle peer) { impl_->Post(Impl::DisconnectCommand{peer}); }

void UcxChannel::Read(PeerHandle peer, std::vector<UcxRead> reads, TimeMs deadline_ms,
                      std::function<void(Status)> done) {
  auto batch = std::make_unique<Impl::Batch>();
  batch->peer = peer;
  batch->reads = std::move(reads);
  batch->deadline_ms = deadline_ms;
  batch->done = std::move(done);
  impl_->Post(std::move(batch));
}

UcxChannelStats UcxChannel::Stats() const {
  const Impl& i = *impl_;
  auto load = [](const std::atomic<std::uint64_t>& v) { return v.load(std::memory_order_relaxed); };
  UcxChannelStats s;
  s.peers = load(i.open_peers);
  s.reads = load(i.reads);
  s.read_bytes = load(i.read_bytes);
  s.failed_reads = load(i.failed_reads);
  s.deadline_reads = load(i.deadline_reads);
  s.refused_reads = load(i.refused_reads);
  s.served_reads = load(i.served_reads);
  s.served_bytes = load(i.served_bytes);
  s.refused_serves = load(i.refused_serves);
  s.late_replies = load(i.late_replies);
  return s;
}

}  // namespace lmcache::fleet
