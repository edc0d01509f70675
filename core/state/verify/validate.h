// The validation core: every invariant a restored state must satisfy (the catalogue in
// LEDGER.md), checked on a Snapshot alone or against the model it is restored onto.
//
// Checks never throw and never assert on user data: each problem becomes a Violation with a
// stable id (e.g. "positions.count"), a severity, the ledger item it concerns, a one-line
// message, a longer explanation, and the layer/head/position involved (-1 when not
// applicable). allChecks() lists every id; LEDGER.md documents them.
//
// Thread-safety: pure functions over const values; safe to call concurrently.
#pragma once

#include "state/ledger/snapshot.h"

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope {
class Model;
}

namespace kvscope::state {

enum class Severity { Note = 0, Warning = 1, Error = 2 };
std::string severityName(Severity s); // "note" | "warning" | "error"

struct Violation {
    std::string id;
    Severity severity = Severity::Error;
    std::string item; // ledger item, e.g. "KV cache", "positional state"
    std::string message;
    std::string explanation;
    int layer = -1;
    int head = -1;
    int64_t position = -1; // token index / cache slot
    // The state's parts cannot be put together at all (byte sizes, shapes, dtype,
    // architecture, token ids outside the vocabulary, an unreadable file): restoring it would
    // build a cache the model cannot run on. Such a violation can never be forced.
    bool structural = false;
};

nlohmann::json toJson(const Violation& v);

// One entry of the check catalogue.
struct CheckInfo {
    std::string id;
    Severity severity;
    std::string item;
    std::string explanation;
    bool structural = false; // see Violation::structural
};
const std::vector<CheckInfo>& allChecks();
// A violation of check `id` with the catalogue's severity, item and explanation. An unknown
// id gives an error-severity violation with item "unknown".
Violation makeViolation(std::string_view id, std::string message, int layer = -1, int head = -1,
                        int64_t position = -1);

// The outcome of a verification: every violation found, in check order.
struct Report {
    std::vector<Violation> violations;

    bool ok() const { return !hasErrors(); } // no error-severity violation
    bool hasErrors() const;
    bool hasStructural() const; // any violation that can never be forced
    // Errors that a user may override ("restore anyway"): errors present, none structural.
    bool forceable() const { return hasErrors() && !hasStructural(); }
    bool has(std::string_view id) const;
    const Violation* find(std::string_view id) const;
    Severity worst() const;      // Note when empty
    int count(Severity s) const; // violations of severity s
    // The ids of the warnings and errors, each once, in check order (a note is no finding):
    // what the fault lab and the GUI's fault message say verify found.
    std::vector<std::string> findings() const;
    // {"ok": bool, "forceable": bool, "violations": [...]}
    nlohmann::json toJson() const;
};

struct ValidateOptions {
    // Scan every K/V element and the logits for NaN/Inf, and an f32 cache for values that
    // all carry only f16/bf16 precision (cache.precision). Linear in the cache size.
    bool checkFinite = true;
};

// Checks that need only the snapshot: cache length == tokens, positions, next position,
// mask, K/V blob sizes, dtype, token ids within the vocabulary, logits shape, NaN/Inf, an
// f32 cache that went through f16/bf16,
// prompt boundaries (duplicated BOS, segment map), context limit.
std::vector<Violation> validateSnapshot(const Snapshot& s, const ValidateOptions& options = {});

// Checks against the model the snapshot is to be restored on: config (incl. RoPE), K/V
// shapes vs layers/kv-heads/head_dim, dtype and device, the layer-0 keys of up to four cached
// tokens recomputed one token at a time (cache.provenance; positions.rope when only their
// rotation differs), every weight fingerprint, tokenizer fingerprint, chat template hash.
std::vector<Violation> validateAgainstModel(const Snapshot& s, const Model& model);

// Both of the above.
Report validate(const Snapshot& s, const Model* model, const ValidateOptions& options = {});

} // namespace kvscope::state
