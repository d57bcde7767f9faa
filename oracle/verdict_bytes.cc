// File: verdict_bytes.cc — byte-exact verdicts: plain buffers and paged index-K caches
// with the mismatch located in the cache (verdict.h, section 1).
#include <algorithm>
#include <cmath>

#include "oracle/verdict.h"
#include "oracle/verdict_text.h"
#include "reference/error.h"
#include "reference/numeric/bit_cast.h"
#include "reference/numeric/minifloat.h"
#include "reference/numeric/ue8m0.h"

namespace dsaf::oracle {
namespace {

using ref::StorageFormat;
using verdict_detail::printf_string;

uint32_t load_u16(const uint8_t* p) {
  return static_cast<uint32_t>(p[0] | (p[1] << 8));
}
uint32_t load_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

// Values per fp4 ue8m0 scale (32): the head over its scale bytes.
int fp4_block() {
  return ref::kHeadDim / ref::scale_bytes_per_head(StorageFormat::kFp4E2m1);
}

// The codec name of a cache field, as the report prints it.
const char* codec_name(StorageFormat format, CacheField field) {
  if (field == CacheField::kScale) {
    return format == StorageFormat::kFp4E2m1 ? "ue8m0" : "fp32";
  }
  switch (format) {
    case StorageFormat::kFp8E4m3fn: return "e4m3fn";
    case StorageFormat::kFp4E2m1: return "e2m1";
    case StorageFormat::kBf16:
    case StorageFormat::kFp4SimulatedBf16: return "bf16";
    case StorageFormat::kFp32: return "fp32";
    case StorageFormat::kNone: break;
  }
  return "none";
}

// Hex digits of one code of the field (e2m1 1, e4m3fn / ue8m0 2, bf16 4, fp32 8).
int code_digits(StorageFormat format, CacheField field) {
  const std::string name = codec_name(format, field);
  if (name == "e2m1") return 1;
  if (name == "bf16") return 4;
  if (name == "fp32") return 8;
  return 2;
}

// Reads element `element` of `field` of the token at `at` from a cache: its raw code and
// the code's decoded value (unscaled).
void read_element(const ref::PagedCacheLayout& layout, const std::vector<uint8_t>& cache,
                  ref::CacheLocation at, CacheField field, int element, uint32_t& code,
                  double& value) {
  const StorageFormat format = layout.format();
  if (field == CacheField::kScale) {
    const uint8_t* p = cache.data() + layout.scale_offset(at);
    if (format == StorageFormat::kFp4E2m1) {
      code = p[element];
      value = ref::decode_ue8m0(p[element]);
    } else {  // fp8: one fp32 scale
      code = load_u32(p);
      value = ref::float_from_bits(code);
    }
    return;
  }
  const uint8_t* p = cache.data() + layout.value_offset(at);
  switch (format) {
    case StorageFormat::kFp8E4m3fn:
      code = p[element];
      value = ref::decode_e4m3fn(p[element]);
      break;
    case StorageFormat::kFp4E2m1:
      code = (p[element / 2] >> (4 * (element % 2))) & 0xF;
      value = ref::decode_e2m1(static_cast<uint8_t>(code));
      break;
    case StorageFormat::kBf16:
    case StorageFormat::kFp4SimulatedBf16:
      code = load_u16(p + 2 * element);
      value = ref::decode_bf16(static_cast<uint16_t>(code));
      break;
    case StorageFormat::kFp32:
      code = load_u32(p + 4 * element);
      value = ref::float_from_bits(code);
      break;
    case StorageFormat::kNone: break;
  }
}

// The token slot (page * page_size + slot within the page) that byte `offset` belongs to.
int64_t slot_of_byte(const ref::PagedCacheLayout& layout, int64_t offset) {
  const int64_t page = offset / layout.page_bytes();
  const int64_t in_page = offset % layout.page_bytes();
  const int value_bytes = ref::value_bytes_per_head(layout.format());
  const int scale_bytes = ref::scale_bytes_per_head(layout.format());
  const int64_t value_region = static_cast<int64_t>(layout.page_size()) * value_bytes;
  const int64_t slot =
      in_page < value_region ? in_page / value_bytes : (in_page - value_region) / scale_bytes;
  return page * layout.page_size() + slot;
}

struct Owner {
  int64_t sequence = -1;
  int64_t position = -1;
};

// Places byte `offset` in the cache and reads the element it belongs to from both buffers.
ByteMismatch locate_byte(const ref::PagedCacheLayout& layout, const std::vector<Owner>& owners,
                         const std::vector<uint8_t>& expected, const std::vector<uint8_t>& actual,
                         int64_t offset) {
  ByteMismatch m;
  m.byte_offset = offset;
  m.expected_byte = expected[offset];
  m.actual_byte = actual[offset];
  m.in_cache = true;
  m.format = layout.format();

  const int value_bytes = ref::value_bytes_per_head(layout.format());
  const int scale_bytes = ref::scale_bytes_per_head(layout.format());
  const int64_t value_region = static_cast<int64_t>(layout.page_size()) * value_bytes;
  m.page = offset / layout.page_bytes();
  const int64_t in_page = offset % layout.page_bytes();
  int byte_in_field = 0;
  if (in_page < value_region) {
    m.field = CacheField::kValue;
    m.slot = static_cast<int>(in_page / value_bytes);
    byte_in_field = static_cast<int>(in_page % value_bytes);
  } else {
    m.field = CacheField::kScale;
    m.slot = static_cast<int>((in_page - value_region) / scale_bytes);
    byte_in_field = static_cast<int>((in_page - value_region) % scale_bytes);
  }
  const Owner owner = owners[m.page * layout.page_size() + m.slot];
  m.owned = owner.sequence >= 0;
  m.sequence = owner.sequence;
  m.position = owner.position;

  // Which element of the head the byte holds.
  const StorageFormat format = layout.format();
  if (m.field == CacheField::kScale) {
    m.element = format == StorageFormat::kFp4E2m1 ? byte_in_field : 0;
  } else if (format == StorageFormat::kFp4E2m1) {
    // Two nibbles per byte, element 2i low: name the first nibble that differs.
    const bool low_differs = ((m.expected_byte ^ m.actual_byte) & 0xF) != 0;
    m.element = 2 * byte_in_field + (low_differs ? 0 : 1);
  } else {
    m.element = byte_in_field / (value_bytes / ref::kHeadDim);
  }
  const ref::CacheLocation at{m.page, m.slot};
  read_element(layout, expected, at, m.field, m.element, m.expected_code, m.expected_value);
  read_element(layout, actual, at, m.field, m.element, m.actual_code, m.actual_value);
  return m;
}

}  // namespace

const char* to_string(CacheField field) {
  return field == CacheField::kValue ? "value" : "scale";
}

std::string ByteMismatch::describe() const {
  const std::string bytes =
      printf_string("byte %lld (expected 0x%02x, actual 0x%02x)",
                    static_cast<long long>(byte_offset), expected_byte, actual_byte);
  if (!in_cache) return bytes;
  std::string where =
      owned ? printf_string("sequence %lld position %lld (page %lld slot %d)",
                            static_cast<long long>(sequence), static_cast<long long>(position),
                            static_cast<long long>(page), slot)
            : printf_string("page %lld slot %d (owned by no token)", static_cast<long long>(page),
                            slot);
  std::string element_name;
  if (field == CacheField::kValue) {
    element_name = printf_string("value element %d", element);
  } else if (format == StorageFormat::kFp4E2m1) {
    element_name = printf_string("scale %d (elements %d..%d)", element, fp4_block() * element,
                                 fp4_block() * (element + 1) - 1);
  } else {
    element_name = "scale";
  }
  const int digits = code_digits(format, field);
  return where + ", " + element_name + ", " + bytes + ": expected " + codec_name(format, field) +
         " " + printf_string("0x%0*x = %.9g", digits, expected_code, expected_value) + ", actual " +
         printf_string("0x%0*x = %.9g", digits, actual_code, actual_value);
}

std::string ByteVerdict::describe() const {
  std::string out = pass ? "PASS byte-exact: " : "FAIL byte-exact: ";
  if (expected_size != actual_size) {
    out +=
        printf_string("sizes differ (expected %lld bytes, actual %lld); ",
                      static_cast<long long>(expected_size), static_cast<long long>(actual_size));
  }
  out += printf_string("%lld bytes compared%s, %lld differ", static_cast<long long>(bytes),
                       cache ? " as a paged cache" : "", static_cast<long long>(mismatches));
  if (cache) {
    out += printf_string(" in token-owned slots (%lld in values, %lld in scales)",
                         static_cast<long long>(value_mismatches), static_cast<long long>(scale_mismatches));
  }
  out += ".";
  if (first) out += " First mismatch: " + first->describe() + ".";
  if (nan_codes > 0) {
    out += printf_string(" %lld element(s) are NaN codes in the actual cache where the reference has a number",
                         static_cast<long long>(nan_codes));
    if (first_nan && first && first_nan->byte_offset == first->byte_offset) {
      out += "; the first mismatch is one.";
    } else if (first_nan) {
      out += "; first: " + first_nan->describe() + ".";
    } else {
      out += ".";
    }
  }
  if (cache) {
    out += printf_string(
        " %lld untouched-region writes (bytes of slots no token owns, which a "
        "kernel must not touch)",
        static_cast<long long>(untouched_region_writes));
    out += first_untouched ? "; first: " + first_untouched->describe() + "." : ".";
  }
  return out;
}

ByteVerdict compare_bytes(const std::vector<uint8_t>& expected,
                          const std::vector<uint8_t>& actual) {
  ByteVerdict v;
  v.expected_size = static_cast<int64_t>(expected.size());
  v.actual_size = static_cast<int64_t>(actual.size());
  v.bytes = std::min(v.expected_size, v.actual_size);
  for (int64_t i = 0; i < v.bytes; ++i) {
    if (expected[i] == actual[i]) continue;
    if (v.mismatches++ == 0) {
      ByteMismatch m;
      m.byte_offset = i;
      m.expected_byte = expected[i];
      m.actual_byte = actual[i];
      v.first = m;
    }
  }
  v.pass = v.mismatches == 0 && v.expected_size == v.actual_size;
  return v;
}

ByteVerdict compare_paged_cache(const ref::PagedCacheLayout& layout, const CacheOwnership& owners,
                                const std::vector<uint8_t>& expected,
                                const std::vector<uint8_t>& actual) {
  const int64_t page_bytes = layout.page_bytes();
  if (expected.size() != actual.size() || static_cast<int64_t>(expected.size()) % page_bytes != 0) {
    throw_bad_input(
        printf_string("paged caches of %zu and %zu bytes: both must be the same whole "
                      "number of %lld-byte pages",
                      expected.size(), actual.size(), static_cast<long long>(page_bytes)));
  }
  if (owners.page_tables.size() != owners.seq_lens.size()) {
    throw_bad_input(printf_string("%zu page tables but %zu sequence lengths",
                                  owners.page_tables.size(), owners.seq_lens.size()));
  }
  const int64_t num_pages = static_cast<int64_t>(expected.size()) / page_bytes;

  // Owner of every token slot, first (sequence, position) wins.
  std::vector<Owner> slot_owner(static_cast<size_t>(num_pages * layout.page_size()));
  for (size_t s = 0; s < owners.page_tables.size(); ++s) {
    for (int64_t pos = 0; pos < owners.seq_lens[s]; ++pos) {
      const ref::CacheLocation at = layout.locate(owners.page_tables[s], pos, num_pages);
      Owner& owner = slot_owner[at.page * layout.page_size() + at.offset];
      if (owner.sequence < 0) owner = {static_cast<int64_t>(s), pos};
    }
  }

  ByteVerdict v;
  v.cache = true;
  v.expected_size = v.actual_size = v.bytes = static_cast<int64_t>(expected.size());
  std::optional<ByteMismatch> previous;  // the last owned differing byte: its element is counted
  for (int64_t i = 0; i < v.bytes; ++i) {
    if (expected[i] == actual[i]) continue;
    if (slot_owner[slot_of_byte(layout, i)].sequence < 0) {
      if (v.untouched_region_writes++ == 0) v.first_untouched = locate_byte(layout, slot_owner, expected, actual, i);
      continue;
    }
    const ByteMismatch m = locate_byte(layout, slot_owner, expected, actual, i);
    ++(m.field == CacheField::kValue ? v.value_mismatches : v.scale_mismatches);
    if (v.mismatches++ == 0) v.first = m;
    // An element's bytes are adjacent, so a byte of the element before is the same element.
    const bool same_element = previous && previous->page == m.page && previous->slot == m.slot &&
                              previous->field == m.field && previous->element == m.element;
    if (!same_element && std::isnan(m.actual_value) && !std::isnan(m.expected_value)) {
      if (v.nan_codes++ == 0) v.first_nan = m;
    }
    previous = m;
  }
  v.pass = v.mismatches == 0 && v.untouched_region_writes == 0;
  return v;
}

}  // namespace dsaf::oracle
