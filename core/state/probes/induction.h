// Induction probe: does the model look back at its context, and which heads do it?
//
// What the KV cache buys a model is the ability to reuse earlier tokens. The probe measures
// that use directly:
//  - copy loss: a sequence of random tokens R (drawn from the non-special vocabulary with a
//    fixed seed) is fed as BOS + R + R. Nothing predicts the first copy; a model that reads
//    its cache predicts the second copy (Olsson et al., "In-context learning and induction
//    heads", 2022). The report has the mean loss and top-1 accuracy of both copies.
//  - head scores, from the attention probabilities of that same run: the induction score of
//    a head is its mean attention, from a query token whose token occurred before, to the
//    token after that earlier occurrence (where the continuation to copy is); the
//    previous-token score is its mean attention to the immediately preceding position (the
//    other half of the circuit).
//  - context recall on a given text: for every token that already occurred earlier in the
//    text, the rank and probability the model gave it, next to the same for the tokens that
//    did not: "the model remembered the name".
//
// One forward pass over at most the model's context; thread-safe for distinct models.
#pragma once

#include "engine/model.h"
#include "util/status.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kvscope::tok {
class Tokenizer;
}

namespace kvscope::state {

struct HeadScore {
    int layer = 0;
    int head = 0;             // query head
    double induction = 0;     // mean attention to the token after the earlier occurrence
    double previousToken = 0; // mean attention to the position before the query
};

struct RecalledToken {
    int64_t position = 0; // in the fed sequence (BOS is position 0 when the text has one)
    int32_t id = 0;
    std::string text;            // as streamed after the token before it
    int64_t earlierPosition = 0; // its latest earlier occurrence
    int64_t rank = 0;            // 1 = the model's top prediction
    double probability = 0;
};

struct InductionReport {
    std::vector<int32_t> tokens; // what was fed
    int64_t segmentLength = 0;   // L of the random segment (0 for a text)
    // Random-segment probe: mean NLL (nats) and top-1 accuracy of each copy (predictions of
    // copy tokens 2..L; the first token of either copy is unpredictable).
    double firstCopyLoss = 0, secondCopyLoss = 0;
    double firstCopyTop1 = 0, secondCopyTop1 = 0;
    std::vector<HeadScore> heads;        // every layer x query head, layer-major
    std::vector<RecalledToken> recalled; // tokens that occurred before (the text probe)
    double recalledMeanRank = 0;         // over `recalled`
    double recalledTop1 = 0;             // fraction of `recalled` ranked first
    double otherMeanRank = 0;            // tokens seen for the first time, for comparison
    // The head with the highest induction score (the first in layer-major order on a tie);
    // layer -1 when there are no heads.
    HeadScore strongest() const;
    // Every head, highest induction score first (ties in layer-major order): strongest() first.
    std::vector<HeadScore> byInduction() const;
};

// The report as `kvscope-cli induction --json` prints it.
nlohmann::json toJson(const InductionReport& r);

struct InductionOptions {
    int64_t length = 32; // random segment length (clamped so that BOS + 2L fits)
    uint64_t seed = 1;
    std::string text; // non-empty: probe this text instead of a random segment
};

// Errors name the option ("--length 0: ...") or the model.
Result<InductionReport> probeInduction(const std::shared_ptr<const Model>& model,
                                       const tok::Tokenizer& tokenizer,
                                       const InductionOptions& options);

} // namespace kvscope::state
