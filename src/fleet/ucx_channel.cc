#include "fleet/ucx_channel.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "fleet/ucx_channel_impl.h"

namespace lmcache::fleet {

LMC_STATS_ROWS(UcxChannelStatRows, UcxChannelStats, LMC_UCX_CHANNEL_STATS)

Status UcxError(const char* what, ucs_status_t status) {
  return Status(ErrorCode::kIoError, std::string(what) + ": " + ucs_status_string(status));
}

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
  // Eager messages and rendezvous fragments by copy, never zero-copy (see
  // PreferCopyingTcp); RDMA's rendezvous gets and puts are not fragments and
  // stay zero-copy. An operator's own UCX_ZCOPY_THRESH wins.
  // Only the devices the operator's listen address is on (main resolves
  // it): UCX's TCP transport listens on every device it uses.
  if (!options.net_devices.empty()) {
    if (ucs_status_t s = ucp_config_modify(config, "NET_DEVICES", options.net_devices.c_str());
        s != UCS_OK) {
      ucp_config_release(config);
      return UcxError("ucp_config_modify(NET_DEVICES)", s);
    }
  }
  if (std::getenv("UCX_ZCOPY_THRESH") == nullptr) {
    if (ucs_status_t s = ucp_config_modify(config, "ZCOPY_THRESH", "inf"); s != UCS_OK) {
      ucp_config_release(config);
      return UcxError("ucp_config_modify(ZCOPY_THRESH)", s);
    }
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
  if (descriptor->worker_address.size() > kMaxWorkerAddressBytes) {
    return Status(ErrorCode::kInternal, "UCX's worker address exceeds 64 KiB");
  }
  descriptor->size = size;

  LMC_RETURN_IF_ERROR(mailbox.Open());
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
  for (Command& command : mailbox.TakeAll()) {
    if (auto* connect = std::get_if<std::unique_ptr<ConnectCommand>>(&command)) {
      Connect(**connect);
    } else if (auto* disconnect = std::get_if<DisconnectCommand>(&command)) {
      auto peer = peers.find(disconnect->peer);
      if (peer != peers.end()) {
        peer->second.disconnect_requested = true;
        EndPeer(peer->second);
      }
    } else if (auto* guard = std::get_if<std::unique_ptr<GuardCommand>>(&command)) {
      serve_guard = std::move((*guard)->guard);
      (*guard)->set.set_value();
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
  counters.peers.fetch_add(1, std::memory_order_relaxed);
  command.reply.set_value(handle);
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
  if (!peer.failed) counters.peers.fetch_sub(1, std::memory_order_relaxed);
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
  pollfd fds[2] = {{ucx_fd, POLLIN, 0}, {mailbox.fd(), POLLIN, 0}};
  (void)::poll(fds, 2, timeout);
  if (fds[1].revents & POLLIN) mailbox.Drain();
}

// At stop: queued commands fail, every endpoint closes, reads not landing
// end, and the thread progresses until every landing read and every send has
// completed (a slot is never left being written), then every batch ends.
void UcxChannel::Impl::Shutdown() {
  const Status stopping(ErrorCode::kUnavailable, "the UCX channel is stopping");
  for (Command& command : mailbox.TakeAll()) {
    if (auto* connect = std::get_if<std::unique_ptr<ConnectCommand>>(&command)) {
      (*connect)->reply.set_value(stopping);
    } else if (auto* guard = std::get_if<std::unique_ptr<GuardCommand>>(&command)) {
      (*guard)->set.set_value();
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
  // Bounded in real time: a rendezvous receive from a peer that stopped
  // answering may never end. Past the bound its read ends as abandoned, and
  // destroying the worker (after this thread) cancels the receive; the server
  // is stopping, so nothing reuses its slot meanwhile.
  const auto give_up = std::chrono::steady_clock::now() + kShutdownWait;
  while (!peers.empty() || !reads_in_flight.empty() || sends_in_flight != 0) {
    ucp_worker_progress(worker);
    ReapPeers();
    if (std::chrono::steady_clock::now() < give_up) continue;
    while (!reads_in_flight.empty()) {
      const ReadId id = reads_in_flight.begin()->first;
      EndRead(id,
              Status(ErrorCode::kUnavailable, "abandoned at stop: the peer stopped answering"));
    }
    break;
  }
  FinishBatches();
}

void PreferCopyingTcp() {
  // UCX 1.13.1's TCP transport completes a zero-copy send twice when its
  // socket fails under it (uct_tcp_ep_sendv: the send error purges the
  // endpoint, which completes the send, then completes it again), and the
  // assertion that catches it aborts the process: a server serving a peer
  // that died mid-read went down with it (test_p2p_faults.py, under ctest's
  // load). Without PUT, TCP moves a rendezvous's bytes as active-message
  // fragments, and with ZCOPY_THRESH=inf (Create) those, and every eager
  // message, go by copy: no zero-copy send exists on TCP. RDMA transports
  // keep their zero-copy gets and puts. UCX reads a transport's settings
  // only from the environment (ucp_config_modify reaches a transport's field
  // by its bare name, "PUT_ENABLE", which other transports may share). No
  // zero-copy I/O vectors (TCP_MAX_IOV=0) would do it too, but UCX 1.13.1
  // then refuses its own short messages ("iovcnt(4) should be limited by
  // 2"). An operator's own UCX_TCP_PUT_ENABLE wins (no overwrite).
  ::setenv("UCX_TCP_PUT_ENABLE", "n", /*overwrite=*/0);
  // Copied fragments of 64 KiB, UCX's receive segment, instead of its 8 KiB
  // send segment: one send(2) per 64 KiB, not per 8 KiB. The channel's reads
  // went from 1.3 to 3.6 GB/s over loopback TCP (bench/ucx_channel_bench,
  // docs/performance.md), past UCX's own zero-copy default. A sender's
  // segment must fit its receiver's, and every member runs these defaults:
  // an operator who sets either size sets both, the same on every member.
  if (std::getenv("UCX_TCP_TX_SEG_SIZE") == nullptr &&
      std::getenv("UCX_TCP_RX_SEG_SIZE") == nullptr) {
    ::setenv("UCX_TCP_TX_SEG_SIZE", "64K", /*overwrite=*/0);
  }
}

UcxChannel::UcxChannel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<UcxChannel>> UcxChannel::Create(std::byte* pool, std::size_t size,
                                                       const Clock* clock, const FleetDataKey& key,
                                                       UcxChannelOptions options) {
  if (std::getenv("UCX_TCP_PUT_ENABLE") == nullptr) PreferCopyingTcp();  // main did it already
  auto impl = std::make_unique<Impl>();
  impl->clock = clock;
  impl->keys = DataChannelKeys::From(key);
  impl->options = std::move(options);
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
  impl_->mailbox.Wake();
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

void UcxChannel::SetServeGuard(ServeGuard guard) {
  auto command = std::make_unique<Impl::GuardCommand>();
  command->guard = std::move(guard);
  std::future<void> set = command->set.get_future();
  impl_->Post(std::move(command));
  set.get();
}

void UcxChannel::EndReads() {
  impl_->reads_ended.store(true, std::memory_order_release);
  impl_->mailbox.Wake();
}

void UcxChannel::Read(PeerHandle peer, std::vector<UcxRead> reads, TimeMs deadline_ms,
                      std::function<void(Status)> done) {
  ReadEach(peer, std::move(reads), deadline_ms,
           [done = std::move(done)](Status status, std::vector<bool>) { done(std::move(status)); });
}

void UcxChannel::ReadEach(PeerHandle peer, std::vector<UcxRead> reads, TimeMs deadline_ms,
                          ReadsDone done) {
  auto batch = std::make_unique<Impl::Batch>();
  batch->peer = peer;
  batch->reads = std::move(reads);
  batch->landed.assign(batch->reads.size(), false);
  batch->deadline_ms = deadline_ms;
  batch->done = std::move(done);
  impl_->Post(std::move(batch));
}

UcxChannelStats UcxChannel::Stats() const {
  UcxChannelStats s;
  impl_->counters.CopyTo(&s);
  return s;
}

}  // namespace lmcache::fleet
