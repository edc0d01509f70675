// The residual stream read through the model's own head: the logit lens's projection and the
// direct logit attribution of one token.
//
// unembedResidual() applies the head exactly as a forward pass ends it (headLogits in
// forwardcommon.h: the final norm — RMSNorm, or GPT-2's LayerNorm with its bias — the output
// matrix as stored (tied to the embeddings or not, bf16 or ggml-quantized: multiplied by dense(),
// never widened whole) and Gemma 2's logit soft-cap). Applied to the residual after the last
// layer it gives the model's own logits.
//
// attributeLogit() splits one token's logit at one position into the direct contributions of
// the parts the final residual is the sum of — x_L = embed + Σ_l (attn_l + mlp_l) — as
// TransformerLens does: the final norm is linear once its scale is frozen at the value the
// final residual gives it (s = 1/rms(x_L), or 1/std(x_L) for LayerNorm, eps included), so a
// part v contributes v·u with u = s γ ⊙ w_token (LayerNorm: u minus its mean, the centring
// being linear too) and the norm's bias contributes β·w_token. Attention splits further by query
// head: head h's output z_h ("attn_heads") times its slice W_O[:, hD:(h+1)D], the output
// projection's bias a term of its own; where the model normalizes the attention output
// (Gemma's post-attention norm) that norm's scale is frozen the same way, at the value the
// heads' sum plus bias gives it. An MLP is one part (its output biases included). The parts
// sum to the pre-soft-cap logit up to float rounding: a soft-capped model's logit is
// cap·tanh(sum / cap), which no sum of parts is.
//
// Thread-safety: free functions; the model is shared read-only.
#pragma once

#include "engine/hosttensor.h"
#include "engine/model.h"
#include "util/status.h"

#include <cstdint>
#include <vector>

namespace kvscope {

// Logits [N, vocab] float32 for residual rows `resid` [N, C] float32 (any N >= 1), through the
// model's head. Errors: a tensor that is not [N, dim].
Result<HostTensor> unembedResidual(const Model& model, const HostTensor& resid);

// One position's intermediates as the forward pass reported them (observer.h's names), the
// input of attributeLogit. All float32.
struct ResidualParts {
    std::vector<float> embed;              // "embed" row [C] (token, position, embed scale)
    std::vector<std::vector<float>> heads; // "attn_heads" row per layer [H*D]
    std::vector<std::vector<float>> mlp;   // "ffn_out" row per layer [C]
    std::vector<float> final;              // "resid" row of the last layer [C]
};

struct LogitAttribution {
    int32_t token = -1;
    double logit = 0;       // the head's logit for `token` from `final` (after any soft-cap)
    double preCapLogit = 0; // the same before the soft-cap (== logit without one): the target
    double normScale = 0;   // the final norm's frozen scale s (1/rms, or 1/std for LayerNorm)
    double embedding = 0;   // the embedding's direct contribution
    std::vector<std::vector<double>> heads; // [layers][heads]: each query head's
    std::vector<double> attnBias;           // [layers]: the output projection's bias (0: none)
    std::vector<double> mlp;                // [layers]: each MLP block's
    double normBias = 0;                    // the final LayerNorm's bias β·w (0 for RMSNorm)
    // The parts recombined into the final residual against `final` itself: max |Δ| over the
    // C components (float rounding of the forward pass's additions; large: the parts are not
    // this position's).
    double residualError = 0;

    // embedding + Σ heads + Σ attnBias + Σ mlp + normBias: preCapLogit up to rounding.
    double sum() const;
};

// Errors: a token outside the vocabulary, parts of the wrong count or width (named: "heads of
// layer 3 has 48 values, the model's heads x head_dim is 64").
Result<LogitAttribution> attributeLogit(const Model& model, const ResidualParts& parts,
                                        int32_t token);

} // namespace kvscope
