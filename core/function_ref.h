// FunctionRef: a non-owning reference to a callable (LLVM's function_ref, C++26 std::function_ref).
//
// Why: ThreadPool::parallel_for runs ~500 passes per decode token, each from a lambda capturing a
// handful of locals by reference; a std::function of such a lambda is larger than libstdc++'s
// 16-byte small buffer and allocated on the heap at every call. A FunctionRef is two pointers and
// never allocates.
// Lifetime: it refers to the callable it was made from, which must outlive every call through it
// (true for an argument of a blocking call such as parallel_for; never store one).
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace strata {

template <class Fn>
class FunctionRef;

template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> && std::is_invocable_r_v<R, F&, Args...>)
  FunctionRef(F&& f) noexcept  // NOLINT(google-explicit-constructor): converts like std::function
      : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* obj, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(obj))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(obj_, std::forward<Args>(args)...); }

 private:
  void* obj_;
  R (*call_)(void*, Args...);
};

}  // namespace strata
