// DecodeDeviceIpcWrapper against real pickle bytes: tests/python/make_ipc_pickles.py
// (run by the ctest fixture make_ipc_pickles) has Debian's python3 pickle
// wrappers with the upstream class paths and attribute layout in protocols 2
// to 5, and lists what each must decode to or which error it must give.
#include "protocol/device_ipc_wrapper.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace lmcache::protocol {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Hex(const std::array<std::uint8_t, kCudaIpcHandleBytes>& bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (std::uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

nlohmann::json Cases() {
  const std::string text = ReadFile(std::string(LMC_IPC_PICKLE_DIR) + "/cases.json");
  return text.empty() ? nlohmann::json::array() : nlohmann::json::parse(text);
}

TEST(DeviceIpcWrapperTest, EveryRealPickleDecodesToItsFieldsOrItsError) {
  const nlohmann::json cases = Cases();
  ASSERT_GE(cases.size(), 40u) << "the make_ipc_pickles fixture did not run";
  int decoded = 0;
  int refused = 0;
  for (const auto& c : cases) {
    const std::string file = c["file"];
    SCOPED_TRACE(file);
    const std::string bytes = ReadFile(std::string(LMC_IPC_PICKLE_DIR) + "/" + file);
    ASSERT_FALSE(bytes.empty());
    const auto w = DecodeDeviceIpcWrapper(bytes);
    if (c.contains("error")) {
      ASSERT_FALSE(w.ok());
      EXPECT_NE(w.status().message().find(c["error"].get<std::string>()), std::string::npos)
          << w.status().ToString();
      ++refused;
      continue;
    }
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    const auto& e = c["expect"];
    EXPECT_EQ(w->kind, e["kind"] == "raw" ? IpcWrapperKind::kRawCuda : IpcWrapperKind::kTorchStorage);
    EXPECT_EQ(w->dtype, e["dtype"]);
    EXPECT_EQ(w->element_size, e["element_size"]);
    EXPECT_EQ(w->shape, e["shape"].get<std::vector<std::int64_t>>());
    EXPECT_EQ(w->stride, e["stride"].get<std::vector<std::int64_t>>());
    EXPECT_EQ(w->storage_offset, e["storage_offset"]);
    EXPECT_EQ(w->device_uuid, e["device_uuid"]);
    EXPECT_EQ(Hex(w->mem_handle), e["mem_handle"]);
    EXPECT_EQ(w->storage_byte_offset, e["storage_byte_offset"]);
    EXPECT_EQ(w->storage_bytes, e["storage_bytes"]);
    ++decoded;
  }
  EXPECT_EQ(decoded, 6 * 4);
  EXPECT_GE(refused, 12 * 4);
}

TEST(DeviceIpcWrapperTest, TheFirstByteAndSpanFollowTheViewAndTheStorageOffset) {
  DeviceIpcWrapper w;
  w.element_size = 2;
  w.shape = {2, 3};
  w.stride = {1, 2};  // transposed: the last element is at 1 + 2*2 = 5
  w.storage_offset = 10;
  w.storage_byte_offset = 1000;
  EXPECT_EQ(w.first_byte(), 1020u);
  EXPECT_EQ(w.span_bytes(), 12u);
}

TEST(DeviceIpcWrapperTest, KnownDtypesHaveTheirSizesAndOthersNone) {
  EXPECT_EQ(TorchDtypeSize("bfloat16"), 2u);
  EXPECT_EQ(TorchDtypeSize("float8_e4m3fn"), 1u);
  EXPECT_EQ(TorchDtypeSize("float64"), 8u);
  EXPECT_FALSE(TorchDtypeSize("complex64"));
  EXPECT_FALSE(TorchDtypeSize(""));
}

}  // namespace
}  // namespace lmcache::protocol
