#include "common/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

namespace lmcache {
namespace {

std::string Lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

bool IsValidLogLevel(std::string_view level) {
  const std::string name = Lower(level);
  // spdlog maps unknown names to "off"; accept "off" only when asked for by name.
  return name == "off" || spdlog::level::from_str(name) != spdlog::level::off;
}

namespace {

// Appends to a file that can be reopened in place (after logrotate moved it).
class ReopenableFileSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit ReopenableFileSink(std::string path) : path_(std::move(path)) {}
  ~ReopenableFileSink() override {
    if (file_ != nullptr) std::fclose(file_);
  }
  Status Open() {
    std::lock_guard<std::mutex> lock(mutex_);
    return OpenLocked();
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    if (file_ != nullptr) std::fwrite(line.data(), 1, line.size(), file_);
  }
  void flush_() override {
    if (file_ != nullptr) std::fflush(file_);
  }

 private:
  Status OpenLocked() {
    std::FILE* fresh = std::fopen(path_.c_str(), "a");
    if (fresh == nullptr) {
      return Status(ErrorCode::kIoError, "--log-file: cannot open " + path_ + ": " +
                                             std::strerror(errno));
    }
    if (file_ != nullptr) std::fclose(file_);
    file_ = fresh;
    return Status::Ok();
  }
  const std::string path_;
  std::FILE* file_ = nullptr;
};

// %j: the message, escaped for a JSON string.
class JsonMessageFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    for (const char c : std::string_view(msg.payload.data(), msg.payload.size())) {
      switch (c) {
        case '"': dest.append(std::string_view("\\\"")); break;
        case '\\': dest.append(std::string_view("\\\\")); break;
        case '\n': dest.append(std::string_view("\\n")); break;
        case '\r': dest.append(std::string_view("\\r")); break;
        case '\t': dest.append(std::string_view("\\t")); break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            char escaped[8];
            std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned>(c));
            dest.append(std::string_view(escaped));
          } else {
            dest.push_back(c);
          }
      }
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessageFlag>();
  }
};

std::shared_ptr<ReopenableFileSink>& FileSink() {
  static std::shared_ptr<ReopenableFileSink> sink;
  return sink;
}

}  // namespace

Result<LogFormat> ParseLogFormat(std::string_view name) {
  const std::string lower = Lower(name);
  if (lower == "text") return LogFormat::kText;
  if (lower == "json") return LogFormat::kJson;
  return InvalidConfig("--log-format must be text or json, got '" + std::string(name) + "'");
}

Status InitLogging(const LogOptions& options) {
  if (!IsValidLogLevel(options.level)) {
    return InvalidConfig("--log-level: unknown level '" + options.level +
                         "'; use trace, debug, info, warn, error, critical or off");
  }
  spdlog::sink_ptr sink;
  if (options.file.empty()) {
    sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  } else {
    auto file = std::make_shared<ReopenableFileSink>(options.file);
    LMC_RETURN_IF_ERROR(file->Open());
    FileSink() = file;
    sink = file;
  }
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  if (options.format == LogFormat::kJson) {
    formatter->add_flag<JsonMessageFlag>('j').set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","pid":%P,"tid":%t,"msg":"%j"})");
  } else {
    formatter->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] [pid %P tid %t] %v");
  }
  sink->set_formatter(std::move(formatter));
  auto logger = std::make_shared<spdlog::logger>("lmcache", sink);
  logger->set_level(spdlog::level::from_str(Lower(options.level)));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
  return Status::Ok();
}

Status InitLogging(std::string_view level) {
  LogOptions options;
  options.level = std::string(level);
  return InitLogging(options);
}

Status ReopenLogFile() {
  const std::shared_ptr<ReopenableFileSink> sink = FileSink();
  if (!sink) return Status::Ok();
  return sink->Open();
}

Status SetLogLevel(std::string_view level) {
  if (!IsValidLogLevel(level)) {
    return InvalidArgument("unknown log level '" + std::string(level) +
                           "'; use trace, debug, info, warn, error, critical or off");
  }
  spdlog::set_level(spdlog::level::from_str(Lower(level)));
  return Status::Ok();
}

std::string CurrentLogLevel() {
  const auto name = spdlog::level::to_string_view(spdlog::default_logger()->level());
  return std::string(name.data(), name.size());
}

bool RateLimitedLog::Allow(std::uint64_t* suppressed) {
  const TimeMs now = clock_->NowMs();
  TimeMs next = next_allowed_ms_.load(std::memory_order_relaxed);
  if (now < next ||
      !next_allowed_ms_.compare_exchange_strong(next, now + interval_ms_,
                                                std::memory_order_relaxed)) {
    suppressed_.fetch_add(1, std::memory_order_relaxed);
    total_suppressed_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  *suppressed = suppressed_.exchange(0, std::memory_order_relaxed);
  return true;
}

}  // namespace lmcache
