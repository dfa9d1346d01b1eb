// The single mapping of ErrorCode to its stable name.
#include "lmcache/status.h"

namespace lmcache {

std::string_view ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "OK";
    case ErrorCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case ErrorCode::kMalformedRequest: return "MALFORMED_REQUEST";
    case ErrorCode::kUnknownOperation: return "UNKNOWN_OPERATION";
    case ErrorCode::kInvalidKey: return "INVALID_KEY";
    case ErrorCode::kTooLarge: return "TOO_LARGE";
    case ErrorCode::kPermissionDenied: return "PERMISSION_DENIED";
    case ErrorCode::kNotFound: return "NOT_FOUND";
    case ErrorCode::kAlreadyExists: return "ALREADY_EXISTS";
    case ErrorCode::kLocked: return "LOCKED";
    case ErrorCode::kWrongState: return "WRONG_STATE";
    case ErrorCode::kLeaseExpired: return "LEASE_EXPIRED";
    case ErrorCode::kNotRegistered: return "NOT_REGISTERED";
    case ErrorCode::kLayoutMismatch: return "LAYOUT_MISMATCH";
    case ErrorCode::kOutOfMemory: return "OUT_OF_MEMORY";
    case ErrorCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case ErrorCode::kShmTooSmall: return "SHM_TOO_SMALL";
    case ErrorCode::kInternal: return "INTERNAL";
    case ErrorCode::kIoError: return "IO_ERROR";
    case ErrorCode::kUnavailable: return "UNAVAILABLE";
    case ErrorCode::kNotSupported: return "NOT_SUPPORTED";
    case ErrorCode::kTimeout: return "TIMEOUT";
    case ErrorCode::kCorrupt: return "CORRUPT";
    case ErrorCode::kInvalidConfig: return "INVALID_CONFIG";
  }
  return "UNKNOWN";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out(ErrorCodeName(code_));
  out += ": ";
  out += message_;
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string message(context);
  message += ": ";
  message += message_;
  return Status(code_, std::move(message));
}

}  // namespace lmcache
