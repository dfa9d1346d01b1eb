#include "protocol/pickle_reader.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <unordered_map>
#include <utility>

#include "common/utf8.h"

namespace lmcache::protocol {

std::optional<PickleTree::Index> PickleTree::DictGet(Index dict, std::string_view key) const {
  const Node& d = nodes_[dict];
  if (d.kind != Kind::kDict) return std::nullopt;
  for (std::size_t i = d.items.size(); i >= 2; i -= 2) {
    const Node& k = nodes_[d.items[i - 2]];
    if (k.kind == Kind::kStr && k.text == key) return d.items[i - 1];
  }
  return std::nullopt;
}

namespace {

// The opcodes this reader knows (pickletools' names).
enum Opcode : std::uint8_t {
  kMark = '(', kStop = '.', kBinInt = 'J', kBinInt1 = 'K', kBinInt2 = 'M', kNone = 'N',
  kReduce = 'R', kBinUnicode = 'X', kAppend = 'a', kBuild = 'b', kGlobal = 'c', kAppends = 'e',
  kBinGet = 'h', kLongBinGet = 'j', kList = 'l', kBinPut = 'q', kLongBinPut = 'r', kSetItem = 's',
  kTuple = 't', kSetItems = 'u', kEmptyDict = '}', kEmptyList = ']', kEmptyTuple = ')',
  kBinBytes = 'B', kShortBinBytes = 'C', kProto = 0x80, kNewObj = 0x81, kTuple1 = 0x85,
  kTuple2 = 0x86, kTuple3 = 0x87, kNewTrue = 0x88, kNewFalse = 0x89, kLong1 = 0x8a,
  kShortBinUnicode = 0x8c, kBinUnicode8 = 0x8d, kBinBytes8 = 0x8e, kStackGlobal = 0x93,
  kMemoize = 0x94, kFrame = 0x95,
};

Status Malformed(std::string message) {
  return Status(ErrorCode::kMalformedRequest, "pickle: " + std::move(message));
}

}  // namespace

// Runs the opcodes of one pickle over a stack of node indices.
class PickleMachine {
 public:
  using Index = PickleTree::Index;
  using Kind = PickleTree::Kind;

  PickleMachine(std::string_view bytes, const PickleGlobalFilter& accept, const PickleLimits& limits)
      : in_(bytes), accept_(accept), limits_(limits) {}

  Result<PickleTree> Run() {
    if (in_.size() > limits_.max_bytes) {
      return Status(ErrorCode::kTooLarge, "pickle: " + std::to_string(in_.size()) +
                                              " bytes, more than the limit of " +
                                              std::to_string(limits_.max_bytes));
    }
    if (in_.empty() || static_cast<std::uint8_t>(in_[0]) != kProto) {
      return Malformed("does not start with PROTO (pickles of protocol 2 to 5 do)");
    }
    while (true) {
      if (pos_ >= in_.size()) return Malformed("ends without STOP");
      const std::size_t at = pos_;
      const std::uint8_t op = static_cast<std::uint8_t>(in_[pos_++]);
      if (op == kStop) break;
      Status s = Step(op);
      if (!s.ok()) return s.WithContext("at byte " + std::to_string(at));
    }
    if (pos_ != in_.size()) return Malformed(std::to_string(in_.size() - pos_) + " bytes after STOP");
    if (!marks_.empty() || stack_.size() != 1) {
      return Malformed("STOP with " + std::to_string(stack_.size()) + " values and " +
                       std::to_string(marks_.size()) + " marks on the stack (want one value)");
    }
    tree_.root_ = stack_.back();
    return std::move(tree_);
  }

