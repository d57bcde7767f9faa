// File: fuzz_safetensors.cc
// libFuzzer target: bytes -> SafetensorsFile::from_bytes (fixtures/safetensors.h).
// Rejection must be a dsaf::Error; any other exception escapes and libFuzzer reports it.
// An accepted image must then hold up when used:
//   - every tensor reads back by name, its dtype name parses back to the same dtype, and
//     elements x bits / 8 == bytes; every data byte is read (ASan checks the bounds);
//   - the tensors tile the byte buffer: their sizes sum to size - 8 - N;
//   - to_float on tensors of at most kSmallElements values returns elements() floats or
//     throws dsaf::Error (dtypes it does not read);
//   - dequantize_fp8_blocks on each 2-D F8_E4M3 weight of at most kSmallElements values,
//     paired with every F32 tensor (the matching scale_inv among them), returns out x in
//     floats or throws dsaf::Error;
//   - SafetensorsFile::open (the mmap path) accepts the same bytes from a file with the
//     same tensor names.
#include <cstdint>
#include <string>
#include <vector>

#include "fixtures/safetensors.h"
#include "fuzz/harness.h"
#include "reference/error.h"

namespace {

using dsaf::fixtures::SafetensorsFile;
using dsaf::fixtures::StDtype;
using dsaf::fixtures::StTensor;
using dsaf::fuzz::property_failed;

constexpr int64_t kSmallElements = 1 << 16;

void touch_conversions(const SafetensorsFile& file) {
  std::vector<const StTensor*> scales;
  for (const std::string& name : file.names()) {
    const StTensor& t = file.tensor(name);
    if (t.dtype == StDtype::kF32) scales.push_back(&t);
  }
  for (const std::string& name : file.names()) {
    const StTensor& t = file.tensor(name);
    if (t.elements() > kSmallElements) continue;
    try {
      if (static_cast<int64_t>(dsaf::fixtures::to_float(t).size()) != t.elements()) {
        property_failed("to_float returned a different number of values than elements()");
      }
    } catch (const dsaf::Error&) {
    }
    if (t.dtype != StDtype::kF8E4M3 || t.shape.size() != 2) continue;
    for (const StTensor* scale : scales) {
      try {
        const std::vector<float> w = dsaf::fixtures::dequantize_fp8_blocks(t, *scale);
        if (static_cast<int64_t>(w.size()) != t.elements()) {
          property_failed("dequantize_fp8_blocks returned a different number of values than the weight");
        }
      } catch (const dsaf::Error&) {
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::shared_ptr<const SafetensorsFile> file;
  try {
    file = SafetensorsFile::from_bytes(std::vector<uint8_t>(data, data + size), "fuzz.safetensors");
  } catch (const dsaf::Error&) {
    return 0;
  }

  // Structure of an accepted image.
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | data[i];
  int64_t covered = 0;
  unsigned checksum = 0;
  const std::vector<std::string> names = file->names();
  for (const std::string& name : names) {
    const StTensor& t = file->tensor(name);
    if (t.name != name) property_failed("tensor(name).name differs from the name");
    if (dsaf::fixtures::parse_dtype(dsaf::fixtures::dtype_name(t.dtype)) != t.dtype) {
      property_failed("dtype name does not parse back to the dtype");
    }
    for (int64_t d : t.shape) {
      if (d < 0) property_failed("negative shape entry accepted");
    }
    if (t.begin < 0 || t.end < t.begin) property_failed("offsets out of order accepted");
    // elements() x bits cannot overflow here: the reader checked the product.
    if (t.elements() * dsaf::fixtures::dtype_bits(t.dtype) != t.bytes() * 8) {
      property_failed("elements x bits != bytes x 8");
    }
    for (int64_t i = 0; i < t.bytes(); ++i) checksum += t.data[i];
    covered += t.bytes();
  }
  if (static_cast<uint64_t>(covered) != size - 8 - header) {
    property_failed("tensors do not cover the byte buffer");
  }
  for (const auto& [key, value] : file->metadata()) checksum += static_cast<unsigned>(key.size() + value.size());
  try {
    file->tensor(std::string("\x01not a tensor"));
    if (!file->contains(std::string("\x01not a tensor"))) property_failed("tensor() found an absent name");
  } catch (const dsaf::Error&) {
  }
  touch_conversions(*file);

  // The mmap path reads the same bytes the same way.
  static dsaf::fuzz::ScratchFile scratch(".safetensors");
  const auto mapped = SafetensorsFile::open(scratch.write(data, size));
  if (mapped->names() != names) property_failed("open() and from_bytes() disagree on the tensor names");
  if (mapped->metadata() != file->metadata()) property_failed("open() and from_bytes() disagree on the metadata");

  volatile unsigned sink = checksum;  // keep the reads
  (void)sink;
  return 0;
}
