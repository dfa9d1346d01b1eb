// The replies parsed here are what Ceph RGW 16 and AWS S3 send (the shapes
// of the ListObjectsV2 and Error examples in the S3 API reference).
#include "tier/s3/s3_xml.h"

#include <gtest/gtest.h>

namespace lmcache::tier {
namespace {

constexpr char kPage[] = R"(<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>lmc-test</Name><Prefix></Prefix><MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated><Contents><Key>m@00000000@0@ab&amp;c</Key><LastModified>2026-12-07T06:30:01.123Z</LastModified><ETag>&quot;9b2cf535f27731c974343645a3985328&quot;</ETag><Size>4194432</Size><StorageClass>STANDARD</StorageClass></Contents><Contents><Key>second</Key><LastModified>2009-10-12T17:50:30.000Z</LastModified><Size>0</Size></Contents><KeyCount>2</KeyCount><NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken></ListBucketResult>)";

TEST(S3XmlTest, ListObjectsV2Page) {
  auto page = ParseListObjectsV2(kPage);
  ASSERT_TRUE(page.ok()) << page.status().message();
  ASSERT_EQ(page->objects.size(), 2u);
  EXPECT_EQ(page->objects[0].name, "m@00000000@0@ab&c");
  EXPECT_EQ(page->objects[0].size_bytes, 4194432u);
  EXPECT_EQ(page->objects[0].last_modified_ms, 1796625001123);
  EXPECT_EQ(page->objects[1].last_modified_ms, 1255369830000);
  EXPECT_TRUE(page->truncated);
  EXPECT_EQ(page->next_continuation_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
}

// Captured from Ceph RGW 16.2.15 (Debian 12, tools/ceph_s3.sh) with curl
// --aws-sigv4: `GET /lmc-cap?list-type=2&max-keys=2` over three objects, and
// a GET signed with a wrong secret.
constexpr char kRgwPage[] =
    R"(<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>lmc-cap</Name><Prefix></Prefix><MaxKeys>2</MaxKeys><IsTruncated>true</IsTruncated><Contents><Key>README</Key><LastModified>2026-12-07T06:41:22.978Z</LastModified><ETag>&quot;b1946ac92492d2347c6235b4d2611184&quot;</ETag><Size>6</Size><StorageClass>STANDARD</StorageClass><Type>Normal</Type></Contents><Contents><Key>m@00000000@0@00010203040506070000000000000000000000000000000000000000000000005a</Key><LastModified>2026-12-07T06:41:21.284Z</LastModified><ETag>&quot;b1946ac92492d2347c6235b4d2611184&quot;</ETag><Size>6</Size><StorageClass>STANDARD</StorageClass><Type>Normal</Type></Contents><NextContinuationToken>m@00000000@0@00010203040506070000000000000000000000000000000000000000000000005a</NextContinuationToken><KeyCount>2</KeyCount></ListBucketResult>)";
constexpr char kRgwError[] =
    R"(<?xml version="1.0" encoding="UTF-8"?><Error><Code>SignatureDoesNotMatch</Code><Message></Message><RequestId>tx000009a2d2a642dc2183d-006b165513-1008-default</RequestId><HostId>1008-default-default</HostId></Error>)";

TEST(S3XmlTest, WhatRgwSends) {
  auto page = ParseListObjectsV2(kRgwPage);
  ASSERT_TRUE(page.ok()) << page.status().message();
  ASSERT_EQ(page->objects.size(), 2u);
  EXPECT_EQ(page->objects[0].name, "README");
  EXPECT_EQ(page->objects[0].size_bytes, 6u);
  EXPECT_EQ(page->objects[1].name,
            "m@00000000@0@00010203040506070000000000000000000000000000000000000000000000005a");
  EXPECT_LT(page->objects[1].last_modified_ms, page->objects[0].last_modified_ms);
  EXPECT_TRUE(page->truncated);
  EXPECT_EQ(page->next_continuation_token, page->objects[1].name);
  const S3Error error = ParseS3Error(kRgwError);
  EXPECT_EQ(error.code, "SignatureDoesNotMatch");
  EXPECT_TRUE(error.message.empty());
}

TEST(S3XmlTest, LastPageAndEmptyBucket) {
  auto last = ParseListObjectsV2(
      "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>k</Key><Size>5</Size>"
      "</Contents></ListBucketResult>");
  ASSERT_TRUE(last.ok());
  EXPECT_FALSE(last->truncated);
  EXPECT_EQ(last->objects.size(), 1u);
  auto empty = ParseListObjectsV2("<ListBucketResult><KeyCount>0</KeyCount></ListBucketResult>");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->objects.empty());
}

TEST(S3XmlTest, MalformedRepliesAreRefused) {
  for (const char* xml :
       {"", "<Error><Code>x</Code></Error>", "<ListBucketResult><Contents><Key>k</Key>",
        "<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>k</Key><Size>-1</Size></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>k</Key><Size>99999999999999999999</Size></Contents>"
        "</ListBucketResult>",
        "<ListBucketResult><Contents><Key>a&bogus;</Key></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>k</Key><LastModified>yesterday</LastModified>"
        "</Contents></ListBucketResult>",
        "<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>"}) {
    EXPECT_FALSE(ParseListObjectsV2(xml).ok()) << xml;
  }
}

TEST(S3XmlTest, Entities) {
  EXPECT_EQ(XmlUnescape("a&lt;b&gt;&amp;&quot;&apos;&#65;&#x263A;").value(),
            "a<b>&\"'A\xE2\x98\xBA");
  for (const char* bad :
       {"&", "&#;", "&#0;", "&#xD800;", "&#x110000;", "&amp", "&verylongentity;"}) {
    EXPECT_FALSE(XmlUnescape(bad).ok()) << bad;
  }
}

TEST(S3XmlTest, ErrorBody) {
  const S3Error e = ParseS3Error(
      R"(<?xml version="1.0" encoding="UTF-8"?><Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we calculated does not match</Message><RequestId>tx0</RequestId></Error>)");
  EXPECT_EQ(e.code, "SignatureDoesNotMatch");
  EXPECT_EQ(e.message, "The request signature we calculated does not match");
  EXPECT_TRUE(ParseS3Error("").code.empty());
  EXPECT_TRUE(ParseS3Error("<Error><Code>SlowDown</Code></Error>").message.empty());
}

TEST(S3XmlTest, Times) {
  EXPECT_EQ(ParseS3Time("1970-01-01T00:00:00Z").value(), 0);
  EXPECT_EQ(ParseS3Time("1970-01-01T00:00:01.5Z").value(), 1500);
  EXPECT_FALSE(ParseS3Time("1970-13-01T00:00:00Z").ok());
  EXPECT_FALSE(ParseS3Time("1970-01-01 00:00:00Z").ok());
}

}  // namespace
}  // namespace lmcache::tier