 private:
  Status Step(std::uint8_t op) {
    switch (op) {
      case kProto: return Proto();
      case kFrame: return Skip(8);  // a frame only groups opcodes; its length is checked as read
      case kMark: return Mark();
      case kNone: return Push(Node(Kind::kNone));
      case kNewTrue: case kNewFalse: return PushInt(Kind::kBool, op == kNewTrue ? 1 : 0);
      case kBinInt1: return ReadIntThen(1, false);
      case kBinInt2: return ReadIntThen(2, false);
      case kBinInt: return ReadIntThen(4, true);
      case kLong1: return Long1();
      case kShortBinUnicode: return Text(Kind::kStr, 1);
      case kBinUnicode: return Text(Kind::kStr, 4);
      case kBinUnicode8: return Text(Kind::kStr, 8);
      case kShortBinBytes: return Text(Kind::kBytes, 1);
      case kBinBytes: return Text(Kind::kBytes, 4);
      case kBinBytes8: return Text(Kind::kBytes, 8);
      case kEmptyTuple: return Push(Node(Kind::kTuple));
      case kTuple1: case kTuple2: case kTuple3: return TupleOf(op - kTuple1 + 1);
      case kTuple: return Collect(Kind::kTuple);
      case kEmptyList: return Push(Node(Kind::kList));
      case kList: return Collect(Kind::kList);
      case kEmptyDict: return Push(Node(Kind::kDict));
      case kAppend: return AddToContainer(Kind::kList, stack_.size() >= 1 ? stack_.size() - 1 : 0);
      case kAppends: case kSetItems: return AddMarked(op == kAppends ? Kind::kList : Kind::kDict);
      case kSetItem: return AddToContainer(Kind::kDict, stack_.size() >= 2 ? stack_.size() - 2 : 0);
      case kGlobal: return Global();
      case kStackGlobal: return StackGlobal();
      case kNewObj: case kReduce: return Construct(op == kReduce);
      case kBuild: return Build();
      case kBinPut: return Put(1);
      case kLongBinPut: return Put(4);
      case kMemoize: return Memoize();
      case kBinGet: return Get(1);
      case kLongBinGet: return Get(4);
      default: {
        char name[32];
        std::snprintf(name, sizeof(name), "0x%02x", op);
        std::string shown = name;
        if (op >= 0x20 && op < 0x7f) shown += std::string(" ('") + static_cast<char>(op) + "')";
        return Malformed("opcode " + shown +
                         " is not accepted (only the opcodes of a plain object's pickle are)");
      }
    }
  }

  static PickleTree::Node Node(Kind kind) {
    PickleTree::Node n;
    n.kind = kind;
    return n;
  }

  // --- input ---------------------------------------------------------------
  Status Skip(std::size_t n) {
    if (in_.size() - pos_ < n) return Malformed("truncated");
    pos_ += n;
    return Status::Ok();
  }
  Result<std::uint64_t> ReadLE(std::size_t n) {
    if (in_.size() - pos_ < n) return Malformed("truncated");
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) {
      v |= static_cast<std::uint64_t>(static_cast<std::uint8_t>(in_[pos_ + i])) << (8 * i);
    }
    pos_ += n;
    return v;
  }

  // --- stack -----------------------------------------------------------------
  Status Push(PickleTree::Node node) {
    if (tree_.nodes_.size() >= limits_.max_nodes) {
      return Status(ErrorCode::kTooLarge, "pickle: more than " + std::to_string(limits_.max_nodes) +
                                              " values");
    }
    if (node.depth > limits_.max_depth) {
      return Status(ErrorCode::kTooLarge, "pickle: nested deeper than " +
                                              std::to_string(limits_.max_depth));
    }
    tree_.nodes_.push_back(std::move(node));
    return PushIndex(static_cast<Index>(tree_.nodes_.size() - 1));
  }
  Status PushIndex(Index i) {
    if (stack_.size() + marks_.size() >= limits_.max_stack) {
      return Status(ErrorCode::kTooLarge, "pickle: stack deeper than " +
                                              std::to_string(limits_.max_stack));
    }
    stack_.push_back(i);
    return Status::Ok();
  }
  Result<Index> Pop() {
    if (stack_.empty() || (!marks_.empty() && marks_.back() == stack_.size())) {
      return Malformed("stack underflow");
    }
    const Index i = stack_.back();
    stack_.pop_back();
    return i;
  }
  // The values above the newest mark, which is removed.
  Result<std::vector<Index>> PopMarked() {
    if (marks_.empty()) return Malformed("no MARK to collect to");
    const std::size_t from = marks_.back();
    marks_.pop_back();
    std::vector<Index> items(stack_.begin() + static_cast<std::ptrdiff_t>(from), stack_.end());
    stack_.resize(from);
    return items;
  }
  Status Mark() {
    if (stack_.size() + marks_.size() >= limits_.max_stack) {
      return Status(ErrorCode::kTooLarge, "pickle: too many marks");
    }
    marks_.push_back(stack_.size());
    return Status::Ok();
  }
  PickleTree::Node& At(Index i) { return tree_.nodes_[i]; }

