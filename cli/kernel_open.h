// File: kernel_open.h
// Opening the kernel of `--kernel` (verify, sweep/needle --device gpu) so that a plug-in
// cannot take the CLI down while it loads: dlopen runs its static constructors and then
// its dsaf_kernel_get in this process, and either may crash (a missing CUDA symbol, an
// abort in an initialiser) or never return. So dev::probe_kernel runs first in a child
// process (fixtures/untrusted.h run_in_child); a crash or a hang there is bad input naming
// the library, and only a kernel that loaded cleanly there is opened here. Defined only in
// CUDA builds.
#pragma once

#include <memory>
#include <string>

#include "device/api.h"

namespace dsaf::cli {

// dev::open_kernel(spec), after dev::probe_kernel(spec) finished cleanly in a child process
// within 60 s (DSAF_PLUGIN_TIMEOUT_S when set, for tests).
// Throws as open_kernel does, and dsaf::Error(kBadInput) when loading crashed or hung there.
// Call it before this process initialises CUDA.
std::unique_ptr<dev::KernelUnderTest> open_kernel_isolated(const std::string& spec);

}  // namespace dsaf::cli
