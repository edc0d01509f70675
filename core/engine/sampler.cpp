#include "engine/sampler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

namespace kvscope {

void sortCandidates(std::vector<std::pair<float, int32_t>>& candidates) {
    // Below this many the radix sort's three passes over 2,048 counters cost more than they save.
    constexpr size_t kRadixFrom = 1024;
    const size_t n = candidates.size();
    if (n < kRadixFrom) {
        std::stable_sort(candidates.begin(), candidates.end(),
                         [](const auto& a, const auto& b) { return a.first > b.first; });
        return;
    }
    // A positive float's bits, read as an unsigned integer, grow with its value; inverted they
    // shrink, so an ascending sort on the inverted bits is a descending sort on the values.
    // Each pass is stable, so equal values keep their order.
    auto key = [](float p) {
        uint32_t bits;
        std::memcpy(&bits, &p, sizeof bits);
        return ~bits;
    };
    constexpr int kDigitBits = 11;
    constexpr uint32_t kDigits = 1u << kDigitBits;
    std::vector<std::pair<float, int32_t>> other(n);
    auto* from = &candidates;
    auto* to = &other;
    for (int shift = 0; shift < 32; shift += kDigitBits) {
        std::array<size_t, kDigits> start{};
        for (const auto& c : *from)
            ++start[(key(c.first) >> shift) & (kDigits - 1)];
        if (std::find(start.begin(), start.end(), n) != start.end())
            continue; // one digit for all: this pass would not move anything
        size_t offset = 0;
        for (size_t& s : start)
            offset += std::exchange(s, offset);
        for (const auto& c : *from)
            (*to)[start[(key(c.first) >> shift) & (kDigits - 1)]++] = c;
        std::swap(from, to);
    }
    if (from != &candidates)
        candidates.swap(*from);
}

Sampler::Sampler(SamplerSettings settings) : m_settings(settings), m_rng(settings.seed) {}

uint32_t Sampler::randomU32() {
    // xorshift* as in run.c's random_u32
    m_rng ^= m_rng >> 12;
    m_rng ^= m_rng << 25;
    m_rng ^= m_rng >> 27;
    return static_cast<uint32_t>((m_rng * 0x2545F4914F6CDD1Dull) >> 32);
}

float Sampler::randomF32() {
    return static_cast<float>(randomU32() >> 8) / 16777216.0f;
}

int32_t Sampler::argmax(std::span<const float> logits) {
    int32_t best = 0;
    for (size_t i = 1; i < logits.size(); ++i)
        if (logits[i] > logits[static_cast<size_t>(best)])
            best = static_cast<int32_t>(i);
    return best;
}

namespace {
std::string number(float v) {
    std::ostringstream o;
    o << v;
    return o.str();
}
} // namespace

Status checkSamplerSettings(const SamplerSettings& s, const std::string& origin) {
    const float t = s.temperature;
    if (!std::isfinite(t) || t < 0.0f || t > kMaxTemperature || (t > 0.0f && t < kMinTemperature))
        return Status::error(origin + ": temperature " + number(t) +
                             " is not usable: use 0 (greedy) or a value from " +
                             number(kMinTemperature) + " to " + number(kMaxTemperature));
    if (!std::isfinite(s.topP) || s.topP < 0.0f || s.topP > 1.0f)
        return Status::error(origin + ": top-p " + number(s.topP) +
                             " is outside 0..1 (0 or 1 disables it)");
    if (s.topK < 0 || s.topK > (1 << 24))
        return Status::error(origin + ": top-k " + std::to_string(s.topK) +
                             " is outside 0..16777216 (0 disables it)");
    return Status::ok();
}

std::optional<std::size_t> firstNonFiniteLogit(std::span<const float> logits) {
    bool anyFinite = false;
    for (std::size_t i = 0; i < logits.size(); ++i) {
        const float v = logits[i];
        if (std::isnan(v) || v == INFINITY)
            return i;
        anyFinite = anyFinite || std::isfinite(v);
    }
    if (!anyFinite && !logits.empty())
        return 0;
    return std::nullopt;
}

std::string describeNonFiniteLogits(std::span<const float> logits) {
    const auto i = firstNonFiniteLogit(logits);
    if (!i)
        return "every logit is finite";
    const float v = logits[*i];
    if (std::isnan(v) || v == INFINITY)
        return "the logit of token " + std::to_string(*i) + " is " +
               (std::isnan(v) ? "nan" : "+inf");
    return "every logit is -inf";
}

int32_t Sampler::sample(std::span<const float> logits) {
    const size_t n = logits.size();
    if (n == 0)
        return -1;
    if (Status st = checkSamplerSettings(m_settings); !st)
        throw KvError(st.message());
    if (firstNonFiniteLogit(logits))
        throw KvError("cannot sample: " + describeNonFiniteLogits(logits));
    if (m_settings.temperature <= 0.0f)
        return argmax(logits);

    std::vector<float> probs(logits.begin(), logits.end());
    for (float& p : probs)
        p /= m_settings.temperature;
    if (m_settings.topK > 0 && static_cast<size_t>(m_settings.topK) < n) {
        std::vector<float> sorted(probs);
        std::nth_element(sorted.begin(), sorted.begin() + (m_settings.topK - 1), sorted.end(),
                         std::greater<>());
        const float kth = sorted[static_cast<size_t>(m_settings.topK - 1)];
        for (float& p : probs)
            if (p < kth)
                p = -INFINITY;
    }
    // softmax, as run.c computes it (float accumulation)
    float maxVal = probs[0];
    for (float p : probs)
        maxVal = std::max(maxVal, p);
    float sum = 0.0f;
    for (float& p : probs) {
        p = std::exp(p - maxVal);
        sum += p;
    }
    for (float& p : probs)
        p /= sum;
    if (!std::isfinite(sum) || sum <= 0.0f)
        throw KvError("cannot sample: the softmax of the logits / temperature " +
                      number(m_settings.temperature) + " is not finite");

    const float coin = randomF32();
    const float topp = m_settings.topP;
    if (topp <= 0.0f || topp >= 1.0f) {
        float cdf = 0.0f;
        for (size_t i = 0; i < n; ++i) {
            cdf += probs[i];
            if (coin < cdf)
                return static_cast<int32_t>(i);
        }
        return static_cast<int32_t>(n - 1);
    }
    // top-p: drop tokens below the cutoff that cannot be part of the nucleus, sort the rest
    const float cutoff = (1.0f - topp) / static_cast<float>(n - 1);
    std::vector<std::pair<float, int32_t>> cand;
    for (size_t i = 0; i < n; ++i)
        if (probs[i] >= cutoff)
            cand.emplace_back(probs[i], static_cast<int32_t>(i));
    if (cand.empty()) // a near-uniform distribution with a tiny top-p, or a 1-token vocabulary
        return argmax(logits);
    sortCandidates(cand);
    float cumulative = 0.0f;
    size_t last = cand.size() - 1;
    for (size_t i = 0; i < cand.size(); ++i) {
        cumulative += cand[i].first;
        if (cumulative > topp) {
            last = i;
            break;
        }
    }
    const float r = coin * cumulative;
    float cdf = 0.0f;
    for (size_t i = 0; i <= last; ++i) {
        cdf += cand[i].first;
        if (r < cdf)
            return cand[i].second;
    }
    return cand[last].second;
}

nlohmann::json toJson(const SamplerSettings& s, uint64_t rngState) {
    return {{"temperature", s.temperature},
            {"top_p", s.topP},
            {"top_k", s.topK},
            {"seed", s.seed},
            {"rng_state", rngState}};
}

} // namespace kvscope
