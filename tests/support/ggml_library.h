// ggml's reference functions for tests, from the prebuilt libggml-base.so of the npm package
// pinned in bench/ggml/package.json (the library bench/ggml_peer.sh measures against), opened
// with dlopen from the path CMake passes in as STRATA_GGML_BASE_LIB (tests/kernels/CMakeLists.txt);
// scripts/install-deps.sh installs it. Tests skip with the reason when it is missing, never pass.
#pragma once

#include <dlfcn.h>

#include <string>

#ifndef STRATA_GGML_BASE_LIB
#define STRATA_GGML_BASE_LIB ""
#endif

namespace strata::testing {

// The ggml library, opened once per test (no global state); closed on destruction.
class GgmlLibrary {
 public:
  GgmlLibrary() {
    handle_ = dlopen(STRATA_GGML_BASE_LIB, RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
      const char* e = dlerror();
      error_ = std::string("cannot dlopen '") + STRATA_GGML_BASE_LIB + "': " + (e ? e : "?") +
               " (run scripts/install-deps.sh, or `npm ci --ignore-scripts` in bench/ggml)";
    }
  }
  ~GgmlLibrary() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  GgmlLibrary(const GgmlLibrary&) = delete;
  GgmlLibrary& operator=(const GgmlLibrary&) = delete;

  bool ok() const { return handle_ != nullptr; }
  const std::string& error() const { return error_; }

  // nullptr when the library lacks the symbol.
  template <class F>
  F symbol(const std::string& name) const {
    return reinterpret_cast<F>(dlsym(handle_, name.c_str()));
  }

 private:
  void* handle_ = nullptr;
  std::string error_;
};

}  // namespace strata::testing

#define STRATA_REQUIRE_GGML(g) \
  if (!(g).ok()) GTEST_SKIP() << "ggml reference library unavailable: " << (g).error()
