// The reads of a UCX data channel: a requester's batches and requests, an
// owner's checks and answers, and the landing of the bytes (UcxChannel::Impl,
// fleet/ucx_channel_impl.h).
#include <cstring>
#include <string>

#include "fleet/ucx_channel_impl.h"

namespace lmcache::fleet {

void UcxChannel::Impl::StartBatch(std::unique_ptr<Batch> batch) {
  Batch* b = batch.get();
  batches.push_back(std::move(batch));
  if (reads_ended.load(std::memory_order_acquire)) {
    b->status = Status(ErrorCode::kUnavailable, "the data channel is stopping");
    return;
  }
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
      counters.refused_reads.fetch_add(1, std::memory_order_relaxed);
      b->status = Status(ErrorCode::kInvalidArgument,
                         std::string("a read outside ") + (remote_ok ? "this" : "the peer's") +
                             " pool: offset " +
                             std::to_string(remote_ok ? r.local_offset : r.remote_offset) + ", " +
                             std::to_string(r.size) + " bytes");
      return;
    }
  }
  for (std::size_t i = 0; i < b->reads.size(); ++i) SendRequest(peer->second, b, i);
}

void UcxChannel::Impl::SendRequest(Peer& peer, Batch* batch, std::size_t index) {
  const UcxRead& read = batch->reads[index];
  // Unguessable: a host that is not the owner cannot aim a reply at it.
  const ReadId id = NewReadId();
  reads_in_flight.emplace(id, Read{batch, index, read.local_offset, read.size, false, {}});
  batch->pending += 1;
  batch->bytes += read.size;
  auto* sending = new Sending{this, {}, {}, true};
  sending->request.id = id;
  sending->request.offset = read.remote_offset;
  sending->request.size = read.size;
  sending->request.task = read.task;
  sending->request.flags = options.verify_bytes ? kWantDigest : 0;
  SignRequest(keys, &sending->request);
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
  if (status != UCS_OK && sending->is_request) {
    impl->EndRead(sending->request.id, UcxError("a read request could not be sent", status));
  }
  if (request != nullptr) ucp_request_free(request);
}

void UcxChannel::Impl::EndRead(const ReadId& id, const Status& status) {
  auto read = reads_in_flight.find(id);
  if (read == reads_in_flight.end()) return;
  Batch* batch = read->second.batch;
  if (!status.ok() && batch->status.ok()) batch->status = status;
  if (status.ok()) batch->landed[read->second.index] = true;
  batch->pending -= 1;
  reads_in_flight.erase(read);  // `id` may be this entry's own key: not used after
}

