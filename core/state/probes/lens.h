// The logit lens of a state and the direct logit attribution of its next token: what each
// layer "would say" next, and which attention heads and MLPs wrote the chosen token's logit.
//
// Lens. A snapshot holds no residual stream, so the grid is recomputed: the session's tokens
// are run in a fresh session (one pass at positions 0..n-1, as replay() does) with an observer
// on every layer's residual ("resid"), and each row is read through the model's own head
// (unembedResidual: final norm, output matrix, soft-cap). A cell (layer l, position t) is that
// distribution: its top tokens, its entropy and KL(final_t || lens_lt), final_t being the
// model's own distribution at t (whose lens at the last layer it is, up to rounding).
//
// The fresh run says what the model computes from the tokens, not what the restored cache
// holds. The restored state's own reading is one more column: the last token run again over
// the session's cache (Session::recomputeLastStep with the observer, at the last slot's
// recorded position, every earlier slot read as restored), its residual after every layer read
// through the head. Per layer, KL(fresh lens || restored lens) at the last position says how
// the restored cache changes what that layer predicts; the first layer where it exceeds the
// same-device profile's KL bound (restore.h) is `firstChangedLayer`: the depth at which damage
// in the cache starts to matter (a cache corrupted at layer k leaves layers below k as they
// were). An evicted state is read the same way: its restored column shows what the eviction
// changed.
//
// Attribution. For one token (default: the restored last step's top-1), the restored last step's
// logit split into the embedding, every attention head, every attention output bias, every
// MLP and the final norm's bias, the final norm's scale frozen (engine/unembed.h's
// attributeLogit, TransformerLens's decomposition). The parts sum to the (pre-soft-cap) logit;
// `error` is the difference, the model's own last-step logit its reference.
//
// Thread-safety: free functions over a session the caller does not use meanwhile (the last
// step is recomputed over its cache in place, see Session::recomputeLastStep).
#pragma once

#include "engine/session.h"
#include "engine/unembed.h"
#include "util/status.h"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

namespace kvscope::tok {
class Tokenizer;
}

namespace kvscope::state {

struct LensOptions {
    int top = 5;      // tokens listed per cell (1..vocab)
    int64_t from = 0; // positions [from, to) of the fresh grid
    int64_t to = -1;  // -1: the last token's position + 1
};

struct LensToken {
    int32_t id = -1;
    double p = 0;
};

struct LensCell {
    int layer = 0;
    int64_t position = 0;
    std::vector<LensToken> top; // most probable first
    double entropy = 0;         // nats
    double klToFinal = 0;       // KL(final || this layer's distribution), nats
};

struct LensResult {
    int layers = 0;
    int64_t tokens = 0;
    int64_t from = 0, to = 0;
    std::vector<LensCell> cells; // the fresh run: layer-major, positions from..to-1 per layer
    // The restored cache's last step, one cell per layer (position = the last token's index;
    // kl_to_final against the restored step's own logits).
    std::vector<LensCell> restored;
    int64_t restoredPosition = 0;  // the recorded position the last step was run at
    std::vector<double> klToFresh; // per layer: KL(fresh lens || restored lens), last token
    double klFinalToFresh = 0;     // the same for the model's final distributions
    double tolerance = 0;          // the KL bound of the same-device profile
    int firstChangedLayer = -1;    // lowest layer changedByCache(); -1: none
    // Whether the restored cache changes what `layer` predicts: its klToFresh above the
    // tolerance (infinite for a NaN row). The one rule; the GUI marks these layers.
    bool changedByCache(int layer) const {
        return layer >= 0 && static_cast<std::size_t>(layer) < klToFresh.size() &&
               !(klToFresh[static_cast<std::size_t>(layer)] <= tolerance);
    }
    // max |lens at the last layer - the forward pass's logits| over the grid's cells: the
    // head applied by the lens is the model's (0 up to the rounding of batched products).
    double lastLayerMaxAbs = 0;
};

// `tokenizer` may be null (texts are then the ids). Cells: {"layer", "position", "top":
// [{"id", "text", "p"}], "entropy", "kl_to_final"}.
nlohmann::json toJson(const LensResult& r, const tok::Tokenizer* tokenizer);

// Errors: an empty session, a cache the last step cannot be recomputed over, a position
// range outside the tokens, top < 1.
Result<LensResult> logitLens(const Session& session, const LensOptions& options = {});

struct HeadAttribution {
    int64_t position = 0; // the last token's index
    LogitAttribution parts;
    double modelLogit = 0; // the restored last step's logit for the token (the forward pass's)
    double error = 0;      // parts.sum() - the pre-soft-cap logit
};
nlohmann::json toJson(const HeadAttribution& a, const tok::Tokenizer* tokenizer);

// token < 0: the restored last step's top-1. Errors: as logitLens, a token outside the
// vocabulary.
Result<HeadAttribution> attributeHeads(const Session& session, int32_t token = -1);

} // namespace kvscope::state
