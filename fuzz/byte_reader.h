// File: byte_reader.h
// Little-endian reading and writing of fuzz inputs: ByteReader hands out integers from
// the input and zeros once it is used up (so every byte string decodes); append_le is
// the inverse, for seed generators (with f32_bytes for fp32 payloads).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

namespace dsaf::fuzz {

class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool done() const { return pos_ >= size_; }
  size_t left() const { return done() ? 0 : size_ - pos_; }
  template <class T>
  T read() {
    uint8_t bytes[sizeof(T)] = {};
    for (size_t i = 0; i < sizeof(T) && pos_ < size_; ++i) bytes[i] = data_[pos_++];
    uint64_t v = 0;
    for (size_t i = sizeof(T); i-- > 0;) v = (v << 8) | bytes[i];
    T out;
    const auto narrow = static_cast<std::make_unsigned_t<T>>(v);
    std::memcpy(&out, &narrow, sizeof(T));
    return out;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

template <class T>
void append_le(std::vector<uint8_t>& out, T value) {
  uint64_t v = 0;
  std::memcpy(&v, &value, sizeof(T));
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// fp32 values as little-endian bytes.
inline std::vector<uint8_t> f32_bytes(const std::vector<float>& values) {
  std::vector<uint8_t> out;
  for (float v : values) {
    uint32_t bits = 0;
    std::memcpy(&bits, &v, 4);
    append_le(out, bits);
  }
  return out;
}

}  // namespace dsaf::fuzz
