// Exact-order paged decode logits (device/paged_logits.cu) against ref::index_scores,
// bit for bit, on caches and queries the reference's own key and query paths produce:
// random ragged batches (1-4 sequences; decode with 1-4 queries each, or causal prefill
// rows at random positions), shuffled page tables with gaps,
// every page size 1..256, head counts 8..64, and every preset's formats and accumulation.
// On the same batches, the tensor-core kernel (device/paged_logits_mma.cu) against the
// bound derived in its header (oracle/logits_bound.h), on every score, for every preset it
// takes (fp8 cache with fp8 queries, bf16 cache with fp8 or bf16 queries; fp32
// accumulation; 16-64 heads), at one row a block and (64 heads) at four rows a block.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>

#include "device/api.h"
#include "oracle/logits_bound.h"
#include "reference/paged_cache.h"
#include "reference/pipeline.h"
#include "reference/quantize.h"
#include "reference/rope.h"
#include "reference/score.h"
#include "tests/device/gpu_test_support.h"

namespace dsaf::test {
namespace {

using ref::kHeadDim;

const std::vector<std::string> kPresets = {"dsv32-ref", "dsv32-bf16", "sglang-v32-fused", "vllm-v32",
                                           "dsv4-ref", "sglang-v4-fp8", "sglang-v4-bf16", "sglang-v4-fp4"};

uint32_t bits_of(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

bool is_bf16_storage(ref::StorageFormat f) {
  return f == ref::StorageFormat::kBf16 || f == ref::StorageFormat::kFp4SimulatedBf16;
}

// Whether launch_paged_logits_fast takes the recipe (its launcher's checks).
bool fast_kernel_takes(const ref::Recipe& r) {
  const ref::StorageFormat k = r.key_quant.format, q = r.query_quant.format;
  if (r.score != ref::ScoreAccum::kFp32) return false;
  if (k == ref::StorageFormat::kFp8E4m3fn) return q == ref::StorageFormat::kFp8E4m3fn;
  return is_bf16_storage(k) && (q == ref::StorageFormat::kFp8E4m3fn || is_bf16_storage(q));
}

class PagedLogitsGpu : public ::testing::TestWithParam<std::string> {};

TEST_P(PagedLogitsGpu, ExactOrderKernelEqualsReferenceBitForBit) {
  DSAF_REQUIRE_GPU();
  const ref::Recipe& recipe = ref::preset(GetParam());
  std::mt19937 rng(std::hash<std::string>{}(recipe.name) + 5);
  const int kMaxLen = 700;
  const ref::RopeTable rope(recipe.rope.table, kMaxLen);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> norm_weight(kHeadDim), norm_bias(kHeadDim);
  for (int i = 0; i < kHeadDim; ++i) norm_weight[i] = 1.0f + 0.2f * normal(rng), norm_bias[i] = 0.1f * normal(rng);
  const ref::NormParams norm{norm_weight.data(), norm_bias.data()};
  const int page_sizes[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  const int head_counts[] = {8, 16, 32, 64};

  int64_t rows_checked = 0, scores_checked = 0, masked_checked = 0, nan_scores = 0;
  const bool fast = fast_kernel_takes(recipe);
  int64_t fast_checked = 0, fast_equal = 0, four_row_checked = 0, four_row_equal = 0, unaligned_checked = 0, unaligned_equal = 0;
  int64_t routed_checked = 0, routed_equal = 0;
  double worst_fraction = 0.0;
  for (int batch_index = 0; rows_checked < 1300; ++batch_index) {
    const int page_size = page_sizes[batch_index % 9];
    const int H = head_counts[(batch_index / 9) % 4];
    const int next_n = std::uniform_int_distribution<int>(1, 4)(rng);
    PagedBatch b;
    do {  // every query sees its own key: sequences at least next_n long
      b = random_batch(rng, page_size, 4, kMaxLen);
    } while (*std::min_element(b.seq_lens.begin(), b.seq_lens.end()) < next_n);
    const int batch = static_cast<int>(b.seq_lens.size());
    // Rows longer than the longest context: the tail is masked for every query.
    const int64_t max_context =
        *std::max_element(b.seq_lens.begin(), b.seq_lens.end()) + std::uniform_int_distribution<int>(0, 130)(rng);

    // Keys: the reference key path into the paged cache and, per sequence, a KeyMatrix.
    const ref::PagedCacheLayout layout(recipe.key_quant.format, page_size);
    std::vector<uint8_t> cache(b.num_pages * layout.page_bytes(), 0);
    std::vector<std::vector<ref::StoredHead>> keys(batch);
    for (int s = 0; s < batch; ++s) keys[s].resize(b.seq_lens[s]);
    std::vector<float> row(kHeadDim);
    for (size_t t = 0; t < b.token_seq.size(); ++t) {
      random_row(rng, row.data());
      const int s = b.token_seq[t];
      const int pos = b.token_pos[t];
      keys[s][pos] = ref::run_key_path(recipe, row.data(), pos, norm, rope);
      layout.store(cache, layout.locate(table_of(b, s), pos, b.num_pages), keys[s][pos]);
    }
    std::vector<ref::KeyMatrix> matrices(batch);
    for (int s = 0; s < batch; ++s) {
      for (const ref::StoredHead& k : keys[s]) matrices[s].append(k);
    }

    // Query rows: decode (odd batches: next_n queries at the end of every sequence, the
    // api.h decode_rows layout) or ragged causal prefill (even batches: a random number of
    // random positions per sequence, each seeing keys [0, position]).
    const bool prefill = batch_index % 2 == 0;
    dev::LogitRows layout_rows;
    if (prefill) {
      for (int s = 0; s < batch; ++s) {
        const int count = std::uniform_int_distribution<int>(0, 6)(rng);
        for (int i = 0; i < count; ++i) {
          layout_rows.seq.push_back(s);
          layout_rows.valid.push_back(1 + std::uniform_int_distribution<int>(0, static_cast<int>(b.seq_lens[s]) - 1)(rng));
        }
      }
      if (layout_rows.seq.empty()) layout_rows.seq.push_back(0), layout_rows.valid.push_back(1);
    } else {
      layout_rows = dev::decode_rows(std::vector<int32_t>(b.seq_lens.begin(), b.seq_lens.end()), next_n);
    }
    const int rows = static_cast<int>(layout_rows.seq.size());
    const int qvb = ref::value_bytes_per_head(recipe.query_quant.format);
    const int qsb = ref::scale_bytes_per_head(recipe.query_quant.format);
    std::vector<uint8_t> q_values(static_cast<size_t>(rows) * H * qvb), q_scales(static_cast<size_t>(rows) * H * std::max(qsb, 1));
    std::vector<float> weights(static_cast<size_t>(rows) * H);
    std::vector<std::vector<double>> expected(rows);
    std::vector<ref::QueryOutput> queries(rows);
    std::vector<float> q_in(static_cast<size_t>(H) * kHeadDim), wproj(H);
    for (int r = 0; r < rows; ++r) {
      const int s = layout_rows.seq[r];
      const int64_t position = layout_rows.valid[r] - 1;
      for (int h = 0; h < H; ++h) random_row(rng, q_in.data() + h * kHeadDim);
      for (float& w : wproj) w = normal(rng);
      const ref::QueryOutput q = ref::run_query_path(recipe, q_in.data(), H, wproj.data(), static_cast<int>(position), rope);
      for (int h = 0; h < H; ++h) {
        std::copy(q.heads[h].value_bytes.begin(), q.heads[h].value_bytes.end(), q_values.begin() + (static_cast<size_t>(r) * H + h) * qvb);
        std::copy(q.heads[h].scale_bytes.begin(), q.heads[h].scale_bytes.end(), q_scales.begin() + (static_cast<size_t>(r) * H + h) * qsb);
        weights[static_cast<size_t>(r) * H + h] = static_cast<float>(q.weights[h]);
      }
      expected[r] = ref::index_scores(ref::prepare_query(q.heads, q.weights), matrices[s], position + 1, recipe.score);
      queries[r] = q;
    }

    // Device
    DeviceBuffer<uint8_t> d_cache(cache), d_qv(q_values), d_qs(q_scales);
    DeviceBuffer<float> d_w(weights), d_logits(static_cast<size_t>(rows) * max_context);
    DeviceBuffer<int32_t> d_row_seq(layout_rows.seq), d_row_valid(layout_rows.valid), d_tables(b.page_tables);
    dev::PagedLogitsArgs a;
    a.q_values = d_qv.get();
    a.q_scales = d_qs.get();
    a.weights = d_w.get();
    a.q_format = recipe.query_quant.format;
    a.k_format = recipe.key_quant.format;
    a.accum = recipe.score;
    a.rows = rows;
    a.num_heads = H;
    a.row_seq = d_row_seq.get();
    a.row_valid = d_row_valid.get();
    a.cache = d_cache.get();
    a.page_size = page_size;
    a.page_tables = d_tables.get();
    a.page_table_stride = b.pages_per_seq;
    a.max_context = max_context;
    a.logits = d_logits.get();
    // Every launch starts from all-ones bytes (a NaN): a logit a kernel leaves unwritten
    // fails the checks below instead of passing with the previous kernel's value.
    const auto poison_logits = [&] {
      ASSERT_EQ(cudaMemset(d_logits.get(), 0xFF, static_cast<size_t>(rows) * max_context * sizeof(float)), cudaSuccess);
    };
    poison_logits();
    dev::launch_paged_logits(a);
    const std::vector<float> logits = d_logits.download();

    // The tensor-core kernel one row a block and, at 64 heads, four rows a block (the
    // shared_row_run hint; this batch's rows of one sequence come in runs of 0-6 or of
    // next_n, so blocks of rows of several sequences take their per-sequence passes).
    std::vector<float> one_row_logits, four_row_logits;
    for (const int row_run : {1, 4}) {
      if (!fast || H < 16 || (row_run == 4 && H != 64)) continue;
      a.shared_row_run = row_run;
      poison_logits();
      dev::launch_paged_logits_fast(a);
      const std::vector<float> fast_logits = d_logits.download();
      for (int r = 0; r < rows; ++r) {
        const int seq = layout_rows.seq[r];
        const ref::QueryOutput& q = queries[r];
        const int64_t valid = static_cast<int64_t>(expected[r].size());
        const std::vector<double> exact =
            ref::index_scores(ref::prepare_query(q.heads, q.weights), matrices[seq], valid, ref::ScoreAccum::kExact);
        for (int64_t s = 0; s < max_context; ++s) {
          const size_t at = static_cast<size_t>(r) * max_context + s;
          const float got = fast_logits[at];
          if (s >= valid) {
            ASSERT_TRUE(std::isinf(got) && got < 0)
                << "fast kernel (row run hint " << row_run << "): masked key " << s << " of row " << r << " is " << got;
            continue;
          }
          const ref::StoredHead& key = keys[seq][s];
          const double bound = oracle::bounded_logit_error(recipe.key_quant.format, H, key.dot_scale,
                                                           oracle::weighted_magnitude(q, key.dot_values.data()));
          const double error = std::fabs(static_cast<double>(got) - exact[s]);
          ASSERT_LE(error, bound) << recipe.name << " fast kernel (row run hint " << row_run << "), batch " << batch_index << " row " << r
                                  << " key " << s << ": " << got << " vs exact " << exact[s];
          if (bound > 0) worst_fraction = std::max(worst_fraction, error / bound);
          if (row_run == 1) {
            fast_equal += bits_of(got) == bits_of(logits[at]);
            ++fast_checked;
          } else {
            four_row_equal += bits_of(got) == bits_of(one_row_logits[at]);
            ++four_row_checked;
          }
        }
      }
      (row_run == 1 ? one_row_logits : four_row_logits) = fast_logits;
    }
    // Launches `b` fast from poisoned logits and counts its logits bit-equal to the four-row
    // launch's (a logit left unwritten stays a NaN and counts as differing).
    const auto count_equal_to_four_rows = [&](const dev::PagedLogitsArgs& b, int64_t& equal, int64_t& checked) {
      poison_logits();
      dev::launch_paged_logits_fast(b);
      const std::vector<float> got = d_logits.download();
      for (size_t i = 0; i < got.size(); ++i) equal += bits_of(got[i]) == bits_of(four_row_logits[i]);
      checked += static_cast<int64_t>(got.size());
    };
    if (!four_row_logits.empty()) {
      // Four rows a block again, from query values 4 bytes past a 16-byte boundary (a copy
      // one word into a cudaMalloc'd buffer): the block's threads load the query tile
      // instead of the TMA box (fp8), with 4-byte words (bf16); the same bits.
      std::vector<uint8_t> shifted(4 + q_values.size(), 0x5A);
      std::copy(q_values.begin(), q_values.end(), shifted.begin() + 4);
      const DeviceBuffer<uint8_t> d_shifted(shifted);
      dev::PagedLogitsArgs unaligned = a;
      unaligned.q_values = d_shifted.get() + 4;
      unaligned.shared_row_run = 4;
      count_equal_to_four_rows(unaligned, unaligned_equal, unaligned_checked);
      // The hint unknown (the plug-in ABI's case): the launcher picks on the device and
      // launches both instances, one of which leaves at once; the same bits.
      dev::PagedLogitsArgs routed = a;
      routed.shared_row_run = 0;
      count_equal_to_four_rows(routed, routed_equal, routed_checked);
    }

    for (int r = 0; r < rows; ++r) {
      const int64_t valid = static_cast<int64_t>(expected[r].size());
      for (int64_t s = 0; s < max_context; ++s) {
        const float got = logits[static_cast<size_t>(r) * max_context + s];
        if (s >= valid) {
          ASSERT_TRUE(std::isinf(got) && got < 0) << "masked key " << s << " of row " << r << " is " << got;
          ++masked_checked;
          continue;
        }
        const float want = static_cast<float>(expected[r][s]);
        if (std::isnan(want) && std::isnan(got)) {  // x86 and the GPU make different default NaNs
          ++nan_scores;
          continue;
        }
        ASSERT_EQ(bits_of(want), bits_of(got))
            << recipe.name << ": batch " << batch_index << " (page size " << page_size << ", H " << H << ", "
            << (prefill ? "prefill" : "decode") << "), row " << r << ", key " << s << ": device " << got << ", reference " << want;
        ++scores_checked;
      }
      ++rows_checked;
    }
  }
  if (fast) EXPECT_GT(fast_checked, 0) << recipe.name << ": the tensor-core kernel was never checked";
  if (fast) EXPECT_GT(four_row_checked, 0) << recipe.name << ": four rows a block were never checked";
  // Four rows a block run each column's dot product through the same instruction as one row
  // (N = 256 instead of 64) and each row's epilogue chain in the same order: the same bits.
  EXPECT_EQ(four_row_equal, four_row_checked) << recipe.name << ": four rows a block differ from one row a block";
  if (fast) EXPECT_GT(unaligned_checked, 0) << recipe.name << ": unaligned query values were never checked";
  EXPECT_EQ(unaligned_equal, unaligned_checked) << recipe.name << ": unaligned query values change four rows a block's logits";
  if (fast) EXPECT_GT(routed_checked, 0) << recipe.name << ": a launch routed on the device was never checked";
  EXPECT_EQ(routed_equal, routed_checked) << recipe.name << ": the routed launch's logits differ from the hinted one's";
  if (fast_checked > 0) {
    std::printf("[ %s ] fast (%s tensor-core) paged logits: %lld scores within the derived bound; largest error "
                "%.3g of its bound, %lld scores bit-equal to the exact-order kernel\n",
                recipe.name.c_str(), recipe.key_quant.format == ref::StorageFormat::kFp8E4m3fn ? "fp8" : "bf16",
                static_cast<long long>(fast_checked), worst_fraction, static_cast<long long>(fast_equal));
    std::printf("[ %s ] four rows a block: %lld scores within the bound, %lld bit-equal to one row a block; "
                "%lld of %lld logits from unaligned query values bit-equal; %lld of %lld routed on the device\n",
                recipe.name.c_str(), static_cast<long long>(four_row_checked), static_cast<long long>(four_row_equal),
                static_cast<long long>(unaligned_equal), static_cast<long long>(unaligned_checked),
                static_cast<long long>(routed_equal), static_cast<long long>(routed_checked));
  }
  std::printf("[ %s ] paged logits: %lld query rows, %lld scores bit-equal, %lld masked keys -inf, %lld NaN scores\n",
              recipe.name.c_str(), static_cast<long long>(rows_checked), static_cast<long long>(scores_checked),
              static_cast<long long>(masked_checked), static_cast<long long>(nan_scores));
}

// Both kernels are deterministic by construction (fixed orders, no atomics): 20 reruns of
// a decode batch (8 sequences x 2 queries, 64 heads, 20K context, fp8 queries; fp8 and
// bf16 caches) give the same bits every time, the tensor-core kernel at one and at four
// rows a block. DSAF_DETERMINISM_LAUNCHES (at least 2) sets the launches a kernel: the
// sanitizers take 2 (racecheck ran 20 past 240 s, the test alone takes ~1.2 s).
TEST(PagedLogitsDeterminism, TwentyRerunsAreBitwiseIdentical) {
  DSAF_REQUIRE_GPU();
  const char* launches_env = std::getenv("DSAF_DETERMINISM_LAUNCHES");
  const int launches = launches_env != nullptr ? std::max(2, std::atoi(launches_env)) : 20;
  std::mt19937 rng(11);
  const int kSeqs = 8, kNextN = 2, kHeads = 64, kPage = 64;
  const int64_t kContext = 20000, kPagesPerSeq = (kContext + kPage - 1) / kPage;
  std::uniform_int_distribution<int> byte(0, 255);
  const auto fp8_code = [&] { const int c = byte(rng); return static_cast<uint8_t>((c & 0x7F) == 0x7F ? c - 1 : c); };
  std::vector<int32_t> tables(kSeqs * kPagesPerSeq);
  std::iota(tables.begin(), tables.end(), 0);
  std::shuffle(tables.begin(), tables.end(), rng);
  const dev::LogitRows rows = dev::decode_rows(std::vector<int32_t>(kSeqs, static_cast<int32_t>(kContext)), kNextN);
  std::vector<uint8_t> q(rows.seq.size() * kHeads * 128);
  for (uint8_t& c : q) c = fp8_code();
  std::vector<float> weights(rows.seq.size() * kHeads);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& w : weights) w = normal(rng);
  DeviceBuffer<uint8_t> d_q(q);
  DeviceBuffer<float> d_w(weights), d_logits(rows.seq.size() * kContext);
  DeviceBuffer<int32_t> d_tables(tables), d_seq(rows.seq), d_valid(rows.valid);
  for (const ref::StorageFormat format : {ref::StorageFormat::kFp8E4m3fn, ref::StorageFormat::kBf16}) {
    const bool fp8 = format == ref::StorageFormat::kFp8E4m3fn;
    const int token_bytes = fp8 ? 132 : 256;
    std::vector<uint8_t> cache(kSeqs * kPagesPerSeq * kPage * token_bytes);
    for (int64_t p = 0; p < kSeqs * kPagesPerSeq; ++p) {
      uint8_t* page = cache.data() + p * kPage * token_bytes;
      if (fp8) {
        for (int i = 0; i < kPage * 128; ++i) page[i] = fp8_code();
        for (int t = 0; t < kPage; ++t) {  // positive scales
          const float scale = 0.01f * (1 + t);
          std::memcpy(page + kPage * 128 + 4 * t, &scale, 4);
        }
      } else {  // bf16 values of either sign, magnitude 2^-3 .. 2
        for (int i = 0; i < kPage * 128; ++i) {
          const uint16_t v = static_cast<uint16_t>((byte(rng) & 0x80) << 8 | (0x3E00 + (byte(rng) << 1)));
          std::memcpy(page + 2 * i, &v, 2);
        }
      }
    }
    DeviceBuffer<uint8_t> d_cache(cache);
    dev::PagedLogitsArgs a;
    a.q_values = d_q.get();
    a.q_scales = d_q.get();
    a.weights = d_w.get();
    a.k_format = format;
    a.rows = static_cast<int>(rows.seq.size());
    a.num_heads = kHeads;
    a.row_seq = d_seq.get();
    a.row_valid = d_valid.get();
    a.cache = d_cache.get();
    a.page_size = kPage;
    a.page_tables = d_tables.get();
    a.page_table_stride = kPagesPerSeq;
    a.max_context = kContext;
    a.logits = d_logits.get();
    // Kernels: exact-order, tensor-core one row a block, tensor-core four rows a block
    // (the rows come in runs of next_n = 2, so every block takes two passes).
    for (const int kernel : {0, 1, 4}) {
      const bool fast = kernel > 0;
      a.shared_row_run = fast ? kernel : 1;
      std::vector<float> first;
      for (int launch = 0; launch < launches; ++launch) {
        fast ? dev::launch_paged_logits_fast(a) : dev::launch_paged_logits(a);
        const std::vector<float> got = d_logits.download();
        if (launch == 0) {
          first = got;
          continue;
        }
        ASSERT_EQ(0, std::memcmp(first.data(), got.data(), got.size() * 4))
            << (fp8 ? "fp8" : "bf16") << " cache, " << (fast ? "fast" : "exact-order") << " kernel (row run hint "
            << a.shared_row_run << "), launch " << launch << " differs from the first";
      }
    }
  }
}

// The exact-order kernel fuses q_d * k_d + acc into one fma only where the product is exact
// (paged_logits.cu). Here it must not: fp32 queries (24-bit significands) and bf16 keys and
// queries whose products overflow past 2^128 or fall below 2^-126 (huge, tiny and subnormal
// values), in warps that mix such keys with ordinary ones. The reference's separate
// multiply and add is checked bit for bit, and the host shows that fusing would have
// changed some scores, so a kernel that fused everywhere fails here.
TEST(PagedLogitsExactOrder, InexactProductsTakeTheSeparateMultiplyAndAdd) {
  DSAF_REQUIRE_GPU();
  std::mt19937 rng(29);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> coin(0, 3);
  const int kHeads = 16, kPage = 64, kKeys = 1000;
  const int64_t kPages = (kKeys + kPage - 1) / kPage;
  // A value of random sign and significand with exponent e.
  const auto with_exponent = [&](int e) { return std::ldexp(1.0f + std::fabs(normal(rng)) * 0.4f, e) * (coin(rng) & 1 ? 1 : -1); };
  const auto extreme = [&](float v, int big, int tiny) {
    const int c = coin(rng);
    return c == 0 ? with_exponent(big) : c == 1 ? with_exponent(tiny) : v;
  };
  int64_t scores_checked = 0, fusing_would_differ = 0;
  for (const ref::StorageFormat q_format : {ref::StorageFormat::kFp32, ref::StorageFormat::kBf16}) {
    ref::QuantSpec q_spec{}, k_spec{};
    q_spec.format = q_format;
    k_spec.format = ref::StorageFormat::kBf16;
    const bool fp32_q = q_format == ref::StorageFormat::kFp32;
    // Keys: every fourth token ordinary; the others hold huge (2^60 .. 2^79) and tiny values
    // (2^-100 .. 2^-133, bf16 subnormals included); with bf16 queries of up to 2^53 and down
    // to 2^-40 some of their products leave fp32's normal range (a few overflow: their
    // scores may be NaN, which both sides must give).
    const ref::PagedCacheLayout layout(k_spec.format, kPage);
    std::vector<uint8_t> cache(kPages * layout.page_bytes(), 0);
    std::vector<int32_t> table(kPages);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    ref::KeyMatrix keys;
    for (int t = 0; t < kKeys; ++t) {
      float x[kHeadDim];
      for (float& v : x) {
        v = normal(rng);
        if (t % 4 != 0) v = extreme(v, 60 + coin(rng) * 6, -100 - coin(rng) * 11);
      }
      const ref::StoredHead head = ref::store_head(x, k_spec);
      layout.store(cache, layout.locate(table, t, kPages), head);
      keys.append(head);
    }
    std::vector<ref::StoredHead> q_heads;
    std::vector<double> w;
    for (int h = 0; h < kHeads; ++h) {
      float x[kHeadDim];
      for (float& v : x) v = fp32_q ? normal(rng) * 3.0f : extreme(normal(rng), 40 + coin(rng) * 4, -40);
      q_heads.push_back(ref::store_head(x, q_spec));
      w.push_back(static_cast<float>(normal(rng)));
    }
    const ref::PreparedQuery query = ref::prepare_query(q_heads, w);
    const std::vector<double> expected = ref::index_scores(query, keys, kKeys, ref::ScoreAccum::kFp32);

    std::vector<uint8_t> q_values;
    std::vector<float> weights(w.begin(), w.end());
    for (const ref::StoredHead& h : q_heads) q_values.insert(q_values.end(), h.value_bytes.begin(), h.value_bytes.end());
    const std::vector<int32_t> row_seq = {0}, row_valid = {kKeys};
    DeviceBuffer<uint8_t> d_cache(cache), d_q(q_values);
    DeviceBuffer<float> d_w(weights), d_logits(kKeys);
    DeviceBuffer<int32_t> d_table(table), d_seq(row_seq), d_valid(row_valid);
    dev::PagedLogitsArgs a;
    a.q_values = d_q.get();
    a.q_scales = d_q.get();
    a.weights = d_w.get();
    a.q_format = q_format;
    a.k_format = k_spec.format;
    a.rows = 1;
    a.num_heads = kHeads;
    a.row_seq = d_seq.get();
    a.row_valid = d_valid.get();
    a.cache = d_cache.get();
    a.page_size = kPage;
    a.page_tables = d_table.get();
    a.page_table_stride = kPages;
    a.max_context = kKeys;
    a.logits = d_logits.get();
    dev::launch_paged_logits(a);
    const std::vector<float> logits = d_logits.download();
    for (int s = 0; s < kKeys; ++s) {
      if (std::isnan(logits[s]) && std::isnan(expected[s])) continue;
      ASSERT_EQ(bits_of(logits[s]), bits_of(static_cast<float>(expected[s])))
          << (fp32_q ? "fp32" : "bf16") << " queries, key " << s << ": " << logits[s] << " vs " << expected[s];
      ++scores_checked;
      // The same score with every product fused into an fma.
      float sum = 0.0f;
      for (int h = 0; h < kHeads; ++h) {
        float dot = 0.0f;
        for (int d = 0; d < kHeadDim; ++d) {
          dot = std::fma(static_cast<float>(q_heads[h].dot_values[d]), static_cast<float>(keys.dot_values[s * kHeadDim + d]), dot);
        }
        sum = sum + (dot > 0.0f ? dot : 0.0f) * weights[h];
      }
      fusing_would_differ += bits_of(sum) != bits_of(static_cast<float>(expected[s]));
    }
  }
  EXPECT_GT(scores_checked, kKeys);  // NaN pairs aside
  EXPECT_GT(fusing_would_differ, 100) << "the inputs do not tell fused from separate rounding";
}

// The hint our plug-in derives from row_seq: 4 when at least half of the aligned groups of
// four rows lie in one sequence (a study's or a prefill chunk's queries), 1 for decode.
TEST(PagedLogitsFast, TheRowRunHintComesFromAlignedGroupsOfOneSequence) {
  const auto hint = [](std::vector<int32_t> seq) { return dev::shared_row_run_of(seq.data(), static_cast<int>(seq.size())); };
  EXPECT_EQ(hint(std::vector<int32_t>(64, 0)), 4);
  EXPECT_EQ(hint({0, 0, 0, 0, 1, 1, 1, 1, 2}), 4);
  EXPECT_EQ(hint({0, 0, 0, 0, 1, 1, 2, 2}), 4);     // one group of two: half
  EXPECT_EQ(hint({0, 0, 1, 1, 2, 2, 3, 3}), 1);     // next_n = 2 decode
  EXPECT_EQ(hint({0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4}), 1);  // one of three
  EXPECT_EQ(hint({0, 0, 0}), 1);                    // no whole group
  const dev::LogitRows decode = dev::decode_rows(std::vector<int32_t>(32, 1000), 1);
  EXPECT_EQ(hint(decode.seq), 1);
}

// The device's choice for a launch without a hint (route_rows) is the host rule's, on
// random row layouts of 1 to 65,535 rows: runs of one sequence of 1..L rows (decode-like),
// of 4L rows broken by single rows (prefill chunks out of step with the groups), or of
// 4..L + 3 rows; about half of them pick four rows a block, some within a group of the
// rule's threshold.
TEST(PagedLogitsFast, TheDeviceRoutesRowsAsTheHostHintWould) {
  DSAF_REQUIRE_GPU();
  std::mt19937 rng(20261206);
  int fours = 0, ones = 0;
  for (int c = 0; c < 200; ++c) {
    const int rows = c == 0 ? 65535 : c == 1 ? 1 : 1 + static_cast<int>(rng() % (c % 10 == 0 ? 65535 : 300));
    const int longest = 1 + static_cast<int>(rng() % 8);
    std::vector<int32_t> seq;
    for (int32_t s = 0; static_cast<int>(seq.size()) < rows; ++s) {
      const int run = c % 3 == 0   ? 1 + static_cast<int>(rng() % longest)
                      : c % 3 == 1 ? (rng() % 4 != 0 ? 4 * longest : 1)
                                   : 4 + static_cast<int>(rng() % longest);
      for (int i = 0; i < run && static_cast<int>(seq.size()) < rows; ++i) seq.push_back(s);
    }
    const DeviceBuffer<int32_t> d_seq(seq);
    const int host = dev::shared_row_run_of(seq.data(), rows);
    ASSERT_EQ(dev::shared_row_run_on_device(d_seq.get(), rows), host) << "case " << c << ", " << rows << " rows";
    (host == 4 ? fours : ones) += 1;
  }
  EXPECT_GT(fours, 20);
  EXPECT_GT(ones, 20);
}

// The tensor-core kernel takes only what its operand types hold exactly; everything else is
// bad input, named in the message, before any CUDA call (no GPU needed).
TEST(PagedLogitsFast, RejectsFormatsItCannotMultiplyExactly) {
  using F = ref::StorageFormat;
  const struct {
    F k, q;
    const char* named;
  } rejected[] = {{F::kBf16, F::kFp32, "fp32"},     {F::kBf16, F::kFp4E2m1, "fp4 e2m1"},
                  {F::kFp8E4m3fn, F::kBf16, "bf16"}, {F::kFp8E4m3fn, F::kFp32, "fp32"},
                  {F::kFp4E2m1, F::kFp4E2m1, "fp4"}, {F::kFp32, F::kFp8E4m3fn, "fp32"}};
  for (const auto& c : rejected) {
    dev::PagedLogitsArgs a;
    a.k_format = c.k;
    a.q_format = c.q;
    a.rows = 1;
    a.max_context = 1;
    try {
      dev::launch_paged_logits_fast(a);
      ADD_FAILURE() << "accepted k " << static_cast<int>(c.k) << ", q " << static_cast<int>(c.q);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
      EXPECT_NE(std::string(e.what()).find(c.named), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("exact-order kernel"), std::string::npos) << e.what();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, PagedLogitsGpu, ::testing::ValuesIn(kPresets), [](const auto& info) {
  std::string name = info.param;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
});

}  // namespace
}  // namespace dsaf::test
