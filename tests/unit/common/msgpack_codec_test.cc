#include "common/msgpack_codec.h"
#include "common/msgpack_tree.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace lmcache::msgpk {
namespace {

using msgpack::type::object_type;

// `depth` arrays nested inside each other, the innermost empty.
std::string NestedArrays(int depth) {
  Encoder e;
  for (int i = 0; i < depth - 1; ++i) e.Array(1);
  e.Array(0);
  return e.Take();
}

bool Mentions(const Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

// --- Parse limits -------------------------------------------------------------------------

TEST(MsgpackParse, AcceptsOneCompleteValue) {
  auto handle = Parse(Encoder().Int(42).bytes(), "frame");
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  EXPECT_EQ(handle->get().type, object_type::POSITIVE_INTEGER);
  EXPECT_EQ(handle->get().via.u64, 42u);
}

TEST(MsgpackParse, FrameOverMaxFrameBytesIsTooLarge) {
  DecodeLimits limits;
  limits.max_frame_bytes = 4;
  const std::string frame = Encoder().Str("hello").Take();  // 6 bytes
  auto r = Parse(frame, "payload", limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kTooLarge);
  EXPECT_TRUE(Mentions(r.status(), "payload")) << r.status().message();
  limits.max_frame_bytes = frame.size();
  EXPECT_TRUE(Parse(frame, "payload", limits).ok());
}

TEST(MsgpackParse, NestingUpToMaxDepthIsAcceptedBeyondIsTooLarge) {
  DecodeLimits limits;
  limits.max_depth = 3;
  EXPECT_TRUE(Parse(NestedArrays(3), "frame", limits).ok());
  auto r = Parse(NestedArrays(4), "frame", limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kTooLarge);
}

TEST(MsgpackParse, DeepNestingWithDefaultLimitsIsTooLargeNotACrash) {
  auto r = Parse(NestedArrays(10'000), "frame");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kTooLarge);
}

TEST(MsgpackParse, ArrayOverMaxArrayItemsIsTooLarge) {
  DecodeLimits limits;
  limits.max_array_items = 4;
  Encoder ok;
  ok.Array(4);
  for (int i = 0; i < 4; ++i) ok.Int(i);
  EXPECT_TRUE(Parse(ok.bytes(), "tokens", limits).ok());
  Encoder big;
  big.Array(5);
  for (int i = 0; i < 5; ++i) big.Int(i);
  auto r = Parse(big.bytes(), "tokens", limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kTooLarge);
}

TEST(MsgpackParse, HugeAnnouncedArrayIsRejectedBeforeAllocating) {
  // array32 header announcing 2^32-1 items and no items: refused on the header.
  const std::string frame("\xdd\xff\xff\xff\xff", 5);
  auto r = Parse(frame, "tokens");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kTooLarge);
}

TEST(MsgpackParse, StringOverMaxStringBytesIsTooLarge) {
  DecodeLimits limits;
  limits.max_string_bytes = 3;
  EXPECT_TRUE(Parse(Encoder().Str("abc").bytes(), "name", limits).ok());
  auto r = Parse(Encoder().Str("abcd").bytes(), "name", limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kTooLarge);
}

TEST(MsgpackParse, MapOverMaxMapItemsIsTooLarge) {
  DecodeLimits limits;
  limits.max_map_items = 1;
  auto r = Parse(Encoder().Map(2).Str("a").Int(1).Str("b").Int(2).bytes(), "map", limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kTooLarge);
}

TEST(MsgpackParse, TrailingBytesAreMalformed) {
  const std::string frame = Encoder().Int(1).Int(2).Take();
  auto r = Parse(frame, "frame");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kMalformedRequest);
  EXPECT_TRUE(Mentions(r.status(), "trailing")) << r.status().message();
}

TEST(MsgpackParse, EmptyFrameIsMalformed) {
  auto r = Parse("", "operation");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kMalformedRequest);
  EXPECT_TRUE(Mentions(r.status(), "operation")) << r.status().message();
}

TEST(MsgpackParse, EveryTruncationOfAValueIsMalformed) {
  const std::string full = Encoder()
                               .Map(2)
                               .Str("tokens")
                               .Array(3)
                               .Int(1)
                               .Int(300)
                               .Int(70000)
                               .Str("salt")
                               .Str("x")
                               .Take();
  ASSERT_TRUE(Parse(full, "frame").ok());
  for (std::size_t n = 1; n < full.size(); ++n) {
    auto r = Parse(std::string_view(full).substr(0, n), "frame");
    ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes accepted";
    EXPECT_EQ(r.status().code(), ErrorCode::kMalformedRequest) << n;
  }
}

TEST(MsgpackParse, ReservedByteIsMalformed) {
  auto r = Parse(std::string("\xc1", 1), "frame");  // 0xc1 is never used by msgpack
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kMalformedRequest);
}

