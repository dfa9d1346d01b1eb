// PickleReader: a strict reader of the small subset of Python's pickle format
// (protocols 2-5) that LMCache's device IPC wrappers are written in.
//
// register_kv_cache carries each KV tensor as `pickle.dumps(wrapper)` inside
// msgpack ext 1 (spec 4.6). Unpickling in the usual sense runs code named by
// the bytes; this reader never does. It interprets the opcodes a plain
// object's pickle uses (PROTO, FRAME, GLOBAL/STACK_GLOBAL, NEWOBJ/REDUCE,
// EMPTY_DICT/SETITEM(S), BUILD, tuples, lists, ints, LONG1, unicode and bytes,
// NONE/TRUE/FALSE, MARK, memo PUT/GET/MEMOIZE, STOP) into a tree of values, and
// a global is only a name in that tree, accepted when the caller's filter
// accepts it. Anything else is an error that names what was found and where.
//
// Limits bound the work and memory of one pickle by its size: the bytes, the
// nodes made, the stack, the memo and the nesting depth. A container may gain
// children only until it becomes the child of another value, and never
// itself, so the tree has no cycles and its depth is known as it is built.
// Python's `_codecs.encode(text, "latin1")` (how protocol 2 writes bytes) is
// read as the bytes it stands for, without calling anything.
//
// Thread-safety: ReadPickle is a pure function; a PickleTree is a plain value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lmcache/status.h"

namespace lmcache::protocol {

struct PickleLimits {
  std::size_t max_bytes = 64 * 1024;  // one wrapper pickles to ~400 bytes
  std::size_t max_nodes = 2048;
  std::size_t max_stack = 256;  // values and marks on the stack at once
  std::size_t max_memo = 1024;
  std::uint32_t max_depth = 16;  // nesting of containers and objects
};

class PickleTree {
 public:
  using Index = std::uint32_t;
  enum class Kind : std::uint8_t { kNone, kBool, kInt, kStr, kBytes, kTuple, kList, kDict, kGlobal, kObject };

  struct Node {
    Kind kind = Kind::kNone;
    std::int64_t integer = 0;   // kBool (0 or 1), kInt
    std::string text;           // kStr (UTF-8), kBytes, kGlobal ("module.name")
    std::vector<Index> items;   // kTuple, kList; kDict: key, value, key, value...; kObject: args
    Index cls = 0;              // kObject: the kGlobal it was made from
    std::optional<Index> state; // kObject: the value BUILD gave it
    std::uint32_t depth = 1;
    bool sealed = false;        // is some other value's child: no more children
  };

  const Node& at(Index i) const { return nodes_[i]; }
  Index root() const { return root_; }
  std::size_t size() const { return nodes_.size(); }
  // The value of `key` in a kDict (the last one, as Python keeps), if any.
  std::optional<Index> DictGet(Index dict, std::string_view key) const;

 private:
  friend class PickleMachine;
  std::vector<Node> nodes_;
  Index root_ = 0;
};

// Decides whether a global (module, name) may appear.
using PickleGlobalFilter = std::function<bool(std::string_view module, std::string_view name)>;

// The value a pickle denotes, or kMalformedRequest (kTooLarge past a limit).
Result<PickleTree> ReadPickle(std::string_view bytes, const PickleGlobalFilter& accept,
                              const PickleLimits& limits = {});

}  // namespace lmcache::protocol
