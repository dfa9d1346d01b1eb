#include "server/op_table.h"

#include "common/check.h"
#include "common/msgpack_codec.h"
#include "common/msgpack_cursor.h"

namespace lmcache::server {

void OpTable::Add(OpSpec spec, Handler handler) { AddRow({spec, std::move(handler), nullptr, 0}); }

void OpTable::AddStream(OpSpec spec, StreamHandler handler) {
  AddRow({spec, nullptr, std::move(handler), 0});
}

void OpTable::AddRow(OpRow row) {
  LMC_CHECK(Find(row.spec.op) == nullptr);
  LMC_CHECK(FindByName(row.spec.name) == nullptr);
  LMC_CHECK(row.spec.min_payloads <= row.spec.max_payloads);
  row.index = rows_.size();
  rows_.push_back(std::move(row));
}

const OpRow* OpTable::FindById(std::int64_t id) const {
  for (const OpRow& row : rows_) {
    if (row.spec.frozen_id && static_cast<std::int64_t>(row.spec.op) == id) return &row;
  }
  return nullptr;
}

const OpRow* OpTable::FindByName(std::string_view name) const {
  if (name == "finish_read") name = "commit_retrieve";  // the original design's name
  for (const OpRow& row : rows_) {
    if (row.spec.name == name) return &row;
  }
  return nullptr;
}

const OpRow* OpTable::Find(Op op) const {
  for (const OpRow& row : rows_) {
    if (row.spec.op == op) return &row;
  }
  return nullptr;
}

Result<const OpRow*> OpTable::Resolve(std::string_view frame) const {
  if (frame.empty()) return msgpk::Malformed("operation", "empty frame");
  msgpk::MsgpackCursor in(frame);
  const OpRow* row = nullptr;
  std::string what;
  if (in.NextIsStr()) {
    LMC_ASSIGN_OR_RETURN(const std::string_view name, in.ReadStr("operation"));
    row = FindByName(name);
    what.append("'").append(name).append("'");
  } else if (in.NextIsInt()) {
    // Any integer is well-formed; only the frozen ids name an operation (an
    // id above 2^63 must not alias a small one by losing its top bit).
    msgpk::MsgpackCursor as_signed = in;
    if (Result<std::int64_t> id = as_signed.ReadInt("operation"); id.ok()) {
      in = as_signed;
      row = FindById(*id);
      what = "id " + std::to_string(*id);
    } else {
      LMC_ASSIGN_OR_RETURN(const std::uint64_t big, in.ReadUint("operation"));
      what = "id " + std::to_string(big);
    }
  } else {
    return msgpk::Malformed("operation", "expected an int id or a str name");
  }
  if (!in.AtEnd()) return msgpk::Malformed("operation", "trailing bytes after the value");
  if (row == nullptr) return Status(ErrorCode::kUnknownOperation, "unknown operation " + what);
  return row;
}

std::string EncodeFailureValue(const OpSpec& spec, const Status& status) {
  msgpk::Encoder e;
  switch (spec.failure) {
    case FailureValue::kNil: e.Nil(); break;
    case FailureValue::kFalse: e.Bool(false); break;
    case FailureValue::kZero: e.Int(0); break;
    case FailureValue::kEmptyString: e.Str(""); break;
    case FailureValue::kEmptyList: e.Array(0); break;
    case FailureValue::kEventFailure: e.Array(2).Bin("").Bool(false); break;
    case FailureValue::kZeroFalse: e.Array(2).Int(0).Bool(false); break;
    case FailureValue::kChunkEventsFailure: e.Array(3).Bin("").Array(0).Bool(false); break;
    case FailureValue::kEmptyPrepareStore:
      e.Map(1).Str("context").Map(2).Str("slots").Array(0).Str("chunk_indices").Array(0);
      break;
    case FailureValue::kFailedPrepareRetrieve:
      e.Map(3).Str("success").Bool(false).Str("data").Bin("").Str("context").Map(0);
      break;
    case FailureValue::kFailedRegistration:
      e.Map(3).Str("shm_name").Str("").Str("pool_size").Int(0).Str("error").Str(status.message());
      break;
    case FailureValue::kKvEventsDisabled:
      e.Map(5).Str("enabled").Bool(false).Str("incarnation").Int(0).Str("next_cursor").Int(0);
      e.Str("lost").Bool(false).Str("events").Array(0);
      break;
  }
  return e.Take();
}

}  // namespace lmcache::server
