# Sourced by scripts/setup.sh and by scripts/test.sh for its release tree, before the
# first CMake configure: C and C++ compilations go through ccache where it is installed.
# `pip install .` builds the C++ libraries and the CLI again in build/wheel with the same
# flags and source paths as build/ (pyproject.toml), so the cache turns that second build
# into lookups (~2 of CI's ~30 minutes on 2 cores). A hit needs the same compiler name as
# well: left unset, the package build gets x86_64-linux-gnu-g++ where CMake picks c++ (the
# same binary, another name, so every lookup missed), hence CC and CXX are named here. The
# cache lives in .deps/ccache (ignored) unless CCACHE_DIR names another, so a read-only
# home does not break the build. CMake reads these variables when it creates a build tree;
# an existing tree keeps its own.
if command -v ccache > /dev/null; then
  export CC="${CC:-cc}" CXX="${CXX:-c++}"
  export CCACHE_DIR="${CCACHE_DIR:-$PWD/.deps/ccache}"
  export CMAKE_C_COMPILER_LAUNCHER="${CMAKE_C_COMPILER_LAUNCHER:-ccache}"
  export CMAKE_CXX_COMPILER_LAUNCHER="${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}"
fi
