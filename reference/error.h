// File: error.h
// The one exception type of the project. Library code never exits; it throws
// dsaf::Error with a kind, and the CLI maps kinds to exit codes (docs/design.md):
// kBadInput / kUsage / kEnvironment / kInternal -> 2; kMismatch -> 1: a kernel under test
// disagreed with the reference inside a study that cannot go on without it (the device
// mode of sweep and needle stops there). Verify's failures are results, not errors.
#pragma once

#include <stdexcept>
#include <string>

namespace dsaf {

enum class ErrorKind { kBadInput, kUsage, kEnvironment, kInternal, kMismatch };

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message)
      : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

[[noreturn]] inline void throw_bad_input(const std::string& message) {
  throw Error(ErrorKind::kBadInput, message);
}

}  // namespace dsaf
