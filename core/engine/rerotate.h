// RoPE re-rotation of cached keys: moves post-RoPE keys from the positions they were computed
// at to new positions, as splicing needs when a cache fragment (or the tail behind an
// insertion) changes position.
//
// A RoPE key at position p is R(p·θ) k; rotating it by R((q - p)·θ) gives R(q·θ) k, the key
// the model would have computed at q from the same pre-RoPE vector. θ are the model's own
// inverse frequencies (rope theta and scaling as loaded, Model::Impl::invFreq), so the
// scaling logic lives only in rope.cpp. The arithmetic runs in float64 and the result is
// rounded once to the cache dtype. Models with learned absolute positions (GPT-2) have no
// rotation to undo: moving their keys is refused.
//
// Thread-safety: pure function over its arguments; the model is only read.
#pragma once

#include "util/status.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kvscope {

class Model;

// True when the model's keys carry RoPE (the llama family); false for learned absolute
// positions (GPT-2).
bool usesRotaryPositions(const Model& model);

// `raw` holds layer `layer`'s keys [kvHeads, from.size(), headDim] in `dtype` ("f32", "f16",
// "bf16"), rotated at positions `from` with that layer's frequencies (Gemma 3's sliding layers
// have their own); returns the same keys rotated at positions `to`
// (same size). Positions that do not move are copied bit for bit. Errors: size mismatches,
// head_dim not matching the model, or a model without RoPE when any position moves.
Result<std::vector<uint8_t>> rerotateKeys(const Model& model, int64_t layer,
                                          const std::string& dtype, int64_t kvHeads,
                                          int64_t headDim, std::span<const uint8_t> raw,
                                          const std::vector<int64_t>& from,
                                          const std::vector<int64_t>& to);

} // namespace kvscope
