// A decode step allocates nothing per layer (issue 14 item 2: the scratch of a forward lives in one
// activations object, sized once and reused, as llama2.c's RunState). This binary replaces the
// global operator new to count heap allocations (the sanitizer builds keep their malloc checks:
// the replacement allocates with malloc). Kernel scratch that bypasses operator new (aligned_alloc)
// is stack-backed at decode sizes (kernels/detail/inline_scratch.h) and not counted here.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "runtime/sampler.h"
#include "tests/support/tiny_suite.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocs{0};

void* counted_alloc(std::size_t n, std::size_t align) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = 1;
  void* p = align <= alignof(std::max_align_t) ? std::malloc(n) : std::aligned_alloc(align, (n + align - 1) / align * align);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(std::size_t n) { return counted_alloc(n, 0); }
void* operator new[](std::size_t n) { return counted_alloc(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return counted_alloc(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted_alloc(n, static_cast<std::size_t>(a)); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace strata::model {
namespace {

class DecodeAllocTiny : public testing::TinyModelSuite<DecodeAllocTiny> {
 protected:
  // Heap allocations of one forward of `entries`' next tokens (the greedy token of each one's last
  // logits), advancing them.
  struct Seq {
    KvCache cache;
    std::vector<float> logits;
    std::vector<int32_t> tok;
  };
  int64_t decode_step(std::vector<Seq>& seqs, Activations& act) {
    std::vector<ForwardEntry> entries(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) {
      seqs[i].tok.assign(1, runtime::argmax(seqs[i].logits));
      entries[i].cache = &seqs[i].cache;
      entries[i].tokens = seqs[i].tok;
      entries[i].kind = RowKind::kDecode;
      entries[i].logits_out = seqs[i].logits.data();
    }
    g_allocs.store(0);
    g_counting.store(true);
    Status st = model_->forward(ForwardRequest{entries}, act);
    g_counting.store(false);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return g_allocs.load();
  }
  // kSteps decode steps of n_seqs entries after two warm-up steps (the buffers grow to a step's
  // size), checked against `allowed` on average.
  void expect_no_per_layer_allocs(int n_seqs);
  std::vector<Seq> prefilled(int n_seqs, Activations& act) {
    std::vector<Seq> seqs(static_cast<size_t>(n_seqs));
    for (int i = 0; i < n_seqs; ++i) {
      Seq& s = seqs[static_cast<size_t>(i)];
      s.cache = model_->new_cache();
      s.logits.assign(static_cast<size_t>(model_->config().vocab_size), 0.0f);
      // Prompts of different lengths: the sequences sit at different positions.
      s.tok.assign(ids_.begin(), ids_.end() - i);
      ForwardEntry e;
      e.cache = &s.cache;
      e.tokens = s.tok;
      e.kind = RowKind::kPrompt;
      e.logits_out = s.logits.data();
      Status st = model_->forward(ForwardRequest{std::span<ForwardEntry>(&e, 1)}, act);
      EXPECT_TRUE(st.ok()) << st.to_string();
    }
    return seqs;
  }
};

// What a decode step may still allocate: the store's fetch handle of each Engram layer's rows
// (WeightStore::start_engram_rows returns an owned handle holding a copy of the ids): two each.
int64_t allowed(const ModelConfig& c) { return 2 * static_cast<int64_t>(c.engram_layer_ids.size()); }

// Over kSteps steps after warm-up, the average must stay within `allowed` plus one: an allocation
// per layer (8 here) or per compressed layer (3) would exceed it at every step, while buffers that
// grow with the context (the KV cache, the indexer's keys) reallocate geometrically, a few times
// in all.
constexpr int kSteps = 32;

void DecodeAllocTiny::expect_no_per_layer_allocs(int n_seqs) {
  const ModelConfig& c = model_->config();
  Activations act = model_->new_activations();
  std::vector<Seq> seqs = prefilled(n_seqs, act);
  decode_step(seqs, act);
  decode_step(seqs, act);
  int64_t total = 0;
  std::string steps;
  for (int step = 0; step < kSteps; ++step) {
    const int64_t n = decode_step(seqs, act);
    total += n;
    steps += std::to_string(n) + " ";
  }
  EXPECT_LE(total, (allowed(c) + 1) * kSteps)
      << n_seqs << " entries: heap allocations per decode step (" << c.n_layers << " layers): " << steps;
}

TEST_F(DecodeAllocTiny, LoneDecodeStepAllocatesNothingPerLayer) { expect_no_per_layer_allocs(1); }

TEST_F(DecodeAllocTiny, BatchedDecodeStepAllocatesNothingPerLayer) { expect_no_per_layer_allocs(4); }

// The counter counts: a forward with a fresh activations object allocates its buffers.
TEST_F(DecodeAllocTiny, CounterSeesAFreshActivationsObjectGrow) {
  Activations act = model_->new_activations();
  std::vector<Seq> seqs = prefilled(1, act);
  Activations fresh = model_->new_activations();
  EXPECT_GT(decode_step(seqs, fresh), allowed(model_->config()));
}

}  // namespace
}  // namespace strata::model