// --- Conversions --------------------------------------------------------------------------

// Parses `bytes` and converts the value with `convert`.
template <typename Fn>
auto Convert(const std::string& bytes, Fn convert, std::string_view what = "req.field")
    -> decltype(convert(msgpack::object(), what)) {
  auto handle = Parse(bytes, "frame");
  if (!handle.ok()) return handle.status();
  return convert(handle->get(), what);
}

TEST(MsgpackAsInt, AcceptsPositiveNegativeAndBool) {
  EXPECT_EQ(*Convert(Encoder().Int(7).Take(), AsInt), 7);
  EXPECT_EQ(*Convert(Encoder().Int(-7).Take(), AsInt), -7);
  EXPECT_EQ(*Convert(Encoder().Bool(true).Take(), AsInt), 1);
  EXPECT_EQ(*Convert(Encoder().Bool(false).Take(), AsInt), 0);
  const std::int64_t min = std::numeric_limits<std::int64_t>::min();
  EXPECT_EQ(*Convert(Encoder().Int(min).Take(), AsInt), min);
}

TEST(MsgpackAsInt, RejectsStrNamingTheField) {
  auto r = Convert(Encoder().Str("7").Take(), AsInt, "key.world_size");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kMalformedRequest);
  EXPECT_TRUE(Mentions(r.status(), "key.world_size")) << r.status().message();
  EXPECT_TRUE(Mentions(r.status(), "str")) << r.status().message();
}

TEST(MsgpackAsInt, RejectsUintAboveInt64Max) {
  auto r = Convert(Encoder().Uint(std::numeric_limits<std::uint64_t>::max()).Take(), AsInt);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kMalformedRequest);
}

TEST(MsgpackAsUint, AcceptsTheFullUnsignedRange) {
  const std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  EXPECT_EQ(*Convert(Encoder().Uint(max).Take(), AsUint), max);
  EXPECT_EQ(*Convert(Encoder().Int(0).Take(), AsUint), 0u);
}

TEST(MsgpackAsUint, RejectsNegatives) {
  auto r = Convert(Encoder().Int(-1).Take(), AsUint, "payload.count");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kMalformedRequest);
  EXPECT_TRUE(Mentions(r.status(), "payload.count")) << r.status().message();
}

TEST(MsgpackAsFloat, AcceptsFloatAndInt) {
  EXPECT_EQ(*Convert(Encoder().Float(0.25).Take(), AsFloat), 0.25);
  EXPECT_EQ(*Convert(Encoder().Int(3).Take(), AsFloat), 3.0);
  EXPECT_EQ(*Convert(Encoder().Int(-2).Take(), AsFloat), -2.0);
}

