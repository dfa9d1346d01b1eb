// RawUcxWorker: a bare UCX worker for tests that play a hostile party on a
// UCX data channel (a host without the fleet key, or a member lying about
// what it sends): it connects to a channel's worker address, sends active
// messages with whatever header and bytes the test makes, and takes the
// read requests a channel sends it, with the endpoint to answer on.
//
// Thread-safety: none; one test thread drives it (UCS_THREAD_MODE_SINGLE),
// progressing it in its own calls.
#pragma once

#include <ucp/api/ucp.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace lmcache::testing {

class RawUcxWorker {
 public:
  struct Received {
    std::vector<std::uint8_t> header;
    ucp_ep_h reply_ep = nullptr;  // null when the sender did not offer one
  };

  RawUcxWorker() {
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_AM;
    Check(ucp_init(&params, nullptr, &context_), "ucp_init");
    ucp_worker_params_t worker_params{};
    worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    worker_params.thread_mode = UCS_THREAD_MODE_SINGLE;
    Check(ucp_worker_create(context_, &worker_params, &worker_), "ucp_worker_create");
  }
  ~RawUcxWorker() {
    for (ucp_ep_h ep : eps_) {
      ucp_request_param_t close{};
      close.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      close.flags = UCP_EP_CLOSE_FLAG_FORCE;
      Wait(ucp_ep_close_nbx(ep, &close));
    }
    ucp_worker_destroy(worker_);
    ucp_cleanup(context_);
  }
  RawUcxWorker(const RawUcxWorker&) = delete;
  RawUcxWorker& operator=(const RawUcxWorker&) = delete;

  std::string Address() const {
    ucp_address_t* address = nullptr;
    std::size_t length = 0;
    Check(ucp_worker_get_address(worker_, &address, &length), "ucp_worker_get_address");
    std::string out(reinterpret_cast<const char*>(address), length);
    ucp_worker_release_address(worker_, address);
    return out;
  }

  // An endpoint to the worker whose address is `address` (a channel's
  // UcxDescriptor::worker_address).
  ucp_ep_h Connect(const std::string& address) {
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    params.address = reinterpret_cast<const ucp_address_t*>(address.data());
    ucp_ep_h ep = nullptr;
    Check(ucp_ep_create(worker_, &params, &ep), "ucp_ep_create");
    eps_.push_back(ep);
    return ep;
  }

  // Sends one active message and progresses until UCX has sent it.
  void Send(ucp_ep_h ep, unsigned id, const void* header, std::size_t header_length,
            const void* data, std::size_t length, bool offer_reply_ep = false) {
    ucp_request_param_t param{};
    if (offer_reply_ep) {
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_AM_SEND_FLAG_REPLY;
    }
    Wait(ucp_am_send_nbx(ep, id, header, header_length, data, length, &param));
  }

  // Takes every active message `id` sent to this worker from now on.
  void Listen(unsigned id) {
    ucp_am_handler_param_t param{};
    param.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                       UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    param.id = id;
    param.flags = UCP_AM_FLAG_WHOLE_MSG;
    param.cb = &RawUcxWorker::OnMessage;
    param.arg = this;
    Check(ucp_worker_set_am_recv_handler(worker_, &param), "ucp_worker_set_am_recv_handler");
  }

  // Progresses until a message taken by Listen arrives (at most `limit`).
  bool NextMessage(Received* out, std::chrono::seconds limit = std::chrono::seconds(60)) {
    const auto give_up = std::chrono::steady_clock::now() + limit;
    while (received_.empty() && std::chrono::steady_clock::now() < give_up) {
      if (ucp_worker_progress(worker_) == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    if (received_.empty()) return false;
    *out = std::move(received_.front());
    received_.erase(received_.begin());
    return true;
  }

  void Progress(std::chrono::milliseconds how_long) {
    const auto until = std::chrono::steady_clock::now() + how_long;
    while (std::chrono::steady_clock::now() < until) {
      if (ucp_worker_progress(worker_) == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

 private:
  static void Check(ucs_status_t status, const char* what) {
    if (status != UCS_OK) throw std::runtime_error(std::string(what) + ": " + ucs_status_string(status));
  }
  void Wait(ucs_status_ptr_t request) {
    if (request == nullptr) return;
    if (UCS_PTR_IS_ERR(request)) return;  // the send failed: for an attacker, nothing to do
    while (ucp_request_check_status(request) == UCS_INPROGRESS) ucp_worker_progress(worker_);
    ucp_request_free(request);
  }
  static ucs_status_t OnMessage(void* arg, const void* header, std::size_t header_length, void*,
                                std::size_t, const ucp_am_recv_param_t* param) {
    auto* self = static_cast<RawUcxWorker*>(arg);
    Received r;
    r.header.assign(static_cast<const std::uint8_t*>(header),
                    static_cast<const std::uint8_t*>(header) + header_length);
    if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) r.reply_ep = param->reply_ep;
    self->received_.push_back(std::move(r));
    return UCS_OK;  // the message's data (none for a read request) is not kept
  }

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::vector<ucp_ep_h> eps_;
  std::vector<Received> received_;
};

}  // namespace lmcache::testing
