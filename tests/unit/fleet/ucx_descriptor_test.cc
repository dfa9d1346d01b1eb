// UcxDescriptor: a peer's descriptor is parsed strictly (its exact form, every
// length bounded) and what Encode writes parses back.
#include "fleet/ucx_descriptor.h"

#include <gtest/gtest.h>

namespace lmcache::fleet {
namespace {

TEST(UcxDescriptorTest, ParsesWhatItEncodesAndRefusesEverythingElse) {
  UcxDescriptor d{"worker-address", 1 << 20};
  const std::string bytes = d.Encode();
  auto parsed = UcxDescriptor::Parse(bytes);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->worker_address, d.worker_address);
  EXPECT_EQ(parsed->size, d.size);
  for (std::size_t cut = 0; cut < bytes.size(); ++cut) {
    EXPECT_FALSE(UcxDescriptor::Parse(bytes.substr(0, cut)).ok()) << cut;
  }
  EXPECT_FALSE(UcxDescriptor::Parse(bytes + "x").ok());
  std::string magic = bytes;
  magic[0] = 'X';
  EXPECT_FALSE(UcxDescriptor::Parse(magic).ok());
  std::string version = bytes;
  version[4] = 1;  // the one-sided form, never released
  EXPECT_EQ(UcxDescriptor::Parse(version).status().code(), ErrorCode::kNotSupported);
  version[4] = 3;  // unauthenticated replies (before issue 62)
  EXPECT_EQ(UcxDescriptor::Parse(version).status().code(), ErrorCode::kNotSupported);
  std::string huge = bytes;
  huge[5] = huge[6] = huge[7] = '\xff';  // a worker address of ~16 MiB
  EXPECT_FALSE(UcxDescriptor::Parse(huge).ok());
  EXPECT_FALSE(UcxDescriptor::Parse(UcxDescriptor{"", 1}.Encode()).ok());
  EXPECT_FALSE(UcxDescriptor::Parse(UcxDescriptor{"a", 0}.Encode()).ok());
}

}  // namespace
}  // namespace lmcache::fleet
