#!/usr/bin/env bash
# Peer comparison with llama.cpp's ggml CPU backend (bench/ggml_peer.cpp): the same matvec/matmul
# shapes through strata's MXFP4/FP8 kernels and ggml's MXFP4/Q8_0 in one process; with `-- --kquant`,
# ggml's own block formats (Q4_K, Q2_K, Q8_0, Q6_K, Q3_K, IQ4_NL) on both sides (kernels/kquant_linear.h).
#
# ggml comes prebuilt from the npm package @node-llama-cpp/linux-x64 (pinned in
# bench/ggml/package.json + package-lock.json, installed into bench/ggml/node_modules); its headers
# come from the llama.cpp source that node-llama-cpp bundles (llama/gitRelease.bundle of the same
# version, fetched with `npm pack` into the build directory). Nothing fetched lands in the source
# tree outside the ignored node_modules/ and build directories.
#
# Usage: bench/ggml_peer.sh [--build DIR] [--variant NAME] [-- ggml_peer args: --threads N --rounds R --level L ...]
#   --build DIR    strata build directory (default: build); strata_kernels and strata_core are built there
#   --variant NAME ggml CPU library variant (default: picked from /proc/cpuinfo: zen4, icelake, skylakex,
#                  haswell, x64, ...; see bench/ggml/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64)
#   AVX2 against AVX2 on any AVX2 machine: --variant haswell -- --kquant --level avx2 (ggml_peer --level
#                  forces strata's kernel level; default the best this CPU runs)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$repo/build"
variant=""
nlc_version="3.22.1"
peer_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$(cd "$2" && pwd)"; shift 2 ;;
    --variant) variant="$2"; shift 2 ;;
    --) shift; peer_args=("$@"); break ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "ggml_peer.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

# 1. The prebuilt ggml libraries (npm, pinned by the lock file).
pkg_dir="$repo/bench/ggml"
bins="$pkg_dir/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
if [[ ! -f "$bins/libggml-base.so" ]]; then
  echo "ggml_peer.sh: npm ci in bench/ggml (@node-llama-cpp/linux-x64 $nlc_version)" >&2
  (cd "$pkg_dir" && npm ci --ignore-scripts --no-audit --no-fund >&2)
fi
release=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["buildOptions"]["llamaCpp"]["release"])' \
  "$bins/_nlcBuildMetadata.json")

# 2. The headers of that llama.cpp release, from the source bundle in node-llama-cpp.
work="$build/ggml-peer"
src="$work/llama.cpp-$release"
mkdir -p "$work"
if [[ ! -f "$src/ggml/include/ggml-cpu.h" ]]; then
  echo "ggml_peer.sh: fetching node-llama-cpp@$nlc_version (llama.cpp source bundle)" >&2
  tgz=$(cd "$work" && npm pack --silent "node-llama-cpp@$nlc_version")
  rm -rf "$work/nlc" && mkdir -p "$work/nlc" && tar xzf "$work/$tgz" -C "$work/nlc"
  tag=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tag"])' "$work/nlc/package/llama/llama.cpp.info.json")
  if [[ "$tag" != "$release" ]]; then
    echo "ggml_peer.sh: node-llama-cpp bundles llama.cpp $tag but the binaries were built from $release" >&2
    exit 1
  fi
  rm -rf "$src"
  git clone -q "$work/nlc/package/llama/gitRelease.bundle" "$src" 2>/dev/null
fi

# 3. The ggml CPU variant for this CPU (what ggml's own loader would score highest).
if [[ -z "$variant" ]]; then
  flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
  vendor=$(grep -m1 '^vendor_id' /proc/cpuinfo || true)
  has() { [[ " $flags " == *" $1 "* ]]; }
  if has avx512f && [[ "$vendor" == *AMD* ]] && has avx512_bf16; then variant=zen4
  elif has amx_tile && has avx512_bf16; then variant=sapphirerapids
  elif has avx512_bf16; then variant=cooperlake
  elif has avx512_vnni && has avx512vbmi; then variant=icelake
  elif has avx512f; then variant=skylakex
  elif has avx2 && has fma; then variant=haswell
  else variant=x64
  fi
fi
cpu_lib="$bins/libggml-cpu-$variant.so"
[[ -f "$cpu_lib" ]] || { echo "ggml_peer.sh: no ggml CPU variant '$variant' in $bins" >&2; exit 1; }

# 4. Build strata's kernels and the peer driver.
[[ -f "$build/build.ninja" ]] || cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >&2
ninja -C "$build" strata_kernels strata_core >&2
g++ -O3 -std=c++20 -Wall -Wno-unused-parameter -I"$repo" -I"$src/ggml/include" "$repo/bench/ggml_peer.cpp" \
  "$build/kernels/libstrata_kernels.a" "$build/core/libstrata_core.a" \
  "$cpu_lib" "$bins/libggml-base.so" -Wl,-rpath,"$bins" -lpthread -o "$work/ggml_peer"

echo "ggml: llama.cpp $release, libggml-cpu-$variant.so (npm @node-llama-cpp/linux-x64@$nlc_version)"
echo "machine: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs; git rev $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?')"
"$work/ggml_peer" "${peer_args[@]}"
