#include "tier/resp/resp_request.h"

#include <array>
#include <charconv>

namespace lmcache::tier {

void RespRequest::Own(std::string_view bytes) {
  if (bytes.empty()) return;
  if (!pieces_.empty() && pieces_.back().referenced == nullptr &&
      pieces_.back().offset + pieces_.back().length == owned_.size()) {
    pieces_.back().length += bytes.size();  // contiguous with the last owned piece
  } else {
    pieces_.push_back({nullptr, owned_.size(), bytes.size()});
  }
  owned_.append(bytes);
  bytes_ += bytes.size();
}

void RespRequest::Reference(std::string_view bytes) {
  if (bytes.empty()) return;
  pieces_.push_back({bytes.data(), 0, bytes.size()});
  bytes_ += bytes.size();
}

void RespRequest::Argument(std::string_view bytes) {
  if (bytes.size() >= kReferenceBytes) {
    Reference(bytes);
  } else {
    Own(bytes);
  }
}

// "*3\r\n", "$8\r\n": a type byte, a decimal count, CRLF. Written with
// to_chars (a literal + to_string trips GCC 12's -Wrestrict false positive).
void RespRequest::Header(char type, std::size_t count) {
  std::array<char, 24> text{};
  text[0] = type;
  char* end = std::to_chars(text.data() + 1, text.data() + text.size() - 2, count).ptr;
  *end++ = '\r';
  *end++ = '\n';
  Own(std::string_view(text.data(), static_cast<std::size_t>(end - text.data())));
}

void RespRequest::Add(const RespCommand& command) {
  Header('*', static_cast<std::size_t>(command.argc));
  for (int i = 0; i < command.argc; ++i) {
    const bool continued = i == command.continued;
    const std::size_t length =
        command.args[i].size() + (continued ? command.continuation.size() : 0);
    Header('$', length);
    Argument(command.args[i]);
    if (continued) Argument(command.continuation);
    Own("\r\n");
  }
}

const std::vector<iovec>& RespRequest::Pieces() {
  iovecs_.clear();
  iovecs_.reserve(pieces_.size());
  for (const Piece& p : pieces_) {
    const char* base = p.referenced != nullptr ? p.referenced : owned_.data() + p.offset;
    iovecs_.push_back({const_cast<char*>(base), p.length});
  }
  return iovecs_;
}

}  // namespace lmcache::tier
