// File: verify_command.cc — `dsa-fidelity verify` (verify_command.h).
#include "cli/verify_command.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/arguments.h"
#include "fixtures/cache_capture.h"
#include "reference/numeric/minifloat.h"
#include "oracle/results_io.h"
#include "oracle/topk_verdict.h"
#include "oracle/verify.h"
#include "reference/error.h"
#if defined(DSAF_HAVE_DEVICE)
#include "cli/kernel_open.h"  // --kernel
#endif

namespace dsaf::cli {
namespace {

#if defined(DSAF_HAVE_DEVICE)
// A verify key batch and the kernel's bytes as a cache capture: sequences with page tables,
// the RoPE table the kernel was given, the cache in the layout of the recipe's format.
fixtures::CacheCapture capture_of(const oracle::SavedKeyBatch& saved, const std::string& kernel_name,
                                  const std::string& kernel_spec, const std::string& recipe, uint64_t seed) {
  const dev::HostKeyBatch& b = saved.batch;
  fixtures::CacheCapture c;
  c.engine = "dsa-fidelity verify (its random batch)";
  c.kernel = kernel_name + " (--kernel " + kernel_spec + ")";
  c.generator = "dsa-fidelity verify --save-capture";
  c.recipe = recipe;
  c.synthetic = true;
  c.synthetic_label = "verify's key batch " + std::to_string(saved.index) + ", seed " + std::to_string(seed) +
                      (saved.failed ? ", the first that failed" : "");
  c.k_dtype = b.bf16 ? fixtures::TensorDtype::kBf16 : fixtures::TensorDtype::kF32;
  if (b.bf16) {
    for (uint16_t bits : b.input_bf16) c.k.push_back(ref::decode_bf16(bits));
  } else {
    c.k = b.input_f32;
  }
  c.norm_weight = b.norm_weight;
  c.norm_bias = b.norm_bias;
  c.positions = b.positions;
  c.seq = b.seq;
  c.page_tables = b.page_tables;
  c.page_table_stride = b.page_table_stride;
  c.rope_cos = b.rope_cos;
  c.rope_sin = b.rope_sin;
  c.page_size = b.page_size;
  c.format = b.recipe.key_quant.format == ref::StorageFormat::kFp4SimulatedBf16 ? ref::StorageFormat::kBf16
                                                                                 : b.recipe.key_quant.format;
  c.cache = saved.kernel_cache;
  return c;
}
#endif

}  // namespace

CLI::App* add_verify_command(CLI::App& app, VerifyOptions& o) {
  auto* verify = app.add_subcommand("verify", "run a kernel on random tensors and page layouts; compare bytes with the reference");
  verify->add_option("--recipe", o.recipe, "recipe the kernel implements")->required()->check(kNotEmpty);
  verify->add_option("--recipe-file", o.recipe_file, "JSON file with more recipes")->check(kNotEmpty);
  verify->add_option("--kernel", o.kernel,
                     "builtin (exact-order logits) or builtin-fast (tensor-core logits: fp8 or bf16 cache), each with "
                     "optional schedule knobs :1/2/4/8 (lanes per head), :grid1 (the key kernel in one block), "
                     ":batch-order/:tile-order/:hand-out (tile walk; default hand-out), :by-index (top-K positions "
                     "ascending, set contract); or a plug-in library "
                     "(device/kernel_abi.h, ABI version 2 or 1)");
  verify->add_option("--cases", o.cases, "key tokens to check (at least)");
  verify->add_option("--seed", o.seed, "random seed")->check(kUnsigned);
  verify->add_option("--topk-contract", o.topk_contract,
                     "check top-K under this contract instead of the kernel's: ordered | set | set-ties");
  verify->add_option("--json", o.json, "write every verdict, the coverage and the reproduce command as JSON")
      ->check(kNotEmpty);
  verify->add_option("--save-capture", o.save_capture,
                     "write the first failing key batch (else the first) and the kernel's cache bytes as a cache "
                     "capture (fixtures/SCHEMA.md §10) that `compare` checks without a GPU")
      ->check(kNotEmpty);
  return verify;
}

int run_verify_command(const VerifyOptions& o, const std::string& command_line, int64_t max_memory) {
  if (o.cases < 1) throw Error(ErrorKind::kUsage, "--cases must be >= 1");
  if (!o.json.empty()) check_output_file("--json", o.json, "");
  if (!o.save_capture.empty()) check_output_file("--save-capture", o.save_capture, "");
  const auto chosen = resolve_recipes("--recipe", o.recipe, o.recipe_file);
  if (chosen.size() != 1) throw Error(ErrorKind::kUsage, "--recipe takes one recipe");
  oracle::VerifyConfig config;
  config.recipe = chosen[0];
  config.min_key_tokens = o.cases;
  config.seed = o.seed;
  if (!o.topk_contract.empty()) config.topk_contract = oracle::parse_topk_contract(o.topk_contract);
  config.keep_key_batch = !o.save_capture.empty();
  const int64_t planned = oracle::verify_peak_bytes(config);
  require_memory("verify", planned, max_memory,
                 "verify's query batch of " + std::to_string(config.query_tokens) + " tokens x " +
                     std::to_string(config.num_heads) + " heads needs it; --cases does not change it");
#if defined(DSAF_HAVE_DEVICE)
  const auto kernel = open_kernel_isolated(o.kernel);
  fmt::print("verify: {} against recipe {} (seed {}); memory: about {} planned (--max-memory {})\n", kernel->name(),
             config.recipe.name, o.seed, size_text(planned), size_text(max_memory));
  std::fflush(stdout);
  StagedProgress progress("verify");
  config.progress = [&progress](const std::string& stage, int64_t done, int64_t total) { progress(stage, done, total); };
  const oracle::VerifyReport report = oracle::run_verify(*kernel, config);
  progress.finish();
  fmt::print("{}", report.text);
  std::string reproduce = "dsa-fidelity verify --kernel " + o.kernel + " --recipe " + config.recipe.name +
                          " --cases " + std::to_string(o.cases) + " --seed " + std::to_string(o.seed);
  if (!o.recipe_file.empty()) reproduce += " --recipe-file " + o.recipe_file;
  if (!o.topk_contract.empty()) reproduce += " --topk-contract " + o.topk_contract;
  if (!o.json.empty()) {
    nlohmann::json j = report.json;
    j["kernel"] = kernel->name();
    j["recipe"] = config.recipe.name;
    j["seed"] = o.seed;
    j["pass"] = report.pass && report.stages_run > 0;
    j["stages_run"] = report.stages_run;
    j["command"] = command_line;
    j["reproduce"] = reproduce;
    oracle::write_text_file(o.json, oracle::json_file_text(j));
  }
  if (!o.save_capture.empty()) {
    if (!report.saved) throw Error(ErrorKind::kBadInput, "--save-capture: the kernel ran no key batch");
    fixtures::write_cache_capture(capture_of(*report.saved, kernel->name(), o.kernel, config.recipe.name, o.seed),
                                  o.save_capture);
    fmt::print("wrote {}: key batch {} ({}), {} tokens\n", o.save_capture, report.saved->index,
               report.saved->failed ? "the first that failed" : "passed", report.saved->batch.positions.size());
  }
  if (report.stages_run == 0) {
    throw Error(ErrorKind::kBadInput, kernel->name() + " provides none of the stages recipe " + config.recipe.name +
                                          " needs: nothing was verified");
  }
  if (!report.pass) {
    fmt::print("FAILED. Reproduce: {}\n", reproduce);
    return 1;
  }
  fmt::print("PASSED\n");
  return 0;
#else
  (void)command_line;
  throw Error(ErrorKind::kEnvironment, "verify needs the device build (no CUDA compiler at build time)");
#endif
}

}  // namespace dsaf::cli