TEST(MsgpackAsFloat, RejectsNanInfinityAndStr) {
  for (const double bad : {std::nan(""), std::numeric_limits<double>::infinity()}) {
    auto r = Convert(Encoder().Float(bad).Take(), AsFloat, "payload.ratio");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), ErrorCode::kMalformedRequest);
    EXPECT_TRUE(Mentions(r.status(), "payload.ratio")) << r.status().message();
  }
  EXPECT_FALSE(Convert(Encoder().Str("1.0").Take(), AsFloat).ok());
}

TEST(MsgpackAsBool, AcceptsBoolZeroAndOneOnly) {
  EXPECT_TRUE(*Convert(Encoder().Bool(true).Take(), AsBool));
  EXPECT_FALSE(*Convert(Encoder().Int(0).Take(), AsBool));
  EXPECT_TRUE(*Convert(Encoder().Int(1).Take(), AsBool));
  EXPECT_FALSE(Convert(Encoder().Int(2).Take(), AsBool).ok());
  EXPECT_FALSE(Convert(Encoder().Str("true").Take(), AsBool).ok());
}

TEST(MsgpackAsString, AcceptsStrOnly) {
  EXPECT_EQ(*Convert(Encoder().Str("llama").Take(), AsString), "llama");
  auto r = Convert(Encoder().Bin("llama").Take(), AsString, "key.model_name");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Mentions(r.status(), "key.model_name")) << r.status().message();
}

TEST(MsgpackAsBytes, AcceptsBinAndStr) {
  EXPECT_EQ(*Convert(Encoder().Bin(std::string("\0\xff", 2)).Take(), AsBytes),
            std::string("\0\xff", 2));
  EXPECT_EQ(*Convert(Encoder().Str("abc").Take(), AsBytes), "abc");
  EXPECT_FALSE(Convert(Encoder().Int(1).Take(), AsBytes).ok());
}

// --- MapReader ----------------------------------------------------------------------------

struct Fields {
  std::int64_t size = 0;
  std::string name = "default";
  std::int64_t readers = 5;
};

// Reads {"size": required int, "name": optional str, "readers": optional int}.
Result<Fields> ReadFields(const std::string& bytes) {
  LMC_ASSIGN_OR_RETURN(msgpack::object_handle handle, Parse(bytes, "payload"));
  LMC_ASSIGN_OR_RETURN(const MapReader map, MapReader::Make(handle.get(), "payload"));
  Fields f;
  LMC_RETURN_IF_ERROR(map.Required("size", &f.size, AsInt));
  LMC_RETURN_IF_ERROR(map.Optional("name", &f.name, AsString));
  LMC_RETURN_IF_ERROR(map.Optional("readers", &f.readers, AsInt));
  return f;
}

TEST(MsgpackMapReader, ReadsRequiredAndOptionalFields) {
  auto f = ReadFields(
      Encoder().Map(3).Str("size").Int(4).Str("name").Str("x").Str("readers").Int(2).Take());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->size, 4);
  EXPECT_EQ(f->name, "x");
  EXPECT_EQ(f->readers, 2);
}

TEST(MsgpackMapReader, UnknownKeysAreIgnored) {
  auto f = ReadFields(Encoder()
                          .Map(3)
                          .Str("future")
                          .Map(1)
                          .Str("a")
                          .Array(0)
                          .Int(17)  // a non-string key
                          .Str("ignored")
                          .Str("size")
                          .Int(9)
                          .Take());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->size, 9);
}

TEST(MsgpackMapReader, MissingOptionalKeepsTheDefault) {
  auto f = ReadFields(Encoder().Map(1).Str("size").Int(1).Take());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->name, "default");
  EXPECT_EQ(f->readers, 5);
}

TEST(MsgpackMapReader, NilOptionalKeepsTheDefault) {
  auto f =
      ReadFields(Encoder().Map(3).Str("size").Int(1).Str("name").Nil().Str("readers").Nil().Take());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->name, "default");
  EXPECT_EQ(f->readers, 5);
}

