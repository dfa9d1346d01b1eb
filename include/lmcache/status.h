// lmcache/status.h: the project's one error vocabulary.
//
// ErrorCode values are stable and grouped by who is at fault; they travel on the
// wire (the {code, message} error map of a failed reply) and appear in logs, so a
// value, once released, never changes meaning. Status carries a code and a human
// message; Result<T> carries either a value or a non-OK Status.
//
// Thread-safety: Status and Result are plain values; distinct objects may be used
// from different threads freely, one object needs external synchronisation.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace lmcache {

enum class ErrorCode : std::uint16_t {
  kOk = 0,
  // 1xx: the request is invalid; the client must change it.
  kInvalidArgument = 100,
  kMalformedRequest = 101,
  kUnknownOperation = 102,
  kInvalidKey = 103,
  kTooLarge = 104,
  kPermissionDenied = 105,
  // 2xx: the request conflicts with the current state of an object or client.
  kNotFound = 200,
  kAlreadyExists = 201,
  kLocked = 202,
  kWrongState = 203,
  kLeaseExpired = 204,
  kNotRegistered = 205,
  kLayoutMismatch = 206,
  // 3xx: a resource ran out; retrying later may succeed.
  kOutOfMemory = 300,
  kResourceExhausted = 301,
  kShmTooSmall = 302,
  // 4xx: the server failed or cannot do this.
  kInternal = 400,
  kIoError = 401,
  kUnavailable = 402,
  kNotSupported = 403,
  kTimeout = 404,
  kCorrupt = 405,  // stored bytes failed their integrity check (an L2 object)
  // 5xx: the operator's configuration is invalid (startup only).
  kInvalidConfig = 500,
};

// Stable upper-case name of a code, e.g. "OUT_OF_MEMORY"; "UNKNOWN" for values
// outside the table (a newer peer may send one).
std::string_view ErrorCodeName(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "OK" or "<NAME>: <message>".
  std::string ToString() const;

  // Prepends context ("while doing X: ") to the message of a failed status.
  Status WithContext(std::string_view context) const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {ErrorCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {ErrorCode::kNotFound, std::move(m)}; }
inline Status Internal(std::string m) { return {ErrorCode::kInternal, std::move(m)}; }
inline Status InvalidConfig(std::string m) { return {ErrorCode::kInvalidConfig, std::move(m)}; }

// Either a T or a non-OK Status. Constructing a Result from an OK Status is a
// programming error and yields kInternal.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status)                         // NOLINT(google-explicit-constructor)
      : data_(status.ok() ? Status(ErrorCode::kInternal, "Result built from an OK status")
                          : std::move(status)) {}

  bool ok() const { return std::holds_alternative<T>(data_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(data_);
  }
  T& value() & { return std::get<T>(data_); }
  const T& value() const& { return std::get<T>(data_); }
  T&& value() && { return std::get<T>(std::move(data_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> data_;
};

}  // namespace lmcache

#define LMC_STATUS_CONCAT_INNER(a, b) a##b
#define LMC_STATUS_CONCAT(a, b) LMC_STATUS_CONCAT_INNER(a, b)

// Returns the Status of `expr` from the enclosing function when it is not OK.
// (The variable's name carries the line, so a use nested in a lambda inside
// another use's expression does not shadow it.)
#define LMC_RETURN_IF_ERROR(expr)                                                 \
  do {                                                                            \
    ::lmcache::Status LMC_STATUS_CONCAT(lmc_status_, __LINE__) = (expr);          \
    if (!LMC_STATUS_CONCAT(lmc_status_, __LINE__).ok())                           \
      return LMC_STATUS_CONCAT(lmc_status_, __LINE__);                            \
  } while (0)

// `lhs = value of expr` or return its Status from the enclosing function.
#define LMC_ASSIGN_OR_RETURN(lhs, expr)                       \
  auto LMC_STATUS_CONCAT(lmc_result_, __LINE__) = (expr);     \
  if (!LMC_STATUS_CONCAT(lmc_result_, __LINE__).ok())         \
    return LMC_STATUS_CONCAT(lmc_result_, __LINE__).status(); \
  lhs = std::move(LMC_STATUS_CONCAT(lmc_result_, __LINE__)).value()
