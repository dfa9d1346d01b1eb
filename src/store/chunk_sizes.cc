#include "store/chunk_sizes.h"

#include <charconv>

#include "store/object_key.h"

namespace lmcache::store {

Status ChunkSizes::CheckServedAt(std::string_view endpoint_model, std::string_view model) const {
  const std::int64_t advertised = Advertised(endpoint_model);
  const std::int64_t size = For(model);
  if (size == advertised) return Status::Ok();
  const std::string endpoint =
      endpoint_model.empty() ? std::string("this endpoint (every model's)")
                             : "this endpoint (--model-url " + std::string(endpoint_model) + ")";
  std::string remedy =
      "send them over the endpoint bound for it (--model-url " + std::string(model) + "=URL)";
  if (!overrides_.contains(model)) remedy = "send them over an endpoint of every model (--url)";
  return Status(ErrorCode::kLayoutMismatch,
                "model " + std::string(model) + " is cached in chunks of " + std::to_string(size) +
                    " tokens, but " + endpoint + " answers get_chunk_size with " +
                    std::to_string(advertised) + ": " + remedy);
}

std::string ChunkSizes::Describe() const {
  std::string out = std::to_string(default_size_);
  if (overrides_.empty()) return out;
  out += " (";
  for (const auto& [model, size] : overrides_) {
    if (out.back() != '(') out += ", ";
    out += model + "=" + std::to_string(size);
  }
  return out + ")";
}

Status CheckChunkSize(std::int64_t chunk_size, std::string_view flag) {
  if (chunk_size < 1 || chunk_size > kMaxChunkSize) {
    return InvalidConfig(std::string(flag) + " must be in [1, " + std::to_string(kMaxChunkSize) +
                         "] tokens, got " + std::to_string(chunk_size));
  }
  return Status::Ok();
}

Status CheckModelChunkSize(const std::string& model, std::int64_t size) {
  LMC_RETURN_IF_ERROR(ValidateModelName(model));
  if (size < 1 || size > kMaxChunkSize) {
    return InvalidArgument("model " + model + "'s chunk size " + std::to_string(size) +
                           " is not in [1, " + std::to_string(kMaxChunkSize) + "]");
  }
  return Status::Ok();
}

Result<ChunkSizes::Overrides> ParseModelChunkSizes(const std::vector<std::string>& specs,
                                                   std::int64_t default_size) {
  ChunkSizes::Overrides out;
  for (const std::string& spec : specs) {
    const std::string what = "--model-chunk-size '" + spec + "'";
    const std::size_t eq = spec.rfind('=');
    if (eq == std::string::npos || eq == 0) {
      return InvalidConfig(what + ": give MODEL=TOKENS, e.g. zai-org/GLM-5.3-Flash=640");
    }
    const std::string model = spec.substr(0, eq);
    if (Status valid = ValidateModelName(model); !valid.ok()) {
      return InvalidConfig(what + ": " + valid.message());
    }
    const std::string_view number = std::string_view(spec).substr(eq + 1);
    std::int64_t size = 0;
    const auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), size);
    if (error != std::errc() || end != number.data() + number.size()) {
      return InvalidConfig(what + ": '" + std::string(number) + "' is not a number of tokens");
    }
    LMC_RETURN_IF_ERROR(CheckChunkSize(size, what));
    if (size < default_size) {
      return InvalidConfig(what + ": " + std::to_string(size) + " is below --chunk-size (" +
                           std::to_string(default_size) +
                           "), which is every model's minimum: lower --chunk-size");
    }
    if (size == default_size) {
      return InvalidConfig(what + ": " + std::to_string(size) +
                           " is --chunk-size, every model's size already: drop it");
    }
    if (out.size() >= kMaxModelChunkSizes) {
      return InvalidConfig(what + ": more than " + std::to_string(kMaxModelChunkSizes) +
                           " models with a chunk size of their own (peers refuse more)");
    }
    if (!out.emplace(model, size).second) {
      return InvalidConfig(what + ": model " + model + " is named twice");
    }
  }
  return out;
}

}  // namespace lmcache::store
