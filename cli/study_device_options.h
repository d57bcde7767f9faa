// File: study_device_options.h
// `sweep|needle --device gpu` (oracle/study_device.h, docs/device-studies.md): the
// options, the kernels they open, and the timing report after the study.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "device/api.h"
#include "oracle/study_device.h"

namespace dsaf::cli {

struct StudyDeviceOptions {
  std::string device = "cpu";     // cpu | gpu
  std::string kernel = "builtin";  // as verify's --kernel: builtin, builtin-fast, or a plug-in path
  int check_rows = 2;
  int check_keys = 256;
};

void add_study_device_options(CLI::App* cmd, StudyDeviceOptions& options);

// The kernels of a device study and its timings; nothing on the CPU.
class OpenStudyDevice {
 public:
  // Opens the kernel and ours (the fallback) for --device gpu. Throws dsaf::Error(kUsage)
  // for a device that is not cpu or gpu, for --kernel or --check-* without --device gpu,
  // and (kEnvironment) without the device build or a GPU.
  OpenStudyDevice(const StudyDeviceOptions& options, const CLI::App& cmd);
  bool on_gpu() const { return kernel_ != nullptr; }
  oracle::StudyDevice device();
  // Before the study: which kernel runs each stage of each recipe (the layout's "device"
  // entry, oracle/study_device.h describe_device).
  void print_plan(const nlohmann::json& device_entry) const;
  // After the study: the device time per stage with its fraction of the copy bandwidth,
  // the study's wall time; written as JSON to `out_dir`/device-timing.json (or
  // device-timing.shard-I-of-N.json, `suffix`) when out_dir is set.
  void report(const std::string& out_dir, const std::string& suffix) const;

 private:
  StudyDeviceOptions options_;
  std::unique_ptr<dev::KernelUnderTest> kernel_, fallback_;
  oracle::StudyTimings timings_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace dsaf::cli
