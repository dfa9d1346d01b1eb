// SigV4 against AWS's own published examples ("Signature Calculations for
// the Authorization Header: Transferring Payload in a Single Chunk", Amazon
// S3 API reference): the example credentials AKIAIOSFODNN7EXAMPLE /
// wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY, 2013-05-24, us-east-1, and the
// signatures AWS prints for its GET, PUT and list examples. Nothing here
// was computed by our code first.
#include "tier/s3/sigv4.h"

#include <gtest/gtest.h>

#include <chrono>

namespace lmcache::tier {
namespace {

constexpr char kEmptyHash[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
constexpr char kDate[] = "20130524T000000Z";

S3Credentials Example() {
  return {"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};
}

TEST(SigV4Test, GetObjectWithRangeMatchesAwsExample) {
  SigV4Request request{"GET",
                       "/test.txt",
                       {},
                       {{"Host", "examplebucket.s3.amazonaws.com"},
                        {"Range", "bytes=0-9"},
                        {"x-amz-content-sha256", kEmptyHash},
                        {"x-amz-date", kDate}},
                       kEmptyHash};
  EXPECT_EQ(CanonicalRequest(request),
            "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
            "x-amz-content-sha256:" +
                std::string(kEmptyHash) + "\nx-amz-date:" + kDate +
                "\n\nhost;range;x-amz-content-sha256;x-amz-date\n" + kEmptyHash);
  EXPECT_EQ(StringToSign(request, kDate, "us-east-1", "s3"),
            "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
            "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  EXPECT_EQ(AuthorizationHeader(request, Example(), kDate, "us-east-1", "s3"),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(SigV4Test, PutObjectMatchesAwsExample) {
  const std::string body = "Welcome to Amazon S3.";
  const std::string hash = Sha256Hex(body);
  EXPECT_EQ(hash, "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  SigV4Request request{"PUT",
                       "/" + UriEncode("test$file.text", true),
                       {},
                       {{"Date", "Fri, 24 May 2013 00:00:00 GMT"},
                        {"Host", "examplebucket.s3.amazonaws.com"},
                        {"x-amz-date", kDate},
                        {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
                        {"x-amz-content-sha256", hash}},
                       hash};
  EXPECT_EQ(request.canonical_uri, "/test%24file.text");
  EXPECT_EQ(AuthorizationHeader(request, Example(), kDate, "us-east-1", "s3"),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class, "
            "Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
}

TEST(SigV4Test, ListObjectsMatchesAwsExample) {
  SigV4Request request{"GET",
                       "/",
                       {{"prefix", "J"}, {"max-keys", "2"}},
                       {{"Host", "examplebucket.s3.amazonaws.com"},
                        {"x-amz-date", kDate},
                        {"x-amz-content-sha256", kEmptyHash}},
                       kEmptyHash};
  EXPECT_EQ(CanonicalQuery(request.query), "max-keys=2&prefix=J");
  EXPECT_EQ(AuthorizationHeader(request, Example(), kDate, "us-east-1", "s3"),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
            "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

TEST(SigV4Test, UriEncodeKeepsUnreservedAndOptionallySlash) {
  EXPECT_EQ(UriEncode("a-b_c.d~e/f g@h%", true), "a-b_c.d~e/f%20g%40h%25");
  EXPECT_EQ(UriEncode("a/b", false), "a%2Fb");
  EXPECT_EQ(UriEncode("\xc3\xa9", false), "%C3%A9");
  EXPECT_EQ(CanonicalQuery({{"continuation-token", "a+b/c="}, {"list-type", "2"}}),
            "continuation-token=a%2Bb%2Fc%3D&list-type=2");
}

TEST(SigV4Test, HeaderValuesAreTrimmedAndNamesLowered) {
  SigV4Request spaced{"GET", "/", {}, {{"X-Amz-Date", kDate}, {"Host", "  h   x  "}}, kEmptyHash};
  SigV4Request plain{"GET", "/", {}, {{"host", "h x"}, {"x-amz-date", kDate}}, kEmptyHash};
  EXPECT_EQ(CanonicalRequest(spaced), CanonicalRequest(plain));
}

TEST(SigV4Test, AmzDateIsUtc) {
  const auto when = std::chrono::system_clock::time_point(std::chrono::seconds(1369353600));
  EXPECT_EQ(AmzDate(when), "20130524T000000Z");
}

}  // namespace
}  // namespace lmcache::tier
