#include "model/activations.h"

#include "model/attention.h"
#include "model/engram.h"
#include "model/forward_scratch.h"

namespace strata::model {

Activations::Activations(const ModelConfig& c)
    : rope_window(RopeParams{c.rope_head_dim, c.rope_theta, 0, 1.0, c.beta_fast, c.beta_slow}),
      rope_compressed(RopeParams{c.rope_head_dim, c.compress_rope_theta, c.original_seq_len, c.rope_factor, c.beta_fast,
                                 c.beta_slow}),
      attn(std::make_unique<AttentionScratch>()),
      engram(std::make_unique<EngramScratch>()),
      fwd(std::make_unique<ForwardScratch>()) {}
Activations::~Activations() = default;
Activations::Activations(Activations&&) noexcept = default;
Activations& Activations::operator=(Activations&&) noexcept = default;

}  // namespace strata::model
