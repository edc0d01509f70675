// Immutable values the engine thread hands to the GUI thread (by std::shared_ptr<const T>).
//
// Everything a panel paints comes from one of these; they hold plain Qt/std data, never a
// libtorch tensor, so they are cheap to share across threads and safe to keep after the
// engine has moved on.
#pragma once

#include "heatmapraster.h"

#include "engine/attention.h"
#include "engine/sampler.h"
#include "state/verify/positionalign.h"
#include "workspace/workspace.h"

#include <QMetaType>
#include <QString>
#include <QStringList>

#include <cstdint>
#include <memory>
#include <vector>

namespace kvscope::widgets {

struct ModelInfo {
    QString path;
    QString name; // file or folder name
    QString device;
    QString dtype;       // compute dtype (activations)
    QString cacheDtype;  // the KV cache's in a fresh session: f32, f16, bf16 (--cache-dtype)
    QString weightDtype; // the weights' as stored: "bf16", "q4_k" (the file's most common type)
    QString architecture;
    QString sourceFormat;
    QString fingerprint;
    QString tokenizerKind; // empty: no tokenizer
    QString examplePrompt; // from the model's card (ws::examplePrompt); empty: none
    bool hasChatTemplate = false;
    int layers = 0;
    int heads = 0;
    int kvHeads = 0;
    int headDim = 0;
    int vocabSize = 0;
    int64_t maxContext = 0;
    int64_t parameters = 0;
    int64_t mappedWeightBytes = 0;   // used in place from the model file's mapping
    bool weightsOnHugePages = false; // loaded with the huge-pages option (copied out of the file)
    QStringList variations;          // configVariations: how it departs from a plain Llama
};

struct TokenInfo {
    int32_t id = 0;
    QString text{};       // decoded piece as it prints (may be empty for byte fragments)
    QString piece{};      // raw vocabulary piece ("▁the", "<0x0A>")
    int64_t position = 0; // stored position of this token's cache slot (-1: no slot)
    QString segment{};    // "prompt", "generated", "system", "user", "assistant", "scaffold"...
    bool special = false;
};

// The live session as of one revision: tokens, cache geometry, positions, mask and the
// per-layer K/V norm summaries the heatmaps draw. Norm arrays are [kvHeads, length]
// row-major per layer.
struct CacheView {
    uint64_t revision = 0;
    ModelInfo model;
    std::vector<TokenInfo> tokens;
    int layers = 0;
    int kvHeads = 0;
    int headDim = 0;
    int64_t length = 0;       // cached positions
    int64_t nextPosition = 0; // where the next token goes
    QString cacheDtype;
    std::vector<int64_t> positions; // [length]
    // The token each slot holds when the session continues a recorded eviction
    // (ws::Workspace::liveKeptTokens); empty: slot i holds token i.
    std::vector<int64_t> keptTokens;
    // The token index slot `slot` holds (-1: none), for the views labelled by slot.
    int64_t tokenOfSlot(int64_t slot) const {
        const int64_t t = kvscope::state::tokenOfSlot(keptTokens, slot);
        return t < int64_t(tokens.size()) ? t : -1;
    }
    std::vector<uint8_t> mask;                  // [length], 1 = may be attended to
    int64_t visibleSlots = 0;                   // mask entries that are 1 (KvCache::visibleSlots)
    std::vector<std::vector<float>> keyNorms;   // [layers][kvHeads * length]
    std::vector<std::vector<float>> valueNorms; // [layers][kvHeads * length]
    std::vector<float> topLogits;               // top-5 of the last logits (value)
    std::vector<int32_t> topIds;                // their ids
    std::vector<QString> topTexts;              // their decoded text

    float keyNorm(int layer, int head, int64_t pos) const {
        return keyNorms[size_t(layer)][size_t(head * length + pos)];
    }
    float valueNorm(int layer, int head, int64_t pos) const {
        return valueNorms[size_t(layer)][size_t(head * length + pos)];
    }
};
using CacheViewPtr = std::shared_ptr<const CacheView>;

// Attention probabilities of one layer/query head (core's ws::attentionOf): [queries, keys]
// row-major, queries = tokens fed, keys = cache slots. Entries a query could not see (future
// or masked slots) are 0 and `visible` says which they are.
struct AttentionView {
    uint64_t serial = 0; // the request tag; stale answers are dropped
    uint64_t revision = 0;
    int layer = 0;
    int head = 0;   // query head
    int kvHead = 0; // the KV head its group reads
    int64_t queries = 0;
    int64_t keys = 0;
    // Core's pattern (its probabilities moved into `heatmap`): pattern.visible(q, k) says
    // whether query q could see slot k.
    kvscope::AttentionPattern pattern;
    // The probabilities [queries, keys] ready to paint (built on the engine thread), slots a
    // query cannot see greyed.
    HeatmapDataPtr heatmap;
    const LargeVector<float>& probs() const { return heatmap->values(); }
    QString source;            // where the queries came from (recorded live / recomputed)
    QString error;             // non-empty: no pattern, this says why
    double patternMs = 0.0;    // the pattern itself (with a replay when there was one)
    double milliseconds = 0.0; // everything the engine thread did (pattern + paint-ready data)
    double waitedMs = 0.0;     // from the window's request to the engine thread starting on it
};
using AttentionViewPtr = std::shared_ptr<const AttentionView>;

// A run: the prompt as core takes it (raw text, or chat messages rendered with the
// tokenizer's chat template; ws::preparePrompt), then `steps` tokens sampled with `sampler`.
struct PromptRequest {
    kvscope::ws::PromptSpec prompt;
    int steps = 32; // tokens to generate after the prompt (0: prefill only)
    kvscope::SamplerSettings sampler;
};

} // namespace kvscope::widgets

Q_DECLARE_METATYPE(kvscope::widgets::ModelInfo)
Q_DECLARE_METATYPE(kvscope::widgets::CacheViewPtr)
Q_DECLARE_METATYPE(kvscope::widgets::AttentionViewPtr)
