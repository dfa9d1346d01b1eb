// OpTable: every operation of the protocol, one row each.
//
// A row is the whole definition of an operation: its wire identity (the
// reference's frozen integer id and snake_case name, spec 2.4), the thread
// pool that runs it (spec 16), its payload arity and size limit (checked
// before anything is decoded), the failure value a reference client decodes
// as the operation's declared reply type (frame 3 of a failed reply), and
// its handler bound to a typed payload decoder. Operation families
// (transfer_ops, lookup_ops, admin_ops, ...) add their rows; the table then
// resolves operation frames and indexes per-operation statistics by row.
//
// Thread-safety: built on one thread before serving; read-only afterwards,
// so lookups are safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lmcache/protocol.h"
#include "lmcache/status.h"
#include "server/request.h"

namespace lmcache::server {

using Op = lmcache::Op;

// Frame 3 of a failed request: a value of the operation's declared reply
// type, so a reference client (which decodes typed) degrades instead of
// waiting for its timeout.
enum class FailureValue : std::uint8_t {
  kNil,                    // None / Optional
  kFalse,                  // bool
  kZero,                   // int / int | None
  kEmptyString,            // str
  kEmptyList,              // list
  kEventFailure,           // tuple[bytes, bool]: [b"", false]
  kZeroFalse,              // tuple[int, bool]: [0, false]
  kEmptyPrepareStore,      // {"context": {"slots": [], "chunk_indices": []}}
  kFailedPrepareRetrieve,  // {"success": false, "data": b"", "context": {}}
  kFailedRegistration,     // {"shm_name": "", "pool_size": 0, "error": <message>}
  kKvEventsDisabled,       // KVEventPollResult with enabled = false
  kChunkEventsFailure,     // tuple[bytes, list[tuple[bytes, int, int]], bool]: [b"", [], false]
};

// The request size limit of an operation whose payload is a key: a key
// carries up to 4 Mi token ids of at most 5 bytes each, and its other fields.
inline constexpr std::size_t kKeyRequestBytes = 24u << 20;

struct OpSpec {
  Op op;
  std::string_view name;
  bool frozen_id;  // travels as an integer id in reference clients (1-34)
  Pool pool;
  std::uint8_t min_payloads;
  std::uint8_t max_payloads;
  std::size_t max_request_bytes;  // all payload frames together
  FailureValue failure;
};

// What an operation answers: its value, or a failure, whose frame 3 is the
// operation's declared failure value unless the handler gives its own (a
// failed store still answers a real, completed event handle, because a
// reference client imports whatever handle comes back).
class OpResult {
 public:
  OpResult(std::string value) : result_(std::move(value)) {}  // NOLINT: implicit by design
  OpResult(Status status) : result_(std::move(status)) {}     // NOLINT
  OpResult(Result<std::string> result) : result_(std::move(result)) {}  // NOLINT
  static OpResult Failure(Status status, std::string failure_value) {
    OpResult r(std::move(status));
    r.failure_value_ = std::move(failure_value);
    return r;
  }
  bool ok() const { return result_.ok(); }
  const std::string& value() const { return *result_; }
  const Status& status() const { return result_.status(); }
  // The handler's own frame 3 for a failure, if it gave one.
  const std::optional<std::string>& failure_value() const { return failure_value_; }

 private:
  Result<std::string> result_;
  std::optional<std::string> failure_value_;
};

// Called exactly once with the operation's result, from any thread, with no
// lock of the handler held (it may send the reply at once).
using Respond = std::function<void(OpResult)>;
// Runs one request. The payload views stay valid until `respond` is called.
using Handler = std::function<void(const RequestContext&, Payloads, Respond)>;
// Runs one request of a streaming operation: it sends items
// (ReplyKind::kStreamItem) and finally the end marker (kStreamEnd) through
// `emit`, one call at a time, or answers a failure through `respond`
// instead of the end marker; nothing is sent after either. The payload
// views are valid only during the call.
using StreamHandler = std::function<void(const RequestContext&, Payloads, ReplyFn emit,
                                         Respond respond)>;

struct OpRow {
  OpSpec spec;
  Handler handle;        // null for a streaming operation
  StreamHandler stream;  // set only for a streaming operation
  std::size_t index = 0;  // position in the table (statistics)
};

// A handler from a typed payload decoder (Payloads -> Result<Args>) and a
// synchronous function (context, Args) -> OpResult (or Result<std::string>).
template <typename Decode, typename Fn>
Handler Bind(Decode decode, Fn fn) {
  return [decode, fn](const RequestContext& context, Payloads payloads, const Respond& respond) {
    auto args = decode(payloads);
    if (!args.ok()) {
      respond(args.status());
      return;
    }
    respond(fn(context, *args));
  };
}

class OpTable {
 public:
  // Adds a row; an operation id or name may be added once.
  void Add(OpSpec spec, Handler handler);
  // Adds a streaming operation's row (the reference's RpcSpec.streaming).
  void AddStream(OpSpec spec, StreamHandler handler);
  // By integer id (frozen ids only) or name. "finish_read" names commit_retrieve.
  const OpRow* FindById(std::int64_t id) const;
  const OpRow* FindByName(std::string_view name) const;
  const OpRow* Find(Op op) const;
  // The row an operation frame names (a msgpack int or str).
  Result<const OpRow*> Resolve(std::string_view operation_frame) const;
  const std::vector<OpRow>& rows() const { return rows_; }

 private:
  void AddRow(OpRow row);

  std::vector<OpRow> rows_;
};

// Frame 3 of a failed reply to `spec`.
std::string EncodeFailureValue(const OpSpec& spec, const Status& status);

}  // namespace lmcache::server
