#!/usr/bin/env bash
# Installs kvscope's build and test dependencies from Debian 12 packages.
# Idempotent: packages already present are skipped, so a second run is quick.
# Usage: packaging/install-deps.sh [--gui-runtime]   (run as root, or with sudo available)
set -euo pipefail

PKGS=(
  build-essential cmake ninja-build pkg-config git
  libtorch-dev                       # libtorch 1.13 (CPU)
  libopenblas0-openmp                # fast BLAS for libtorch (the reference BLAS is ~25x slower)
  qt6-base-dev qt6-base-dev-tools libgl-dev
  libqcustomplot-dev libqcustomplot2.1-qt6
  nlohmann-json3-dev
  libzstd-dev
  libpcre2-dev                       # Unicode-aware regexes for tokenizer pre-tokenizers
  libicu-dev                         # Unicode normalization (NFC/NFKC) for tokenizer normalizers
  libxxhash-dev                      # fast checksums/fingerprints for snapshots
  libcli11-dev                       # command-line parsing for kvscope-cli
  xvfb xauth                         # headless GUI runs and screenshots
  fonts-dejavu-core
  clang                              # libFuzzer targets
  file dpkg-dev                      # cpack .deb packaging
  desktop-file-utils appstream jq    # the package test: validate .desktop/metainfo, read JSON
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PKGS[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
