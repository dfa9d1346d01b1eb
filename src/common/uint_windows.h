// DecodeUintWindows: decodes a msgpack array's unsigned integers (positive
// fixint, uint8, uint16, uint32: the forms token ids take) 64 bytes at a
// time, with AVX-512 VBMI, where the CPU has it.
//
// Item by item, each item's position waits on the previous item's type byte,
// and where widths mix (the ids of a 128k-word vocabulary: uint16 and uint32
// at random) every type branch is a coin toss: about 5 ns an item. A
// window instead finds every item boundary in 64 bytes at once: each byte's
// "next item starts at" is computed for all 64 positions as if an item
// started there, and the chain from the window's first item is followed by
// doubling (6 byte permutes), so no step waits on a load or a branch.
//
// The caller's scalar decoder stays the reference: the windows decode only
// the four forms above, stop before any other byte that starts an item (an
// error, a uint64 or a nil: the scalar decoder reports or takes it), leave
// the last 4 to 63 bytes to it, and never read past `size`.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lmcache::msgpk {

// Bytes one window reads.
inline constexpr std::size_t kUintWindowBytes = 64;

// True when this CPU runs DecodeUintWindows (AVX-512 F, BW and VBMI).
bool UintWindowsAvailable();

struct UintWindowsResult {
  std::size_t bytes = 0;  // consumed from `p`: always an item boundary
  std::size_t items = 0;  // written to `out`
  bool other_form = false;  // stopped before an item of another form
};

// Decodes up to 16 windows (896 bytes) of items from `p` (an item boundary,
// `size` bytes readable) into `out`, at most `max_items`, each window while
// kUintWindowBytes remain; stops early before an item that is not one of the
// four forms. Requires UintWindowsAvailable().
UintWindowsResult DecodeUintWindows(const std::uint8_t* p, std::size_t size, std::uint32_t* out,
                                    std::size_t max_items);

// The encoder's side: each value in its shortest form, 12 at a time.
inline constexpr std::size_t kUintEncodeGroup = 12;

// True when this CPU runs EncodeUintWindows (also AVX-512 VBMI2).
bool UintWindowsEncodeAvailable();

// Writes the values of whole groups of 12 (count rounded down), each in its
// shortest form, at `out`, which must have room for 5 bytes a value and
// kUintWindowBytes more; returns the bytes written. Requires
// UintWindowsEncodeAvailable().
std::size_t EncodeUintWindows(const std::uint32_t* values, std::size_t count, char* out);

}  // namespace lmcache::msgpk
