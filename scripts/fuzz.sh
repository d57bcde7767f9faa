#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang (ASan + UBSan, no CUDA) in build-fuzz/,
# writes their seed corpora to build-fuzz/seeds/, and runs each target over its corpus
# with the libFuzzer flags given (arguments starting with '-'); other arguments pick the
# targets (default: every one that was built). docs/fuzzing.md has the long runs.
#   scripts/fuzz.sh -runs=2000                                  CI smoke run (test.sh --sanitize)
#   nice -n 10 scripts/fuzz.sh -runs=1000000 -print_final_stats=1 fuzz_page_table
# New inputs go to build-fuzz/corpus/<target>/; a crash writes build-fuzz/artifacts/crash-*
# (libFuzzer's -artifact_prefix) and makes the script fail. The compilers are clang and
# clang++ unless DSAF_FUZZ_CC / DSAF_FUZZ_CXX name others (a clang of another version).
set -euo pipefail
cd "$(dirname "$0")/.."
flags=()
targets=()
for arg in "$@"; do
  case "$arg" in
    -*) flags+=("$arg") ;;
    *) targets+=("$arg") ;;
  esac
done
CC="${DSAF_FUZZ_CC:-clang}" CXX="${DSAF_FUZZ_CXX:-clang++}" cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" -DDSAF_BUILD_FUZZERS=ON -DDSAF_ENABLE_CUDA=OFF -DDSAF_BUILD_TESTS=OFF -DDSAF_BUILD_BENCH=OFF
if ((${#targets[@]} == 0)); then
  cmake --build build-fuzz --target dsaf_fuzzers
  for exe in build-fuzz/fuzz/fuzz_*; do
    name=$(basename "$exe")
    [ "$name" = fuzz_make_seeds ] || targets+=("$name")
  done
else
  cmake --build build-fuzz --target fuzz_make_seeds "${targets[@]}"
fi
build-fuzz/fuzz/fuzz_make_seeds build-fuzz/seeds
for target in "${targets[@]}"; do
  name=${target#fuzz_}
  dict=()
  [ -f "fuzz/$name.dict" ] && dict=("-dict=fuzz/$name.dict")
  mkdir -p "build-fuzz/corpus/$name" "build-fuzz/seeds/$name" build-fuzz/artifacts
  echo "== $target ${flags[*]}"
  "build-fuzz/fuzz/$target" -artifact_prefix=build-fuzz/artifacts/ "${dict[@]}" "${flags[@]}" \
    "build-fuzz/corpus/$name" "build-fuzz/seeds/$name"
done
