// DecodeDeviceIpcWrapper against the bytes clients send: tests/python/make_ipc_pickles.py
// (run by the ctest fixture make_ipc_pickles) has Debian's python3 pickle the
// wrappers with every upstream class path and attribute layout, PyTorch's
// 66-byte versioned handles, in protocols 2 to 5 (and msgpack the map form
// of a non-mainline client), and lists what each must decode to or which
// error it must give.
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
    EXPECT_EQ(w->handle_form, e["handle_form"] == "raw" ? ShareableHandleForm::kRaw
                                                        : ShareableHandleForm::kTorchCudaMalloc);
    EXPECT_EQ(w->handle_version, e["handle_version"]);
    if (e.contains("ref_counter")) {
      ASSERT_TRUE(w->ref_counter.has_value());
      EXPECT_EQ(w->ref_counter->shm_name, e["ref_counter"]);
      EXPECT_EQ(w->ref_counter->index, e["ref_counter_index"]);
      EXPECT_EQ(w->event_sync_required, e["event_sync_required"]);
      EXPECT_EQ(w->event_handle[63], 63);  // bytes(range(64))
    } else {
      EXPECT_FALSE(w->ref_counter.has_value());
    }
    ++decoded;
  }
  EXPECT_EQ(decoded, 10 * 4 + 3);
  EXPECT_EQ(refused, 18 * 4 + 1);
}

TEST(DeviceIpcWrapperTest, ExpandableSegmentsAndVmmWrappersAreRefusedAsUnservableNamingTheFix) {
  const std::string bytes = ReadFile(std::string(LMC_IPC_PICKLE_DIR) + "/expandable_segments.p4.pickle");
  const auto e = DecodeDeviceIpcWrapper(bytes);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), ErrorCode::kNotSupported) << e.status().ToString();
  const auto v = DecodeDeviceIpcWrapper(ReadFile(std::string(LMC_IPC_PICKLE_DIR) + "/vmm.p4.pickle"));
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), ErrorCode::kNotSupported) << v.status().ToString();
  EXPECT_NE(v.status().message().find("use_vmm_api"), std::string::npos);
}

TEST(DeviceIpcWrapperTest, ShareableHandlesOfEachFormGiveTheSegmentsHandle) {
  DeviceIpcWrapper w;
  std::string legacy(64, '\x11');
  ASSERT_TRUE(ParseShareableHandle(legacy, "h", &w).ok());
  EXPECT_EQ(w.handle_form, ShareableHandleForm::kRaw);
  EXPECT_EQ(w.mem_handle[0], 0x11);
  std::string versioned = std::string("\x03", 1) + "c" + std::string(64, '\x22');
  ASSERT_TRUE(ParseShareableHandle(versioned, "h", &w).ok());
  EXPECT_EQ(w.handle_form, ShareableHandleForm::kTorchCudaMalloc);
  EXPECT_EQ(w.handle_version, 3);
  EXPECT_EQ(w.mem_handle[63], 0x22);
  EXPECT_EQ(ParseShareableHandle(std::string("\x02", 1) + "x" + std::string(64, '\0'), "h", &w).code(),
            ErrorCode::kMalformedRequest);
  EXPECT_EQ(ParseShareableHandle("", "h", &w).code(), ErrorCode::kMalformedRequest);
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