// The owner's side: a peer asks for a range of our pool.
ucs_status_t UcxChannel::Impl::Serve(const void* header, std::size_t header_length,
                                     const ucp_am_recv_param_t* p) {
  if (header_length != sizeof(ReadRequest) ||
      (p->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0) {
    counters.refused_serves.fetch_add(1, std::memory_order_relaxed);
    return UCS_OK;  // not our request's shape: nobody to answer
  }
  ReadRequest request;
  std::memcpy(&request, header, sizeof(request));
  ErrorCode verdict = ErrorCode::kOk;
  if (!RequestSigned(keys, request)) {
    verdict = ErrorCode::kPermissionDenied;
  } else if ((request.flags & ~kWantDigest) != 0 || request.reserved != 0 || request.size == 0 ||
             request.offset > pool_size || request.size > pool_size - request.offset) {
    verdict = ErrorCode::kInvalidArgument;
  } else if (!serve_guard || !serve_guard(request.task, request.offset, request.size)) {
    // The bytes there are no longer (or never were) what the task locked.
    verdict = ErrorCode::kNotFound;
    counters.unheld_serves.fetch_add(1, std::memory_order_relaxed);
  }
  if (verdict != ErrorCode::kOk && verdict != ErrorCode::kNotFound) {
    counters.refused_serves.fetch_add(1, std::memory_order_relaxed);
  }
  Reply(p->reply_ep, request, verdict);
  return UCS_OK;
}

void UcxChannel::Impl::Reply(ucp_ep_h ep, const ReadRequest& request, ErrorCode status) {
  auto* sending = new Sending{this, {}, {}, false};
  ReadReply& reply = sending->reply;
  reply.id = request.id;
  reply.status = static_cast<std::uint32_t>(status);
  const bool with_bytes = status == ErrorCode::kOk;
  std::span<const std::byte> bytes;
  if (with_bytes) {
    bytes = {pool + request.offset, request.size};
    reply.size = request.size;
    if (request.flags & kWantDigest) reply.flags |= kHasDigest;
  }
  // The digest is of the bytes as they are now; should the task's lock be
  // released and the slot rewritten before UCX has sent them, the
  // requester's check fails the read instead of landing a torn object.
  SignReply(keys, bytes, &reply);
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.cb.send = &Impl::OnSent;
  param.user_data = sending;
  // The requester sees which of its endpoints the reply came on.
  param.flags = UCP_AM_SEND_FLAG_REPLY;
  if (with_bytes) {
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    param.memh = memh;
    counters.served_reads.fetch_add(1, std::memory_order_relaxed);
    counters.served_bytes.fetch_add(request.size, std::memory_order_relaxed);
  }
  sends_in_flight += 1;
  ucs_status_ptr_t sent =
      ucp_am_send_nbx(ep, kReadReplyId, &reply, sizeof(reply),
                      with_bytes ? pool + request.offset : nullptr, bytes.size(), &param);
  if (!UCS_PTR_IS_PTR(sent)) OnSent(nullptr, UCS_PTR_STATUS(sent), sending);
}

bool UcxChannel::Impl::FromItsOwner(const Read& read, const ucp_am_recv_param_t* p) const {
  if ((p->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0) return false;
  auto peer = peers.find(read.batch->peer);
  return peer != peers.end() && peer->second.ep != nullptr && peer->second.ep == p->reply_ep;
}

// The requester's side: a peer's answer to one of our reads. Nothing in it
// is believed before its MAC, its id and its endpoint are checked; its bytes
// count only once they match the owner's digest.
ucs_status_t UcxChannel::Impl::Land(const void* header, std::size_t header_length, void* data,
                                    std::size_t length, const ucp_am_recv_param_t* p) {
  Result<ReadReply> decoded = DecodeReply(
      keys, {static_cast<const std::uint8_t*>(header), header_length});
  if (!decoded.ok()) {
    counters.forged_replies.fetch_add(1, std::memory_order_relaxed);
    return UCS_OK;  // not a member's: the read goes on waiting for its owner
  }
  const ReadReply& reply = *decoded;
  auto read = reads_in_flight.find(reply.id);
  if (read == reads_in_flight.end() || read->second.landing) {
    counters.late_replies.fetch_add(1, std::memory_order_relaxed);
    return UCS_OK;  // ended (deadline, peer error) or never ours: its bytes are dropped
  }
  if (!FromItsOwner(read->second, p)) {
    counters.foreign_replies.fetch_add(1, std::memory_order_relaxed);
    return UCS_OK;  // another member's answer to a read it was not asked for
  }
  if (reply.status != 0) {
    EndRead(reply.id, Status(static_cast<ErrorCode>(reply.status), "the peer refused the read"));
    return UCS_OK;
  }
  if (length != read->second.size || reply.size != length) {
    EndRead(reply.id, Status(ErrorCode::kCorrupt, "the peer answered " + std::to_string(length) +
                                                      " bytes for a read of " +
                                                      std::to_string(read->second.size)));
    return UCS_OK;
  }
  if (options.verify_bytes && (reply.flags & kHasDigest) == 0) {
    counters.corrupt_replies.fetch_add(1, std::memory_order_relaxed);
    EndRead(reply.id, Status(ErrorCode::kCorrupt, "the peer's reply carries no digest of its bytes"));
    return UCS_OK;
  }
  std::byte* slot = pool + read->second.local_offset;
  if ((p->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0) {
    // Eager: the bytes are checked where they arrived, before the slot is written.
    const std::span<const std::byte> bytes(static_cast<const std::byte*>(data), length);
    if (options.verify_bytes && !ReplyBytesMatch(keys, reply, bytes)) {
      counters.corrupt_replies.fetch_add(1, std::memory_order_relaxed);
      EndRead(reply.id, Status(ErrorCode::kCorrupt, "the peer's bytes do not match its digest"));
      return UCS_OK;
    }
    std::memcpy(slot, data, length);
    EndRead(reply.id, Status::Ok());
    return UCS_OK;
  }
  read->second.landing = true;
  read->second.reply = reply;
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
  landing->impl->Landed(landing->read_id, status);
  if (request != nullptr) ucp_request_free(request);
}

void UcxChannel::Impl::Landed(const ReadId& id, ucs_status_t status) {
  auto read = reads_in_flight.find(id);
  if (read == reads_in_flight.end()) return;
  if (status != UCS_OK) {
    EndRead(id, UcxError("receiving a peer's bytes failed", status));
    return;
  }
  const Read& r = read->second;
  if (options.verify_bytes &&
      !ReplyBytesMatch(keys, r.reply, {pool + r.local_offset, r.size})) {
    // The slot holds bytes nobody vouches for: the read fails, so its
    // caller frees the slot instead of admitting it.
    counters.corrupt_replies.fetch_add(1, std::memory_order_relaxed);
    EndRead(id, Status(ErrorCode::kCorrupt, "the peer's bytes do not match its digest"));
    return;
  }
  EndRead(id, Status::Ok());
}

// A batch past its deadline ends its reads not yet landing (a later reply is
// dropped); a read already landing is waited for.
void UcxChannel::Impl::CheckDeadlines() {
  const TimeMs now = clock->NowMs();
  const bool ending = reads_ended.load(std::memory_order_acquire);
  for (auto& batch : batches) {
    if (batch->pending == 0 || batch->past_deadline || (now < batch->deadline_ms && !ending)) {
      continue;
    }
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
    counters.reads.fetch_add(1, std::memory_order_relaxed);
    if (batch->status.ok()) {
      counters.read_bytes.fetch_add(batch->bytes, std::memory_order_relaxed);
    } else {
      counters.failed_reads.fetch_add(1, std::memory_order_relaxed);
      if (batch->past_deadline) counters.deadline_reads.fetch_add(1, std::memory_order_relaxed);
    }
    batch->done(std::move(batch->status), std::move(batch->landed));
  }
}

}  // namespace lmcache::fleet