  // `children` become the items of a new node of `kind`.
  Status PushContainer(Kind kind, std::vector<Index> children) {
    PickleTree::Node n = Node(kind);
    for (Index c : children) {
      At(c).sealed = true;
      n.depth = std::max(n.depth, At(c).depth + 1);
    }
    n.items = std::move(children);
    return Push(std::move(n));
  }

  // --- scalars ---------------------------------------------------------------
  Status Proto() {
    LMC_ASSIGN_OR_RETURN(const std::uint64_t version, ReadLE(1));
    if (pos_ != 2) return Malformed("PROTO after the first opcode");
    if (version < 2 || version > 5) {
      return Malformed("protocol " + std::to_string(version) + " (accepted: 2 to 5)");
    }
    return Status::Ok();
  }
  Status PushInt(Kind kind, std::int64_t v) {
    PickleTree::Node n = Node(kind);
    n.integer = v;
    return Push(std::move(n));
  }
  Status ReadIntThen(std::size_t bytes, bool is_signed) {
    LMC_ASSIGN_OR_RETURN(const std::uint64_t raw, ReadLE(bytes));
    const std::int64_t v = is_signed ? static_cast<std::int32_t>(static_cast<std::uint32_t>(raw))
                                     : static_cast<std::int64_t>(raw);
    return PushInt(Kind::kInt, v);
  }
  Status Long1() {
    LMC_ASSIGN_OR_RETURN(const std::uint64_t n, ReadLE(1));
    if (n > 8) return Malformed("LONG1 of " + std::to_string(n) + " bytes (more than 64 bits)");
    LMC_ASSIGN_OR_RETURN(std::uint64_t raw, ReadLE(n));
    if (n > 0 && n < 8 && (raw >> (8 * n - 1)) & 1) raw |= ~std::uint64_t{0} << (8 * n);  // sign
    return PushInt(Kind::kInt, static_cast<std::int64_t>(raw));
  }
  Status Text(Kind kind, std::size_t length_bytes) {
    LMC_ASSIGN_OR_RETURN(const std::uint64_t n, ReadLE(length_bytes));
    if (n > in_.size() - pos_) return Malformed("truncated");
    PickleTree::Node node = Node(kind);
    node.text.assign(in_.substr(pos_, n));
    pos_ += n;
    if (kind == Kind::kStr && !IsValidUtf8(node.text)) return Malformed("a str is not UTF-8");
    return Push(std::move(node));
  }

