// File: study_device_options.cc — `--device gpu` of the studies (study_device_options.h).
#include "cli/study_device_options.h"

#include <cstdio>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "oracle/results_io.h"
#include "reference/error.h"
#if defined(DSAF_HAVE_DEVICE)
#include "cli/kernel_open.h"  // --kernel
#endif

namespace dsaf::cli {

void add_study_device_options(CLI::App* cmd, StudyDeviceOptions& options) {
  cmd->add_option("--device", options.device,
                  "cpu (the reference) or gpu: keys, queries, logits and top-K from --kernel, the reference "
                  "rechecking a sample (docs/device-studies.md)");
  cmd->add_option("--kernel", options.kernel,
                  "with --device gpu: builtin, builtin-fast (tensor-core logits) or a plug-in library, as verify's");
  cmd->add_option("--check-rows", options.check_rows,
                  "with --device gpu: query rows (sweep) or needle cases the reference rechecks per unit and recipe")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--check-keys", options.check_keys,
                  "with --device gpu: cache slots the reference rechecks per unit and recipe")
      ->check(CLI::Range(0, 1 << 24));
}

OpenStudyDevice::OpenStudyDevice(const StudyDeviceOptions& options, const CLI::App& cmd)
    : options_(options), start_(std::chrono::steady_clock::now()) {
  if (options.device != "cpu" && options.device != "gpu") {
    throw Error(ErrorKind::kUsage, "--device '" + options.device + "': cpu or gpu");
  }
  if (options.device == "cpu") {
    for (const char* flag : {"--kernel", "--check-rows", "--check-keys"}) {
      if (cmd.count(flag) > 0) throw Error(ErrorKind::kUsage, std::string(flag) + " needs --device gpu");
    }
    return;
  }
#if defined(DSAF_HAVE_DEVICE)
  kernel_ = open_kernel_isolated(options.kernel);
  fallback_ = dev::open_kernel("builtin");
  kernel_->set_warm_timing(true);  // stage times at speed (oracle/study_device.cc, timed)
  fallback_->set_warm_timing(true);
#else
  throw Error(ErrorKind::kEnvironment, "--device gpu needs the device build (no CUDA compiler at build time)");
#endif
}

oracle::StudyDevice OpenStudyDevice::device() {
  oracle::StudyDevice d;
  d.kernel = kernel_.get();
  d.fallback = fallback_.get();
  d.check_rows = options_.check_rows;
  d.check_keys = options_.check_keys;
  d.timings = kernel_ ? &timings_ : nullptr;
  return d;
}

void OpenStudyDevice::print_plan(const nlohmann::json& device_entry) const {
  if (!kernel_) return;
  fmt::print("device: kernel {}; the reference rechecks {} rows or cases and {} cache slots per unit and recipe\n",
             kernel_->name(), options_.check_rows, options_.check_keys);
  for (const auto& [recipe, s] : device_entry.at("stages").items()) {
    fmt::print("  {}: keys {}, queries {}, logits {} ({}), top-K {} ({})\n", recipe, s.at("keys").get<std::string>(),
               s.at("queries").get<std::string>(), s.at("logits").get<std::string>(),
               s.at("logits_contract").get<std::string>(), s.at("topk").get<std::string>(),
               s.at("topk_contract").get<std::string>());
  }
  std::fflush(stdout);
}

void OpenStudyDevice::report(const std::string& out_dir, const std::string& suffix) const {
  if (!kernel_) return;
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  oracle::Roofline roofline;
#if defined(DSAF_HAVE_DEVICE)
  roofline.copy_gbps = dev::copy_bandwidth_gbps();
  const dev::ComputePeaks peaks = dev::compute_peaks();
  roofline.tensor_fp8_tflops = peaks.tensor_fp8_tflops;
  roofline.tensor_bf16_tflops = peaks.tensor_bf16_tflops;
  roofline.fp32_tflops = peaks.fp32_tflops;
  const dev::GpuInfo gpu = dev::query_gpu();
#else
  const dev::GpuInfo gpu;
#endif
  fmt::print("\n{}study wall time {:.1f} s on {} (kernel {})\n", timings_.text(roofline), wall_s, gpu.name,
             kernel_->name());
  if (out_dir.empty()) return;
  nlohmann::json j = timings_.to_json(roofline);
  j["gpu"] = gpu.name;
  j["kernel"] = kernel_->name();
  j["wall_s"] = wall_s;
  const std::string name = "device-timing" + suffix + ".json";
  oracle::write_text_file(std::filesystem::path(out_dir) / name, j.dump(2) + "\n");
  fmt::print("wrote {}/{}\n", out_dir, name);
}

}  // namespace dsaf::cli
