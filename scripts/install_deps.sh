#!/usr/bin/env bash
# Installs the Debian packages dsa-fidelity builds with (Debian 12 / Ubuntu 24.04).
# CUDA (nvcc) is optional and not installed here: without it the CPU parts build alone.
set -euo pipefail
packages=(cmake ninja-build g++ libeigen3-dev libhdf5-dev libssl-dev librapidcheck-dev libgtest-dev
          libgmock-dev googletest libcli11-dev nlohmann-json3-dev libfmt-dev libbenchmark-dev liblzma-dev
          python3-matplotlib python3-numpy python3-h5py python3-venv
          curl ca-certificates  # the pinned upstream releases: scripts/upstream.sh --fetch
          clang libclang-rt-dev)  # clang + compiler-rt (libFuzzer, ASan): scripts/fuzz.sh
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
