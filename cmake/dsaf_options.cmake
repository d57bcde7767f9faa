# Warning and sanitizer flags, applied per target through dsaf_set_target_options().
set(CMAKE_EXPORT_COMPILE_COMMANDS ON)
if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  set(CMAKE_BUILD_TYPE Release CACHE STRING "Build type" FORCE)
endif()
# libFuzzer ships with clang only.
if(DSAF_BUILD_FUZZERS AND NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "DSAF_BUILD_FUZZERS=ON needs clang (libFuzzer), but the C++ compiler is "
                      "${CMAKE_CXX_COMPILER_ID} (${CMAKE_CXX_COMPILER}). Configure a fresh build "
                      "folder with CC=clang CXX=clang++, as scripts/fuzz.sh does.")
endif()

# Optimisation of the "cold" targets: code that is compiled in every build but runs little
# (the tests' own translation units, the command line's front end, checkpoint and fixture
# I/O). Their time goes into compiling gtest/RapidCheck macros, CLI11, nlohmann-json and fmt
# templates, not into loops; the numerics they call live in reference/, oracle/ and
# properties/, which keep the build type's flags. Measured on 2 cores: four of the largest
# test files compile in 56 s at -O1 against 78 s at -O3, and under ASan + UBSan in 91 s at
# -O0 against 153 s at -O1. The default is -O1 in Release builds (-O3) and nothing in the
# others (a Debug build stays at -O0); empty: the build type's flags everywhere.
set(dsaf_cold_default "")
if(CMAKE_BUILD_TYPE STREQUAL "Release")
  set(dsaf_cold_default "-O1")
endif()
set(DSAF_COLD_CXX_FLAGS "${dsaf_cold_default}" CACHE STRING "Extra C++ flags of the cold targets (dsaf_set_target_options(... COLD))")

# dsaf_set_target_options(target [COLD]): warnings and sanitizers; COLD adds DSAF_COLD_CXX_FLAGS.
function(dsaf_set_target_options target)
  cmake_parse_arguments(ARG "COLD" "" "" ${ARGN})
  target_compile_features(${target} PUBLIC cxx_std_17)
  set_target_properties(${target} PROPERTIES CXX_EXTENSIONS OFF)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${DSAF_WERROR}>>:-Werror>)
  if(DSAF_SANITIZE)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer>)
    target_link_options(${target} PUBLIC -fsanitize=address,undefined)
  endif()
  # Fuzzing (fuzz/): the same sanitizers plus libFuzzer's coverage instrumentation; only
  # the fuzz targets link libFuzzer itself (-fsanitize=fuzzer, fuzz/CMakeLists.txt).
  if(DSAF_BUILD_FUZZERS)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer>)
    target_link_options(${target} PUBLIC -fsanitize=address,undefined)
  endif()
  if(ARG_COLD AND NOT DSAF_COLD_CXX_FLAGS STREQUAL "")
    separate_arguments(cold_flags UNIX_COMMAND "${DSAF_COLD_CXX_FLAGS}")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${cold_flags}>)
  endif()
endfunction()
