// Where a pipeline may cut the backbone (`--mpi-pipeline`, model/pipeline_part.h).
//
// A cut at layer L (0 < L < n_layers) is clean when no layer at or after L reads state that a layer
// before L made: the compressed KV of its kv source, the index keys of its key owner, the top-k
// selection of the index source above it, and the candidate blocks of the candidate source. Then
// no cache and no per-forward attention state crosses the cut: only the residual streams do.
// Window-only layers (compress ratio 0) read only their own ring. The release config
// (kv sources 2, 8, 14, 20; candidate source 20) has the clean cuts 1, 2, 8, 14 and 20.
// Source: ModelConfig::kv_source_of / index_source_of / key_owner_of (as model/attention.cpp reads
// them); ARCHITECTURE.md §Attention.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "model/config.h"

namespace strata::model {

// OK when `cut` is a clean cut of `c`. Errors (kInvalidArgument): a cut outside (0, n_layers), or
// the first layer at or after it that reads another layer's state before it, naming both layers
// and what is read, e.g. "layer 21 reads the compressed KV of layer 20, before the cut at 21".
[[nodiscard]] Status check_clean_cut(const ModelConfig& c, int cut);

// Every clean cut of `c`, ascending.
std::vector<int> clean_cuts(const ModelConfig& c);

// Checks declared cuts (`--mpi-pipeline-cuts`): n_ranks - 1 of them, strictly increasing, each
// clean. Errors (kInvalidArgument) name the bad cut or the count.
[[nodiscard]] Status check_cuts(const ModelConfig& c, int n_ranks, std::span<const int> cuts);

// The default cuts for `n_ranks` (>= 2) processes: with 2, the CED encoder/decoder boundary
// (ced_decoder_boundary) when it is clean; otherwise the n_ranks - 1 clean cuts that make the
// largest range's weight bytes smallest (`layer_bytes` [n_layers]: each layer's weight bytes; the
// first range's embedding and the last's head are not counted; ties: the earliest cuts).
// Errors (kInvalidArgument): n_ranks < 2, fewer clean cuts than n_ranks - 1 (naming the clean
// cuts), layer_bytes not [n_layers].
[[nodiscard]] Result<std::vector<int>> default_cuts(const ModelConfig& c, int n_ranks,
                                                    std::span<const uint64_t> layer_bytes);

}  // namespace strata::model
