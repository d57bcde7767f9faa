// File: kernel_open.cc — open_kernel_isolated (kernel_open.h).
#include "cli/kernel_open.h"

#include "fixtures/untrusted.h"

namespace dsaf::cli {

std::unique_ptr<dev::KernelUnderTest> open_kernel_isolated(const std::string& spec) {
  fixtures::ChildStep what;
  what.timeout_seconds = fixtures::timeout_seconds_from_environment("DSAF_PLUGIN_TIMEOUT_S", 60);
  what.hung = "--kernel '" + spec + "': loading the plug-in did not finish within " +
              std::to_string(what.timeout_seconds) + " s (its static constructors or dsaf_kernel_get hang)";
  what.crashed = [&spec](int signal) {
    return "--kernel '" + spec + "': the plug-in crashed while loading (signal " + std::to_string(signal) +
           ", in its static constructors or dsaf_kernel_get)";
  };
  what.failed = "--kernel '" + spec + "': the plug-in failed while loading";
  fixtures::run_in_child([&spec] { dev::probe_kernel(spec); }, what);
  return dev::open_kernel(spec);
}

}  // namespace dsaf::cli
