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

function(dsaf_set_target_options target)
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
endfunction()
