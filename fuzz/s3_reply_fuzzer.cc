// libFuzzer target: what an S3 gateway (or anything answering at its
// address) sends the s3 adapter. The first byte picks the reader:
//   0: the XML replies (tier/s3/s3_xml.h): a ListObjectsV2 page, an <Error>,
//      and every listed name through the object-name parser;
//   1: a GET's body through S3ObjectReceiver, in pieces of the size the
//      second byte says (1-256), into a buffer of the object's size.
// Beyond "no crash, no sanitizer report": a truncated page always carries a
// token; a name that parses is the one name of its key; and a body the
// receiver calls loaded is exactly what verifying and decoding the whole
// body at once gives, for the key it names.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string_view>
#include <vector>

#include "store/object_key.h"
#include "tier/object_format.h"
#include "tier/s3/s3_object_name.h"
#include "tier/s3/s3_object_receiver.h"
#include "tier/s3/s3_xml.h"

namespace {

using namespace lmcache;

void Check(bool condition) {
  if (!condition) std::abort();
}

constexpr std::size_t kMaxObject = 1 << 20;

void FuzzXml(std::string_view text) {
  auto page = tier::ParseListObjectsV2(text);
  if (page.ok()) {
    Check(!page->truncated || !page->next_continuation_token.empty());
    for (const auto& object : page->objects) {
      for (const std::string_view prefix : {"", "p/"}) {
        const auto key = tier::ParseS3ObjectName(prefix, object.name);
        if (key) Check(tier::S3ObjectName(prefix, *key) == object.name);
      }
    }
  }
  (void)tier::ParseS3Error(text);
  (void)tier::XmlUnescape(text);
}

void FuzzBody(std::size_t piece_size, std::span<const std::byte> body) {
  // The buffer a load would give: the object's size as its header says,
  // for the key it names (so real objects load); another key otherwise.
  store::ObjectKey key;
  key.model_name = "m";
  std::size_t out_size = 4096;
  if (auto header = tier::ParseObjectHeader(body); header.ok()) {
    if (header->object_bytes() > kMaxObject) return;
    key = header->key;
    out_size = header->object_bytes();
  }
  std::vector<std::byte> out(out_size);
  tier::L2Read read{&key, out};
  tier::S3ObjectReceiver receiver(read);
  tier::S3Response response;
  response.http_status = 200;
  for (std::size_t at = 0; at < body.size(); at += piece_size) {
    const auto piece = body.subspan(at, std::min(piece_size, body.size() - at));
    if (!receiver.Accept(at, static_cast<std::int64_t>(body.size()), piece)) {
      response.error = Status(ErrorCode::kCorrupt, "refused");
      break;
    }
  }
  if (receiver.Finish(response) != tier::L2LoadOutcome::kLoaded) return;
  auto header = tier::ParseObjectHeader(body);
  Check(header.ok() && header->key == key && header->object_bytes() == out.size());
  std::vector<std::byte> whole(out.size());
  const auto payload = body.subspan(header->header_bytes);
  Check(payload.size() == header->payload_bytes && payload.size() <= whole.size());
  std::copy(payload.begin(), payload.end(), whole.begin());
  Check(tier::VerifyAndDecode(*header, key, whole).ok());
  Check(whole == out);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2 || size > kMaxObject + 8192) return 0;
  const auto* bytes = reinterpret_cast<const std::byte*>(data);
  if (data[0] % 2 == 0) {
    FuzzXml(std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  } else {
    FuzzBody(1 + data[1], std::span(bytes + 2, size - 2));
  }
  return 0;
}
