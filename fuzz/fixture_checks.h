// File: fixture_checks.h
// What an accepted fixture must survive, shared by fuzz_hdf5_fixture (raw HDF5 bytes) and
// fuzz_fixture_schema (well-formed HDF5 with fuzzed contents):
//   - validate_fixture accepts it (the loader never returns a partly valid fixture);
//   - describe_fixture, tensor_values / tensor_ints (on tensors of at most kSmallElements
//     values: elements() values or a dsaf::Error), weight_values for every `<stem>.weight`
//     and indexer_weights for every layer return or throw dsaf::Error;
//   - write_fixture writes it to `copy`, and open_fixture reads the copy back with the
//     same description (what the loader accepts, the writer can write).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "fixtures/fixture.h"
#include "fuzz/harness.h"
#include "reference/error.h"

namespace dsaf::fuzz {
namespace detail {

inline constexpr int64_t kSmallElements = 1 << 16;

inline void touch_group(const dsaf::fixtures::TensorMap& group) {
  for (const auto& [name, t] : group) {
    if (t.elements() > kSmallElements) continue;
    try {
      if (t.dtype == dsaf::fixtures::TensorDtype::kI32) {
        if (static_cast<int64_t>(dsaf::fixtures::tensor_ints(t).size()) != t.elements()) {
          property_failed("tensor_ints returned a different number of values than elements()");
        }
      } else if (static_cast<int64_t>(dsaf::fixtures::tensor_values(t).size()) != t.elements()) {
        property_failed("tensor_values returned a different number of values than elements()");
      }
    } catch (const dsaf::Error&) {
    }
    const std::string suffix = ".weight";
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      try {
        dsaf::fixtures::weight_values(group, name.substr(0, name.size() - suffix.size()));
      } catch (const dsaf::Error&) {
      }
    }
  }
}

}  // namespace detail

inline void check_accepted_fixture(const dsaf::fixtures::Fixture& fixture, const ScratchFile& copy) {
  try {
    dsaf::fixtures::validate_fixture(fixture, "fuzz.h5");
  } catch (const dsaf::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    property_failed("open_fixture returned a fixture that validate_fixture rejects");
  }
  const std::string description = dsaf::fixtures::describe_fixture(fixture);
  for (const auto& [index, layer] : fixture.layers) {
    detail::touch_group(layer.indexer);
    try {
      dsaf::fixtures::indexer_weights(fixture, index);
    } catch (const dsaf::Error&) {
    }
  }
  for (const auto& [index, capture] : fixture.activations) {
    detail::touch_group(capture.tensors);
    try {
      capture.tokens();
    } catch (const dsaf::Error&) {
    }
  }
  try {
    dsaf::fixtures::write_fixture(fixture, copy.path());
    if (dsaf::fixtures::describe_fixture(dsaf::fixtures::open_fixture(copy.path())) != description) {
      property_failed("a fixture written back reads with a different description");
    }
  } catch (const dsaf::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    property_failed("an accepted fixture cannot be written and read back");
  }
}

}  // namespace dsaf::fuzz
