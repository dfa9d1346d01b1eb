// b3sum oracle: the independent BLAKE3 reference for tests. It writes bytes to a private temp
// file and runs the BLAKE3 team's own `b3sum --no-names` on it, so digests are never checked
// against our own code. A missing b3sum is a failure, not a skip: otherwise a CI image without
// it would silently stop checking the digests (assert on FindB3sum() with kB3sumInstallHint).
// Thread-safety: not synchronised; use from one test thread (B3sumHex reuses one file per dir).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <string>
#include <system_error>

#include "fakes/temp_dir.h"

namespace lmcache::testing {

inline constexpr const char* kB3sumInstallHint =
    "b3sum not found: install it (apt-get install b3sum, or tools/dev.sh) - the BLAKE3 and "
    "token hasher tests use it as the reference BLAKE3 implementation";

// Runs `command` through the shell; returns its stdout, or nullopt if it did not exit 0.
inline std::optional<std::string> RunCommand(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return std::nullopt;
  std::string out;
  char buf[256];
  while (std::fgets(buf, sizeof(buf), pipe) != nullptr) out += buf;
  const int status = pclose(pipe);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  return out;
}

// `s` as one single-quoted shell word.
inline std::string ShellQuote(const std::string& s) {
  std::string quoted = "'";
  for (const char c : s) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// Path of the b3sum binary, or "" if it is not installed.
inline std::string FindB3sum() {
  if (std::filesystem::exists("/usr/bin/b3sum")) return "/usr/bin/b3sum";
  const auto found = RunCommand("command -v b3sum 2>/dev/null");
  if (!found || found->empty()) return "";
  return found->substr(0, found->find('\n'));
}

// Writes `bytes` to a file in `dir` and returns b3sum's 64-char hex digest of it ("" on error).
inline std::string B3sumHex(const std::string& b3sum, const TempDir& dir,
                            std::span<const std::uint8_t> bytes) {
  const auto file = dir.path() / "input.bin";
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    if (!out) return "";
  }
  const auto out = RunCommand(ShellQuote(b3sum) + " --no-names " + ShellQuote(file.string()));
  if (!out || out->size() < 64) return "";
  return out->substr(0, 64);
}

}  // namespace lmcache::testing
