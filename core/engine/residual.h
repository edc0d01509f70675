// Residual checkpoints: the residual stream as the state that is kept, K/V as a cache rebuilt
// from it (the survival lab's "what can be rebuilt" half).
//
// The residual stream entering layer l holds everything layer l's keys and values are made
// from: K/V of that layer are its attention norm, K/V projections and RoPE, nothing else. So
// a state can keep, instead of its cache,
//   (a) the residual entering every layer: K/V of each layer rebuilt by projection only;
//   (b) K/V of the layers below L and the residual entering L: layers L.. rebuilt by running
//       them over the stored positions (attention and MLP included, since the residual
//       entering L+1 is not kept).
// The residuals are float32 host tensors [T, C]; in a float32 model a rebuild reproduces the
// original K/V up to the rounding of batched versus token-by-token products.
//
// Thread-safety: free functions; the model is shared read-only.
#pragma once

#include "engine/hosttensor.h"
#include "engine/kvcache.h"
#include "engine/model.h"
#include "util/status.h"

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace kvscope {

// The residual stream of a fresh run of `tokens` (positions 0..n-1): entry l is the stream
// entering layer l ([T, C] float32; entry 0 = the token embeddings), for l in 0..n_layers-1.
Result<std::vector<HostTensor>> residualStream(const std::shared_ptr<const Model>& model,
                                               std::span<const int32_t> tokens);

// (a): a cache whose every layer is projected from `residuals` (as residualStream returns
// them) at `positions`, all slots unmasked. Errors name a residual of the wrong shape.
Result<KvCache> projectCache(const Model& model, const std::vector<HostTensor>& residuals,
                             const std::vector<int64_t>& positions);

// (b): `below`'s layers 0..from-1 kept; layers from.. rebuilt by running them over `residual`
// (the stream entering layer `from`, [T, C]) at below's positions, T = below.length().
Result<KvCache> rebuildFromLayer(const Model& model, int from, const HostTensor& residual,
                                 const KvCache& below);

} // namespace kvscope