TEST(MsgpackMapReader, MissingRequiredNamesTheField) {
  auto f = ReadFields(Encoder().Map(1).Str("name").Str("x").Take());
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), ErrorCode::kMalformedRequest);
  EXPECT_TRUE(Mentions(f.status(), "'size'")) << f.status().message();
}

TEST(MsgpackMapReader, NilRequiredIsAWrongType) {
  auto f = ReadFields(Encoder().Map(1).Str("size").Nil().Take());
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), ErrorCode::kMalformedRequest);
  EXPECT_TRUE(Mentions(f.status(), "payload.size")) << f.status().message();
}

TEST(MsgpackMapReader, WrongOptionalTypeNamesTheQualifiedField) {
  auto f = ReadFields(Encoder().Map(2).Str("size").Int(1).Str("name").Int(3).Take());
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), ErrorCode::kMalformedRequest);
  EXPECT_TRUE(Mentions(f.status(), "payload.name")) << f.status().message();
}

TEST(MsgpackMapReader, NonMapIsAWrongType) {
  auto handle = Parse(Encoder().Array(0).Take(), "payload");
  ASSERT_TRUE(handle.ok());
  auto map = MapReader::Make(handle->get(), "payload");
  ASSERT_FALSE(map.ok());
  EXPECT_EQ(map.status().code(), ErrorCode::kMalformedRequest);
  EXPECT_TRUE(Mentions(map.status(), "array")) << map.status().message();
}

// --- Encoder round trips ------------------------------------------------------------------

TEST(MsgpackEncoder, NilAndBoolRoundTrip) {
  auto nil = Parse(Encoder().Nil().Take(), "v");
  ASSERT_TRUE(nil.ok());
  EXPECT_EQ(nil->get().type, object_type::NIL);
  EXPECT_TRUE(*Convert(Encoder().Bool(true).Take(), AsBool));
  EXPECT_FALSE(*Convert(Encoder().Bool(false).Take(), AsBool));
}

TEST(MsgpackEncoder, IntegersRoundTripAtTheirLimits) {
  for (const std::int64_t v :
       {std::int64_t{0}, std::int64_t{-1}, std::int64_t{-33}, std::int64_t{127},
        std::int64_t{65536}, std::numeric_limits<std::int64_t>::min(),
        std::numeric_limits<std::int64_t>::max()}) {
    EXPECT_EQ(*Convert(Encoder().Int(v).Take(), AsInt), v);
  }
  for (const std::uint64_t v : {std::uint64_t{0}, std::uint64_t{255}, std::uint64_t{1} << 32,
                                std::numeric_limits<std::uint64_t>::max()}) {
    EXPECT_EQ(*Convert(Encoder().Uint(v).Take(), AsUint), v);
  }
}

TEST(MsgpackEncoder, FloatRoundTripsExactly) {
  for (const double v : {0.0, -1.5, 1e-300, 3.141592653589793, 1e300}) {
    EXPECT_EQ(*Convert(Encoder().Float(v).Take(), AsFloat), v);
  }
}

TEST(MsgpackEncoder, FloatIsEncodedAsAFloatEvenWhenIntegral) {
  // A float field must stay a float on the wire (Python decodes 1.0, not 1).
  for (const double v : {0.0, 1.0, 10.0, -3.0, 0.5}) {
    auto handle = Parse(Encoder().Float(v).Take(), "v");
    ASSERT_TRUE(handle.ok());
    EXPECT_EQ(handle->get().type, object_type::FLOAT64) << v;
  }
}

TEST(MsgpackEncoder, StrAndBinRoundTripWithTheirTypes) {
  const std::string text(300, 'q');  // needs a str16 header
  auto str = Parse(Encoder().Str(text).Take(), "v");
  ASSERT_TRUE(str.ok());
  EXPECT_EQ(str->get().type, object_type::STR);
  EXPECT_EQ(*AsString(str->get(), "v"), text);

  const std::string bytes("\0\x01\xfe\xff", 4);
  auto bin = Parse(Encoder().Bin(bytes).Take(), "v");
  ASSERT_TRUE(bin.ok());
  EXPECT_EQ(bin->get().type, object_type::BIN);
  EXPECT_EQ(*AsBytes(bin->get(), "v"), bytes);

  auto empty = Parse(Encoder().Str("").Take(), "v");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*AsString(empty->get(), "v"), "");
}

