// Sampler: turns logits into the next token. Greedy, temperature, top-k, top-p, seeded.
//
// The algorithm and RNG follow llama2.c's run.c exactly (xorshift* RNG, softmax, top-p with
// its (1 - p) / (n - 1) cutoff), so a seeded run reproduces the reference implementation.
// top-k (not in run.c) is applied before top-p when > 0. The whole state is a small value
// (settings + RNG state) that snapshots save and restore for deterministic replay of forks.
// Not thread-safe: one sampler per generation.
#pragma once

#include "util/status.h"

#include <cstddef>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace kvscope {

struct SamplerSettings {
    float temperature = 0.0f; // 0 = greedy (argmax)
    float topP = 0.9f;        // <= 0 or >= 1 disables
    int32_t topK = 0;         // 0 disables
    uint64_t seed = 42;
    bool operator==(const SamplerSettings&) const = default;
};

// The settings' one range check, used wherever settings enter (CLI flags, GUI, a snapshot's
// stored sampler, fork options) and again before sampling: temperature 0 or 0.001..1000,
// top-p 0..1, top-k 0..2^24, all finite. The message names the field and the value, prefixed
// with `origin` ("--temperature", "run.kvsnap: sampler").
inline constexpr float kMinTemperature = 1e-3f;
inline constexpr float kMaxTemperature = 1e3f;
Status checkSamplerSettings(const SamplerSettings& s, const std::string& origin = "sampler");

// The first entry that is NaN or +Inf, if any (-Inf is a masked token and allowed, as long as
// one entry is finite). Sampling from such logits is refused: they come from NaN weights or a
// damaged cache.
std::optional<std::size_t> firstNonFiniteLogit(std::span<const float> logits);
// "logit 12 is nan" / "every logit is -inf", for error messages.
std::string describeNonFiniteLogits(std::span<const float> logits);

// Top-p's candidates, (probability, token id) pairs, in descending order of probability, equal
// probabilities in the order given: exactly what std::stable_sort gives. Long lists (a
// near-uniform distribution puts most of a 50k vocabulary in the nucleus) go through a
// least-significant-digit radix sort on the floats' bits, which order positive floats as their
// values. Every probability must be positive and finite (top-p's cutoff guarantees it).
void sortCandidates(std::vector<std::pair<float, int32_t>>& candidates);

class Sampler {
public:
    explicit Sampler(SamplerSettings settings = {});
    const SamplerSettings& settings() const { return m_settings; }
    uint64_t rngState() const { return m_rng; }
    void setRngState(uint64_t state) { m_rng = state; }

    // Picks the next token from one position's logits (vocab entries). Consumes one random
    // number unless greedy. Throws KvError for settings checkSamplerSettings refuses and for
    // logits firstNonFiniteLogit names; callers check both first to say which step failed.
    int32_t sample(std::span<const float> logits);

    static int32_t argmax(std::span<const float> logits);

private:
    uint32_t randomU32();
    float randomF32();

    SamplerSettings m_settings;
    uint64_t m_rng;
};

nlohmann::json toJson(const SamplerSettings& s, uint64_t rngState);

} // namespace kvscope
