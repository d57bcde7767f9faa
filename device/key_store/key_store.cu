// File: key_store.cu — launch_key_store (api.h): the fused key path, norm -> RoPE ->
// Hadamard -> quantise -> paged store, in one launch. The store format and the lane-group
// width are template parameters of both kernels, and so is the recipe's pinned path
// (key_paths.cuh) when one serves it; the schedule (api.h KeyStoreSchedule) picks the
// width, grid and tile walk, none of which changes a byte. Where the time goes and what
// was tried: docs/key-path-speed.md.
#include <cuda_runtime.h>

#include <string>

#include "device/api.h"
#include "device/key_store/key_paths.cuh"
#include "device/key_store/persistent_kernel.cuh"
#include "device/key_store/producer_kernel.cuh"
#include "device/launch.h"

namespace dsaf::dev {

using key_kernel::kGenericKeyPath;
using key_kernel::kPinnedKeyPaths;

namespace {

// The pinned path serving a recipe (kGenericKeyPath if none), by index.
int pinned_path_of(const ref::RecipeFields& recipe) {
  int path = kGenericKeyPath;
  dispatch_format(recipe.key_quant.format, [&](auto format) {
    key_kernel::dispatch_key_path<decltype(format)::value>(recipe, [&](auto p) { path = decltype(p)::value; });
  });
  return path;
}

void check_schedule(const KeyStoreArgs& args, const KeyStoreSchedule& s, int lanes) {
  if (s.max_blocks < 0) throw_bad_input("key_store: max_blocks must be >= 0, got " + std::to_string(s.max_blocks));
  if (s.tile_counters != nullptr && s.tile_order == nullptr) {
    throw_bad_input("key_store: tile_counters hand out tiles of a tile order; this launch has no tile_order");
  }
  if (s.tile_counters != nullptr && s.hand_out_tiles_per_warp < 1) {
    throw_bad_input("key_store: hand_out_tiles_per_warp must be at least 1, got " +
                    std::to_string(s.hand_out_tiles_per_warp));
  }
  const int tile_tokens = key_store_tile_tokens(args.recipe, lanes, args.input_bf16);
  if (s.tile_order != nullptr && s.tile_order_tokens != tile_tokens) {
    throw_bad_input("key_store: the tile order was built for tiles of " + std::to_string(s.tile_order_tokens) +
                    " tokens; this launch computes tiles of " + std::to_string(tile_tokens));
  }
}

}  // namespace

// The generic kernel's widths (recipes without a pinned path) were measured once on the
// H200 for the recipes that now have pinned paths, with bf16 input; they are kept as its
// defaults for either input.
int fastest_key_lanes(const ref::RecipeFields& recipe, bool input_bf16) {
  const int path = pinned_path_of(recipe);
  if (path != kGenericKeyPath) {
    return input_bf16 ? kPinnedKeyPaths[path].fastest_lanes : kPinnedKeyPaths[path].fp32_input_lanes;
  }
  switch (recipe.key_quant.format) {
    case ref::StorageFormat::kFp8E4m3fn: return 2;
    case ref::StorageFormat::kFp4E2m1: return 4;
    case ref::StorageFormat::kBf16: return 1;
    default: return 2;
  }
}

int key_store_tile_tokens(const ref::RecipeFields& recipe, int lanes_per_head, bool input_bf16) {
  if (lanes_per_head == kAutoLanesPerHead) lanes_per_head = fastest_key_lanes(recipe, input_bf16);
  int tokens = 0;
  dispatch_lanes(lanes_per_head, "key_store",
                 [&](auto lanes) { tokens = key_kernel::KeyRing<decltype(lanes)::value>::kTokens; });
  return tokens;
}

std::string key_store_path(const ref::RecipeFields& recipe) {
  const int path = pinned_path_of(recipe);
  return path == kGenericKeyPath ? "generic" : kPinnedKeyPaths[path].name;
}

void launch_key_store(const KeyStoreArgs& args, const KeyStoreSchedule& schedule) {
  check_launch_args(args.recipe.key_quant, args.page_size, "key_store");
  // reference/norm.h: a norm needs its weight, LayerNorm its bias too.
  if (args.recipe.key_norm.kind != ref::NormKind::kNone && args.norm_weight == nullptr) {
    throw_bad_input("key_store: the recipe's norm needs norm_weight");
  }
  if (args.recipe.key_norm.kind == ref::NormKind::kLayerNorm && args.norm_bias == nullptr) {
    throw_bad_input("key_store: LayerNorm needs norm_bias");
  }
  const int lanes_per_head =
      schedule.lanes_per_head == kAutoLanesPerHead ? fastest_key_lanes(args.recipe, args.input_bf16)
                                                   : schedule.lanes_per_head;
  check_schedule(args, schedule, lanes_per_head);
  if (args.num_tokens == 0) return;
  dispatch_lanes(lanes_per_head, "key_store", [&](auto lanes) {
    constexpr int kLanes = decltype(lanes)::value;
    constexpr int kTileTokens = key_kernel::KeyRing<kLanes>::kTokens;
    const int64_t tiles = (args.num_tokens + kTileTokens - 1) / kTileTokens;
    dispatch_format(args.recipe.key_quant.format, [&](auto format) {
      constexpr ref::StorageFormat kFormat = decltype(format)::value;
      key_kernel::dispatch_key_path<kFormat>(args.recipe, [&](auto path) {
        constexpr int kPath = decltype(path)::value;
        if constexpr (kLanes == 1 && kPath != kGenericKeyPath && kPinnedKeyPaths[kPath].producer_warps) {
          key_kernel::launch_producer<kFormat, kLanes, kPath>(args, schedule, tiles);
        } else {
          key_kernel::launch_persistent<kFormat, kLanes, kPath>(args, schedule, tiles);
        }
      });
    });
  });
  check_cuda(cudaGetLastError(), "key_store_kernel launch");
}

}  // namespace dsaf::dev