TEST(MsgpackEncoder, UintArrayIsTheSameBytesAsOneUintPerValue) {
  const std::vector<std::uint32_t> values = {0,      1,      0x7f,       0x80,      0xff,
                                             0x100,  0xffff, 0x10000,    128255,    0xffffffff,
                                             0x7fff, 42,     0xfffffffe, 0x1000000, 300};
  Encoder one_by_one;
  one_by_one.Array(static_cast<std::uint32_t>(values.size()));
  for (const std::uint32_t v : values) one_by_one.Uint(v);
  EXPECT_EQ(Encoder().UintArray(values).Take(), one_by_one.Take());
  EXPECT_EQ(Encoder().UintArray({}).Take(), Encoder().Array(0).Take());
  // Appends after what is already there.
  EXPECT_EQ(Encoder().Str("k").UintArray(values).Take(),
            Encoder().Str("k").Raw(Encoder().UintArray(values).Take()).Take());
}

// Ids are written 8 at a time where the 8 share one form (issue 18): groups of
// every form, groups that straddle a form boundary by one id at every
// position, and tails shorter than a group, all come out as msgpack-c's own
// packer writes the same vector (shortest forms, the reference's bytes).
TEST(MsgpackEncoder, UintArrayGroupsMatchMsgpackCsPacker) {
  const std::vector<std::uint32_t> bases = {3, 0x90, 0x1234, 0x12345, 0x7fffff00};
  for (const std::uint32_t base : bases) {
    for (const std::uint32_t odd : bases) {
      for (std::size_t at = 0; at < 27; at += 2) {
        std::vector<std::uint32_t> values(19 + at % 9);
        for (std::size_t i = 0; i < values.size(); ++i) values[i] = base + static_cast<std::uint32_t>(i);
        if (at < values.size()) values[at] = odd;
        msgpack::sbuffer packed;
        msgpack::pack(packed, values);
        EXPECT_EQ(Encoder().UintArray(values).Take(), std::string(packed.data(), packed.size()))
            << "base " << base << " odd " << odd << " at " << at;
      }
    }
  }
}

TEST(MsgpackEncoder, NestedArrayAndMapRoundTrip) {
  Encoder e;
  e.Map(2).Str("ids").Array(3).Int(1).Int(-2).Uint(3).Str("meta").Map(1).Str("ok").Bool(true);
  auto handle = Parse(e.bytes(), "v");
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  auto map = MapReader::Make(handle->get(), "v");
  ASSERT_TRUE(map.ok());
  const msgpack::object* ids = map->Field("ids");
  ASSERT_NE(ids, nullptr);
  ASSERT_EQ(ids->type, object_type::ARRAY);
  ASSERT_EQ(ids->via.array.size, 3u);
  EXPECT_EQ(*AsInt(ids->via.array.ptr[0], "v"), 1);
  EXPECT_EQ(*AsInt(ids->via.array.ptr[1], "v"), -2);
  EXPECT_EQ(*AsInt(ids->via.array.ptr[2], "v"), 3);
  const msgpack::object* meta = map->Field("meta");
  ASSERT_NE(meta, nullptr);
  auto inner = MapReader::Make(*meta, "v.meta");
  ASSERT_TRUE(inner.ok());
  ASSERT_NE(inner->Field("ok"), nullptr);
  EXPECT_TRUE(*AsBool(*inner->Field("ok"), "v.meta.ok"));
  EXPECT_EQ(map->Field("absent"), nullptr);
}

}  // namespace
}  // namespace lmcache::msgpk
