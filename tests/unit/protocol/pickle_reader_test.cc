// ReadPickle: the opcodes of the accepted subset, the refusals and the limits.
// (Real wrapper pickles from Python are checked in device_ipc_wrapper_test.)
#include "protocol/pickle_reader.h"

#include <gtest/gtest.h>

#include <string>

namespace lmcache::protocol {
namespace {

using Kind = PickleTree::Kind;

bool AcceptAll(std::string_view, std::string_view) { return true; }
bool AcceptNone(std::string_view, std::string_view) { return false; }

// The bytes of a literal, NULs included.
template <std::size_t N>
std::string B(const char (&literal)[N]) {
  return std::string(literal, N - 1);
}
// A protocol 4 pickle of `body`.
std::string P(const std::string& body) { return B("\x80\x04") + body; }

Result<PickleTree> Read(const std::string& bytes, const PickleLimits& limits = {}) {
  return ReadPickle(bytes, AcceptAll, limits);
}

void ExpectError(const std::string& bytes, std::string_view fragment, const PickleLimits& limits = {}) {
  const auto r = Read(bytes, limits);
  ASSERT_FALSE(r.ok()) << "accepted";
  EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().ToString();
}

TEST(PickleReaderTest, ReadsScalarsOfEveryAcceptedForm) {
  // (None, True, False, 7, 300, -2, LONG1 -129, "hé", b"ab") as a marked tuple
  const std::string body = B("(N\x88\x89K\x07M\x2c\x01J\xfe\xff\xff\xff\x8a\x02\x7f\xff\x8c\x03h\xc3\xa9" "C\x02" "ab" "t.");
  const auto r = Read(P(body));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& t = r->at(r->root());
  ASSERT_EQ(t.kind, Kind::kTuple);
  ASSERT_EQ(t.items.size(), 9u);
  EXPECT_EQ(r->at(t.items[0]).kind, Kind::kNone);
  EXPECT_EQ(r->at(t.items[1]).integer, 1);
  EXPECT_EQ(r->at(t.items[2]).integer, 0);
  EXPECT_EQ(r->at(t.items[3]).integer, 7);
  EXPECT_EQ(r->at(t.items[4]).integer, 300);
  EXPECT_EQ(r->at(t.items[5]).integer, -2);
  EXPECT_EQ(r->at(t.items[6]).integer, -129);
  EXPECT_EQ(r->at(t.items[7]).text, "h\xc3\xa9");
  EXPECT_EQ(r->at(t.items[8]).kind, Kind::kBytes);
  EXPECT_EQ(r->at(t.items[8]).text, "ab");
}

TEST(PickleReaderTest, BuildsAnObjectFromItsGlobalAndStateAndRemembersValues) {
  // c m\nC\n ) NEWOBJ } BINPUT 0 ( "k" K 5 u BUILD .
  const auto r = Read(P(B("cm\nC\n)\x81}q\x00(\x8c\x01kK\x05" "u" "b.")));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& obj = r->at(r->root());
  ASSERT_EQ(obj.kind, Kind::kObject);
  EXPECT_EQ(r->at(obj.cls).text, "m.C");
  ASSERT_TRUE(obj.state);
  const auto k = r->DictGet(*obj.state, "k");
  ASSERT_TRUE(k);
  EXPECT_EQ(r->at(*k).integer, 5);
  // A GET pushes the very value that was PUT.
  const auto again = Read(P(B("K\x09q\x02h\x02\x86.")));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  const auto& pair = again->at(again->root());
  EXPECT_EQ(pair.items[0], pair.items[1]);
}

TEST(PickleReaderTest, RefusesGlobalsTheFilterDoesNotAcceptNamingThem) {
  const auto r = ReadPickle(P("cposix\nsystem\n."), AcceptNone);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'posix.system' is not accepted"), std::string::npos);
}

TEST(PickleReaderTest, RefusesOpcodesOutsideTheSubsetNamingThem) {
  ExpectError(P("(cos\nsystem\nS'x'\no."), "opcode");         // OBJ/INST-style code execution
  ExpectError(P("i" "os\nsystem\n."), "opcode 0x69 ('i')");
  ExpectError(P(B("\x92.")), "opcode 0x92");        // NEWOBJ_EX
  ExpectError(P("G."), "opcode 0x47 ('G')");                    // BINFLOAT: not used by wrappers
}

TEST(PickleReaderTest, RefusesMalformedStructure) {
  ExpectError("", "does not start with PROTO");
  ExpectError("K\x01.", "does not start with PROTO");
  ExpectError(B("\x80\x01K\x01."), "protocol 1");
  ExpectError(B("\x80\x06K\x01."), "protocol 6");
  ExpectError(P("K\x01"), "ends without STOP");
  ExpectError(P("K\x01.x"), "after STOP");
  ExpectError(P("K\x01K\x02."), "STOP with 2 values");
  ExpectError(P("(K\x01."), "marks");
  ExpectError(P("."), "STOP with 0 values");
  ExpectError(P("t."), "no MARK");
  ExpectError(P(B("h\x05.")), "never PUT");
  ExpectError(P("b."), "underflow");
  ExpectError(P("\x8c\x05" "ab"), "truncated");
  ExpectError(P(B("X\xff\xff\xff\x7f" "ab")), "truncated");
  ExpectError(P("\x8c\x02\xc3\x28."), "not UTF-8");
  ExpectError(P("K\x01K\x02K\x03s."), "non-dict");
  ExpectError(P(B("\x8a\x09\x01\x02\x03\x04\x05\x06\x07\x08\x09.")), "more than 64 bits");
  ExpectError(P(")K\x01\x81."), "not a global");
  ExpectError(P("cm\nC\nK\x01\x81."), "not a tuple");
  ExpectError(P("cm\nC\n)\x81K\x01" "b."), "not a dict");
}

TEST(PickleReaderTest, ReadsProtocolTwoBytesWithoutCallingAnything) {
  // _codecs.encode("\u00ff\u0001", "latin1") -> b"\xff\x01"
  const auto r = Read(P("c_codecs\nencode\n\x8c\x03\xc3\xbf\x01\x8c\x06latin1\x86R."));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->at(r->root()).kind, Kind::kBytes);
  EXPECT_EQ(r->at(r->root()).text, "\xff\x01");
  ExpectError(P("c_codecs\nencode\n\x8c\x02\xc4\x80\x8c\x06latin1\x86R."), "outside latin1");
  ExpectError(P("c_codecs\nencode\n\x8c\x01x\x8c\x05utf-8\x86R."), "(str, 'latin1')");
}

TEST(PickleReaderTest, NoCycleCanBeBuilt) {
  // l = []; l.append(l): EMPTY_LIST PUT0 GET0 APPEND
  ExpectError(P(B("]q\x00h\x00" "a.")), "inside itself");
  // d = {}; t = (d,); d["k"] = t: the dict is sealed once inside the tuple
  ExpectError(P(B("}q\x00h\x00\x85q\x01h\x00\x8c\x01kh\x01s.")), "changed after it was used");
  // an object whose state holds the object
  ExpectError(P(B("cm\nC\n)\x81q\x00}q\x01\x8c\x01kh\x00s" "b.")), "already used");
}

TEST(PickleReaderTest, EveryLimitIsEnforced) {
  PickleLimits small;
  small.max_bytes = 8;
  ExpectError(P("\x8c\x10" "0123456789abcdef."), "more than the limit", small);
  small = {};
  small.max_nodes = 3;
  ExpectError(P("(K\x01K\x02K\x03K\x04l."), "more than 3 values", small);
  small = {};
  small.max_stack = 4;
  ExpectError(P("(K\x01K\x02K\x03K\x04l."), "stack deeper", small);
  small = {};
  small.max_depth = 3;
  ExpectError(P("K\x01\x85\x85\x85\x85."), "nested deeper than 3", small);
  small = {};
  small.max_memo = 2;
  ExpectError(P(B("K\x01q\x00q\x01q\x02.")), "memo larger", small);
}

TEST(PickleReaderTest, EveryTruncationOfAValidPickleIsAnErrorNotACrash) {
  const std::string whole = P(B("cm\nC\n)\x81}q\x00(\x8c\x01kK\x05\x8c\x01t\x8c\x01x\x85u" "b."));
  ASSERT_TRUE(Read(whole).ok()) << Read(whole).status().ToString();
  for (std::size_t n = 0; n < whole.size(); ++n) {
    EXPECT_FALSE(Read(whole.substr(0, n)).ok()) << n;
  }
}

}  // namespace
}  // namespace lmcache::protocol
