// File: bit_cast.h
// bit_cast<To>(from): reinterpret the object representation of a trivially
// copyable value, as C++20 std::bit_cast does. Implemented with memcpy because
// reinterpret_cast<uint32_t&>(f) is undefined behaviour (strict aliasing), while
// memcpy of equal-sized trivially copyable objects is defined and compiles to a move.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace dsaf::ref {

template <class To, class From>
inline To bit_cast(const From& from) {
  static_assert(sizeof(To) == sizeof(From), "bit_cast needs equal sizes");
  static_assert(std::is_trivially_copyable_v<To> && std::is_trivially_copyable_v<From>);
  To to;
  std::memcpy(&to, &from, sizeof(To));
  return to;
}

inline uint32_t float_bits(float x) { return bit_cast<uint32_t>(x); }
inline float float_from_bits(uint32_t bits) { return bit_cast<float>(bits); }

}  // namespace dsaf::ref