  // --- containers ------------------------------------------------------------
  Status TupleOf(std::size_t n) {
    if (stack_.size() - (marks_.empty() ? 0 : marks_.back()) < n) return Malformed("stack underflow");
    std::vector<Index> items(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
    stack_.resize(stack_.size() - n);
    return PushContainer(Kind::kTuple, std::move(items));
  }
  Status Collect(Kind kind) {
    LMC_ASSIGN_OR_RETURN(std::vector<Index> items, PopMarked());
    return PushContainer(kind, std::move(items));
  }
  // Adds the values above stack position `from` to the container just below it.
  Status AddToContainer(Kind kind, std::size_t from) {
    const std::size_t floor = marks_.empty() ? 0 : marks_.back();
    const std::size_t need = kind == Kind::kDict ? 2 : 1;
    if (stack_.size() < floor + need + 1 || from < floor + 1) return Malformed("stack underflow");
    std::vector<Index> items(stack_.begin() + static_cast<std::ptrdiff_t>(from), stack_.end());
    stack_.resize(from);
    return Extend(stack_.back(), kind, items);
  }
  Status AddMarked(Kind kind) {
    LMC_ASSIGN_OR_RETURN(std::vector<Index> items, PopMarked());
    if (kind == Kind::kDict && items.size() % 2 != 0) return Malformed("SETITEMS with an odd count");
    if (stack_.empty() || (!marks_.empty() && marks_.back() == stack_.size())) {
      return Malformed("stack underflow");
    }
    return Extend(stack_.back(), kind, items);
  }
  Status Extend(Index target, Kind kind, const std::vector<Index>& items) {
    PickleTree::Node& t = At(target);
    if (t.kind != kind) return Malformed(kind == Kind::kDict ? "SETITEM(S) on a non-dict" : "APPEND(S) on a non-list");
    if (t.sealed) return Malformed("a container changed after it was used");
    for (Index c : items) {
      if (c == target) return Malformed("a container inside itself");
    }
    std::uint32_t depth = t.depth;
    for (Index c : items) {
      At(c).sealed = true;
      depth = std::max(depth, At(c).depth + 1);
    }
    if (depth > limits_.max_depth) {
      return Status(ErrorCode::kTooLarge, "pickle: nested deeper than " + std::to_string(limits_.max_depth));
    }
    PickleTree::Node& grown = At(target);
    grown.depth = depth;
    grown.items.insert(grown.items.end(), items.begin(), items.end());
    return Status::Ok();
  }

  // --- globals and objects ---------------------------------------------------
  Result<std::string> Line() {
    const std::size_t end = in_.find('\n', pos_);
    if (end == std::string_view::npos || end - pos_ > 256) return Malformed("GLOBAL without its line");
    std::string line(in_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return line;
  }
  Status PushGlobal(const std::string& module, const std::string& name) {
    if (!IsValidUtf8(module) || !IsValidUtf8(name)) return Malformed("a global's name is not UTF-8");
    if (!accept_(module, name)) {
      return Malformed("global '" + RepairUtf8(module) + "." + RepairUtf8(name) +
                       "' is not accepted (only the LMCache CUDA IPC wrappers and torch dtypes are)");
    }
    PickleTree::Node n = Node(Kind::kGlobal);
    n.text = module + "." + name;
    return Push(std::move(n));
  }
  Status Global() {
    LMC_ASSIGN_OR_RETURN(const std::string module, Line());
    LMC_ASSIGN_OR_RETURN(const std::string name, Line());
    return PushGlobal(module, name);
  }
  Status StackGlobal() {
    LMC_ASSIGN_OR_RETURN(const Index name, Pop());
    LMC_ASSIGN_OR_RETURN(const Index module, Pop());
    if (At(name).kind != Kind::kStr || At(module).kind != Kind::kStr) {
      return Malformed("STACK_GLOBAL of values that are not str");
    }
    return PushGlobal(At(module).text, At(name).text);
  }
  // NEWOBJ (cls, args) and REDUCE (callable, args): an object of that class,
  // except `_codecs.encode(text, "latin1")`, which is the bytes it denotes.
  Status Construct(bool reduce) {
    LMC_ASSIGN_OR_RETURN(const Index args, Pop());
    LMC_ASSIGN_OR_RETURN(const Index cls, Pop());
    if (At(cls).kind != Kind::kGlobal) return Malformed("NEWOBJ/REDUCE of something not a global");
    if (At(args).kind != Kind::kTuple) return Malformed("NEWOBJ/REDUCE arguments are not a tuple");
    if (At(cls).text == "_codecs.encode") {
      if (!reduce) return Malformed("NEWOBJ of _codecs.encode");
      return Latin1Bytes(At(args).items);
    }
    PickleTree::Node n = Node(Kind::kObject);
    n.cls = cls;
    std::vector<Index> items = At(args).items;
    At(args).sealed = true;
    n.depth = At(args).depth + 1;
    n.items = std::move(items);
    return Push(std::move(n));
  }
  Status Latin1Bytes(const std::vector<Index>& args) {
    if (args.size() != 2 || At(args[0]).kind != Kind::kStr || At(args[1]).kind != Kind::kStr ||
        At(args[1]).text != "latin1") {
      return Malformed("_codecs.encode is accepted only as (str, 'latin1')");
    }
    const std::string& utf8 = At(args[0]).text;
    PickleTree::Node n = Node(Kind::kBytes);
    for (std::size_t i = 0; i < utf8.size(); ++i) {
      const auto b = static_cast<std::uint8_t>(utf8[i]);
      if (b < 0x80) {
        n.text.push_back(static_cast<char>(b));
      } else if ((b == 0xc2 || b == 0xc3) && i + 1 < utf8.size()) {  // U+0080..U+00FF
        n.text.push_back(static_cast<char>(((b & 0x03) << 6) | (static_cast<std::uint8_t>(utf8[++i]) & 0x3f)));
      } else {
        return Malformed("_codecs.encode of text outside latin1");
      }
    }
    return Push(std::move(n));
  }
  Status Build() {
    LMC_ASSIGN_OR_RETURN(const Index state, Pop());
    if (stack_.empty() || (!marks_.empty() && marks_.back() == stack_.size())) {
      return Malformed("stack underflow");
    }
    const Index obj = stack_.back();
    if (At(obj).kind != Kind::kObject) return Malformed("BUILD of something not an object");
    if (At(obj).sealed || At(obj).state) return Malformed("BUILD of an object already used");
    if (At(state).kind != Kind::kDict) return Malformed("BUILD with a state that is not a dict");
    if (state == obj) return Malformed("an object inside itself");
    At(state).sealed = true;
    const std::uint32_t depth = std::max(At(obj).depth, At(state).depth + 1);
    if (depth > limits_.max_depth) {
      return Status(ErrorCode::kTooLarge, "pickle: nested deeper than " + std::to_string(limits_.max_depth));
    }
    At(obj).depth = depth;
    At(obj).state = state;
    return Status::Ok();
  }

  // --- memo ------------------------------------------------------------------
  Status Remember(std::uint64_t key) {
    if (stack_.empty()) return Malformed("PUT with an empty stack");
    if (memo_.size() >= limits_.max_memo && !memo_.count(key)) {
      return Status(ErrorCode::kTooLarge, "pickle: memo larger than " + std::to_string(limits_.max_memo));
    }
    memo_[key] = stack_.back();
    return Status::Ok();
  }
  Status Put(std::size_t bytes) {
    LMC_ASSIGN_OR_RETURN(const std::uint64_t key, ReadLE(bytes));
    return Remember(key);
  }
  Status Memoize() { return Remember(memo_.size()); }
  Status Get(std::size_t bytes) {
    LMC_ASSIGN_OR_RETURN(const std::uint64_t key, ReadLE(bytes));
    const auto it = memo_.find(key);
    if (it == memo_.end()) return Malformed("GET of memo " + std::to_string(key) + ", never PUT");
    return PushIndex(it->second);
  }

  std::string_view in_;
  std::size_t pos_ = 0;
  const PickleGlobalFilter& accept_;
  const PickleLimits& limits_;
  PickleTree tree_;
  std::vector<Index> stack_;
  std::vector<std::size_t> marks_;  // stack sizes at each MARK
  std::unordered_map<std::uint64_t, Index> memo_;
};

Result<PickleTree> ReadPickle(std::string_view bytes, const PickleGlobalFilter& accept,
                              const PickleLimits& limits) {
  return PickleMachine(bytes, accept, limits).Run();
}

}  // namespace lmcache::protocol
