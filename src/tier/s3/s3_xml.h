// S3Xml: what the adapter reads of an S3 server's XML replies, the two it
// needs: a ListObjectsV2 page and an <Error> body. The bytes are untrusted
// (a gateway, or whatever answers at its address): the reader is a linear
// scan for the few elements it wants, bounded by the reply's size, with no
// recursion, no entity expansion beyond XML's five and numeric references,
// and every number range-checked; a reply of another shape is an error that
// says what was missing, never a crash or a guess.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lmcache/status.h"

namespace lmcache::tier {

struct ListedS3Object {
  std::string name;
  std::uint64_t size_bytes = 0;
  std::int64_t last_modified_ms = 0;  // Unix ms (0 when the reply had none)
};

struct S3ListPage {
  std::vector<ListedS3Object> objects;
  bool truncated = false;
  std::string next_continuation_token;  // set when truncated
};

// A ListObjectsV2 reply (<ListBucketResult>). kMalformedRequest when it is
// not one, or a truncated page carries no continuation token.
Result<S3ListPage> ParseListObjectsV2(std::string_view xml);

struct S3Error {
  std::string code;     // "SlowDown", "NoSuchKey", "SignatureDoesNotMatch"...
  std::string message;  // the server's words (may be empty)
};
// The <Error> of a failed request's body; empty fields when it has none.
S3Error ParseS3Error(std::string_view xml);

// XML text with its entities resolved (&amp; &lt; &gt; &quot; &apos; &#N;
// &#xH;); kMalformedRequest for any other or an unterminated one.
Result<std::string> XmlUnescape(std::string_view text);

// ISO 8601 as S3 writes it ("2026-12-07T06:00:00.000Z") in Unix ms.
Result<std::int64_t> ParseS3Time(std::string_view text);

}  // namespace lmcache::tier
