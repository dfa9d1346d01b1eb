#include "common/uint_windows.h"

#include <immintrin.h>

// GCC 12's AVX-512 intrinsics start their results from a self-initialized
// "undefined" vector, which -Wmaybe-uninitialized reports in every caller:
// this file's functions (popped at its end, as unity builds join files).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <algorithm>
#include <array>

namespace lmcache::msgpk {
namespace {

#define LMC_VBMI __attribute__((target("avx512f,avx512bw,avx512vbmi")))

// A window is 64 bytes and owns the items that start in its first 56
// (kStride): an item is at most 5 bytes, so each ends inside its window, and
// the next window starts at the next multiple of 56 with its first item at
// 0-4 (its entry). Positions are bytes of the window; 56-63 absorb (an item
// there is the next window's), and kInvalid follows an item of another form.
constexpr std::size_t kStride = 56;
constexpr char kInvalid = 127;
constexpr std::size_t kHops = 6;  // 2^6 hops: more than 56 items
// Windows whose tables are built before any is decoded: their entries are
// then a chain of byte loads, and the rest runs in parallel.
constexpr std::size_t kBlockWindows = 16;
constexpr std::size_t kMinItemsPerWindow = 11;

// hop[b][x]: where the item 2^b items after one starting at x starts.
struct Hops {
  __m512i hop[kHops];
};

alignas(64) constexpr std::array<char, 64> kIota = [] {
  std::array<char, 64> iota{};
  for (int i = 0; i < 64; ++i) iota[static_cast<std::size_t>(i)] = static_cast<char>(i);
  return iota;
}();

LMC_VBMI void BuildHops(__m512i bytes, Hops& hops) {
  const __mmask64 fixint = _mm512_cmplt_epu8_mask(bytes, _mm512_set1_epi8(static_cast<char>(0x80)));
  const __mmask64 uint8 = _mm512_cmpeq_epi8_mask(bytes, _mm512_set1_epi8(static_cast<char>(0xcc)));
  const __mmask64 uint16 = _mm512_cmpeq_epi8_mask(bytes, _mm512_set1_epi8(static_cast<char>(0xcd)));
  const __mmask64 uint32 = _mm512_cmpeq_epi8_mask(bytes, _mm512_set1_epi8(static_cast<char>(0xce)));
  __m512i length = _mm512_maskz_mov_epi8(fixint, _mm512_set1_epi8(1));
  length = _mm512_mask_mov_epi8(length, uint8, _mm512_set1_epi8(2));
  length = _mm512_mask_mov_epi8(length, uint16, _mm512_set1_epi8(3));
  length = _mm512_mask_mov_epi8(length, uint32, _mm512_set1_epi8(5));
  const __m512i iota = _mm512_load_si512(kIota.data());
  constexpr __mmask64 kOwned = (1ull << kStride) - 1;
  const __mmask64 other_form = ~(fixint | uint8 | uint16 | uint32) & kOwned;
  __m512i next = _mm512_mask_add_epi8(iota, kOwned, iota, length);
  next = _mm512_mask_mov_epi8(next, other_form, _mm512_set1_epi8(kInvalid));
  const __m512i invalid = _mm512_set1_epi8(kInvalid);  // positions 64-127
  hops.hop[0] = next;
  for (std::size_t b = 1; b < kHops; ++b) {
    hops.hop[b] = _mm512_permutex2var_epi8(hops.hop[b - 1], hops.hop[b - 1], invalid);
  }
}

// Where the window is left from entries 0-4 (lanes 0-4): at 56-60, or
// kInvalid after an item of another form.
LMC_VBMI std::uint64_t Exits(const Hops& hops) {
  const __m512i invalid = _mm512_set1_epi8(kInvalid);
  const __m512i last = hops.hop[kHops - 1];
  const __m512i after = _mm512_permutex2var_epi8(last, last, invalid);  // 2^5 + 2^5 hops
  return static_cast<std::uint64_t>(_mm_cvtsi128_si64(_mm512_castsi512_si128(after)));
}

// starts[k]: where the k-th item from `entry` starts.
LMC_VBMI __m512i ItemStarts(const Hops& hops, std::uint8_t entry) {
  static constexpr std::array<std::uint64_t, kHops> kLanesWithBit = {
      0xaaaaaaaaaaaaaaaaull, 0xccccccccccccccccull, 0xf0f0f0f0f0f0f0f0ull,
      0xff00ff00ff00ff00ull, 0xffff0000ffff0000ull, 0xffffffff00000000ull};
  const __m512i invalid = _mm512_set1_epi8(kInvalid);
  __m512i starts = _mm512_set1_epi8(static_cast<char>(entry));
  for (std::size_t b = 0; b < kHops; ++b) {
    starts = _mm512_mask2_permutex2var_epi8(hops.hop[b], starts, kLanesWithBit[b], invalid);
  }
  return starts;
}

// Writes the values of 16 items (`lanes` of them) whose starts and ends (the
// next item's start) are the bytes of `start8` and `end8`.
LMC_VBMI void WriteValues(__m512i bytes, __m128i start8, __m128i end8, std::size_t lanes,
                          std::uint32_t* out) {
  const __m512i start = _mm512_cvtepu8_epi32(start8);
  const __m512i end = _mm512_cvtepu8_epi32(end8);
  // The value's big-endian bytes end at the item's last byte (a fixint is its
  // own value): 4 of them for a uint32, 2 for a uint16, else 1.
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i last = _mm512_sub_epi32(end, one);
  const __m512i width = _mm512_max_epi32(_mm512_sub_epi32(_mm512_sub_epi32(end, start), one), one);
  // Byte j of a little-endian value is the item's byte last - j.
  const __m512i each_byte = _mm512_mullo_epi32(last, _mm512_set1_epi32(0x01010101));
  const __m512i index = _mm512_sub_epi8(each_byte, _mm512_set1_epi32(0x03020100));
  const __m512i keep = _mm512_srlv_epi32(
      _mm512_set1_epi32(-1), _mm512_sub_epi32(_mm512_set1_epi32(32), _mm512_slli_epi32(width, 3)));
  const __m512i values = _mm512_and_si512(_mm512_permutexvar_epi8(index, bytes), keep);
  _mm512_mask_storeu_epi32(out, static_cast<__mmask16>((1u << lanes) - 1), values);
}

// Items [16 * kGroup, 16 * kGroup + 16) of a window's first `items`.
template <int kGroup>
LMC_VBMI void WriteGroup(__m512i bytes, __m512i starts, __m512i ends, std::size_t items,
                         std::uint32_t* out) {
  if (items <= 16 * kGroup) return;
  WriteValues(bytes, _mm512_extracti32x4_epi32(starts, kGroup),
              _mm512_extracti32x4_epi32(ends, kGroup),
              std::min<std::size_t>(16, items - 16 * kGroup), out + 16 * kGroup);
}

// Decodes `items` items of one window from its starts.
LMC_VBMI void WriteWindow(__m512i bytes, __m512i starts, std::size_t items, std::uint32_t* out) {
  alignas(64) static constexpr std::array<char, 64> kNextLane = [] {
    std::array<char, 64> next{};
    for (int i = 0; i < 64; ++i)
      next[static_cast<std::size_t>(i)] = static_cast<char>(std::min(i + 1, 63));
    return next;
  }();
  const __m512i ends = _mm512_permutexvar_epi8(_mm512_load_si512(kNextLane.data()), starts);
  WriteGroup<0>(bytes, starts, ends, items, out);
  WriteGroup<1>(bytes, starts, ends, items, out);
  WriteGroup<2>(bytes, starts, ends, items, out);
  WriteGroup<3>(bytes, starts, ends, items, out);
}

// One block of up to kBlockWindows windows from an item boundary; it stops
// early before an item of another form, or at max_items.
LMC_VBMI void DecodeBlock(const std::uint8_t* p, std::size_t windows, std::uint32_t* out,
                          std::size_t max_items, UintWindowsResult& done) {
  Hops hops[kBlockWindows];
  std::uint64_t exits[kBlockWindows];
  __m512i bytes[kBlockWindows];
  for (std::size_t w = 0; w < windows; ++w) {
    bytes[w] = _mm512_loadu_si512(p + w * kStride);
    BuildHops(bytes[w], hops[w]);
    exits[w] = Exits(hops[w]);
  }
  std::uint8_t entry = 0;
  for (std::size_t w = 0; w < windows; ++w) {
    const auto exit = static_cast<std::uint8_t>(exits[w] >> (8 * entry));
    const __m512i starts = ItemStarts(hops[w], entry);
    const auto owned = static_cast<std::size_t>(__builtin_popcountll(
        _mm512_cmplt_epu8_mask(starts, _mm512_set1_epi8(static_cast<char>(kStride)))));
    // An item of another form starts inside the window but is not decoded.
    const std::size_t whole = exit == kInvalid ? owned - 1 : owned;
    const std::size_t items = std::min(whole, max_items - done.items);
    WriteWindow(bytes[w], starts, items, out + done.items);
    done.items += items;
    done.other_form = items == whole && exit == kInvalid;
    if (items < owned) {  // stopped inside the window: at the item after the last decoded
      alignas(64) std::uint8_t at[64];
      _mm512_store_si512(at, starts);
      done.bytes += w * kStride + at[items];
      return;
    }
    entry = static_cast<std::uint8_t>(exit - kStride);
  }
  done.bytes += windows * kStride + entry;
}

LMC_VBMI UintWindowsResult DecodeWindowsVbmi(const std::uint8_t* p, std::size_t size,
                                             std::uint32_t* out, std::size_t max_items) {
  UintWindowsResult done;
  if (size >= kUintWindowBytes && max_items > 0) {
    // A window owns at least 11 items (52 bytes or more, 5 at most each):
    // no more windows than the items asked for can fill.
    const std::size_t windows =
        std::min({kBlockWindows, (size - kUintWindowBytes) / kStride + 1,
                  (max_items + kMinItemsPerWindow - 1) / kMinItemsPerWindow});
    DecodeBlock(p, windows, out, max_items, done);
  }
  return done;
}

#define LMC_VBMI2 __attribute__((target("avx512f,avx512bw,avx512vbmi,avx512vbmi2")))

// The encoder lays 12 values out 5 bytes each, [type, b3, b2, b1, b0] (big-
// endian), then compresses out the bytes each value's form does not use.
constexpr std::size_t kEncodeLanes = 12;

// Slot s = 5k + j takes the type byte of lane k (j = 0, from the second
// table) or byte 3 - (j - 1) of its value (little-endian in the first).
alignas(64) constexpr std::array<char, 64> kLayout = [] {
  std::array<char, 64> index{};
  for (int s = 0; s < 60; ++s) {
    const int k = s / 5;
    const int j = s % 5;
    index[static_cast<std::size_t>(s)] = static_cast<char>(j == 0 ? 64 + k : 4 * k + 4 - j);
  }
  return index;
}();
// For each slot: its lane (to spread the lanes' forms) and 4 x j.
alignas(64) constexpr std::array<char, 64> kLaneOfSlot = [] {
  std::array<char, 64> lane{};
  for (int s = 0; s < 64; ++s)
    lane[static_cast<std::size_t>(s)] = static_cast<char>(std::min(s / 5, 11));
  return lane;
}();
alignas(64) constexpr std::array<char, 64> kSlotTimes4 = [] {
  std::array<char, 64> j4{};
  for (int s = 0; s < 64; ++s) j4[static_cast<std::size_t>(s)] = static_cast<char>(4 * (s % 5));
  return j4;
}();
// kKept[4j + form]: whether a value of that form (0 fixint, 1 uint8, 2 uint16,
// 3 uint32) writes slot j.
alignas(64) constexpr std::array<char, 64> kKept = [] {
  std::array<char, 64> kept{};
  const int first_slot[4] = {4, 0, 0, 0};  // the type byte, and the bytes from here
  const int first_byte[4] = {4, 4, 3, 1};
  for (int j = 0; j < 5; ++j) {
    for (int form = 0; form < 4; ++form) {
      const bool written = (j == 0 && first_slot[form] == 0) || (j > 0 && j >= first_byte[form]);
      kept[static_cast<std::size_t>(4 * j + form)] = written ? static_cast<char>(0xff) : 0;
    }
  }
  return kept;
}();

LMC_VBMI2 std::size_t EncodeVbmi2(const std::uint32_t* values, std::size_t count, char* out) {
  char* const begin = out;
  const __m512i layout_index = _mm512_load_si512(kLayout.data());
  const __m512i lane_of_slot = _mm512_load_si512(kLaneOfSlot.data());
  const __m512i slot_times4 = _mm512_load_si512(kSlotTimes4.data());
  const __m512i kept = _mm512_load_si512(kKept.data());
  const __m512i one = _mm512_set1_epi32(1);
  constexpr __mmask64 kSlots = (1ull << (5 * kEncodeLanes)) - 1;
  for (std::size_t i = 0; i + kEncodeLanes <= count; i += kEncodeLanes) {
    const __m512i v = _mm512_maskz_loadu_epi32((1u << kEncodeLanes) - 1, values + i);
    __m512i form = _mm512_maskz_mov_epi32(_mm512_cmpgt_epu32_mask(v, _mm512_set1_epi32(0x7f)), one);
    form =
        _mm512_mask_add_epi32(form, _mm512_cmpgt_epu32_mask(v, _mm512_set1_epi32(0xff)), form, one);
    form = _mm512_mask_add_epi32(form, _mm512_cmpgt_epu32_mask(v, _mm512_set1_epi32(0xffff)), form,
                                 one);
    const __m512i type = _mm512_add_epi32(form, _mm512_set1_epi32(0xcb));  // 0xcc, 0xcd, 0xce
    const __m512i laid_out = _mm512_permutex2var_epi8(
        v, layout_index, _mm512_castsi128_si512(_mm512_cvtepi32_epi8(type)));
    const __m512i slot_form =
        _mm512_permutexvar_epi8(lane_of_slot, _mm512_castsi128_si512(_mm512_cvtepi32_epi8(form)));
    const __m512i written = _mm512_permutexvar_epi8(_mm512_add_epi8(slot_form, slot_times4), kept);
    const __mmask64 keep = _mm512_test_epi8_mask(written, written) & kSlots;
    _mm512_storeu_si512(out, _mm512_maskz_compress_epi8(keep, laid_out));
    out += __builtin_popcountll(keep);
  }
  return static_cast<std::size_t>(out - begin);
}

#undef LMC_VBMI2
#undef LMC_VBMI

}  // namespace

bool UintWindowsAvailable() {
  static const bool available = __builtin_cpu_supports("avx512f") &&
                                __builtin_cpu_supports("avx512bw") &&
                                __builtin_cpu_supports("avx512vbmi");
  return available;
}

bool UintWindowsEncodeAvailable() {
  static const bool available = UintWindowsAvailable() && __builtin_cpu_supports("avx512vbmi2");
  return available;
}

std::size_t EncodeUintWindows(const std::uint32_t* values, std::size_t count, char* out) {
  return EncodeVbmi2(values, count, out);
}

UintWindowsResult DecodeUintWindows(const std::uint8_t* p, std::size_t size, std::uint32_t* out,
                                    std::size_t max_items) {
  return DecodeWindowsVbmi(p, size, out, max_items);
}

}  // namespace lmcache::msgpk

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
