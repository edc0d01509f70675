// Restore: a Snapshot back into a live Session — but only after the validation core has
// checked it (refusing on error-severity violations unless forced) — and the equivalence
// verdict that proves a restored state is the captured one.
//
// Equivalence: the last step is recomputed from the restored state (the cache truncated to
// n-1 positions, then the last token fed again) and its logits are compared with the stored
// ones: KL(stored || recomputed), max |Δlogit|, top-1 and top-5 agreement, judged under a
// tolerance profile. Bit-exactness is not promised across kernel paths (batched prefill vs
// single-token decode, CPU vs GPU), hence profiles:
//   exact        max |Δ| == 0 and top-1 equal (same build, same kernels, same device);
//   same-device  KL <= 1e-5, max |Δ| <= 1e-3 x max(1, max |logit|), top-1 equal;
//   cross-device KL <= 1e-3, max |Δ| <= 5e-2 x max(1, max |logit|), top-1 equal, top-5
//                overlap >= 4.
// For f16/bf16 caches or compute, the KL and |Δ| bounds of the non-exact profiles are 100x
// (f16) and 1000x (bf16) looser.
//
// Thread-safety: free functions over values; the returned Session belongs to the caller.
#pragma once

#include "engine/session.h"
#include "state/ledger/snapshot.h"
#include "state/verify/validate.h"

#include <optional>
#include <span>

namespace kvscope::state {

enum class ToleranceProfile { Exact, SameDevice, CrossDevice };
std::string profileName(ToleranceProfile p); // "exact" | "same-device" | "cross-device"
std::optional<ToleranceProfile> parseProfile(std::string_view name);

struct Tolerance {
    double maxKl = 0;
    double maxAbsLogit = 0; // absolute, after scaling by max(1, max |logit|)
    bool requireTop1 = true;
    int minTop5Overlap = 0;
};
// The bounds of a profile for logits of magnitude `logitScale` computed in `dtype`.
Tolerance toleranceFor(ToleranceProfile p, const std::string& dtype = "f32",
                       double logitScale = 1.0);
// The dtype whose tolerances a comparison of states follows: the model's compute dtype when it
// is not f32, else the loosest of the caches' dtypes (bf16 over f16 over f32) — so that a pair
// of an f32 and a bf16 cache is judged the same way whichever comes first.
std::string toleranceDtype(const std::string& computeDtype,
                           std::initializer_list<std::string> cacheDtypes);

// Comparison of one step's logits: `reference` (e.g. stored) vs `candidate`.
struct LogitComparison {
    double kl = 0;     // KL(softmax(reference) || softmax(candidate)), nats
    double maxAbs = 0; // max |Δlogit|
    int32_t top1Reference = -1, top1Candidate = -1;
    bool top1Agree = false;
    int topKOverlap = 0; // |topK(reference) ∩ topK(candidate)|
    int topK = 5;
};
// Sizes must match (else maxAbs = +inf and nothing agrees). topK <= vocab.
LogitComparison compareLogits(std::span<const float> reference, std::span<const float> candidate,
                              int topK = 5);
bool within(const LogitComparison& c, const Tolerance& t);
nlohmann::json toJson(const LogitComparison& c);

struct Equivalence {
    LogitComparison comparison;
    ToleranceProfile profile = ToleranceProfile::SameDevice;
    Tolerance tolerance;
    bool equivalent = false;
};
nlohmann::json toJson(const Equivalence& e);

// Recomputes the last step of `restored` (which must hold >= 1 token with a consistent
// cache; Session::recomputeLastStep, no copy of the cache) and compares with `storedLogits`.
// The session is unchanged afterwards; no other thread may read it meanwhile.
Result<Equivalence> checkEquivalence(const Session& restored, std::span<const float> storedLogits,
                                     ToleranceProfile profile = ToleranceProfile::SameDevice);

// "recomputed last-step logits differ (same-device): KL ..., max |dlogit| ..., top-1 ...":
// the message of a logits.equivalence violation, from verify and restore alike.
std::string describeMismatch(const Equivalence& e);

struct RestoreOptions {
    bool force = false; // restore despite error-severity violations
    ValidateOptions validate{};
    // Slots the caller appends right away (continue -n N). 0: a loaded file's layers are used
    // in place (no copy; the first extension copies them). More: the cache is built as a copy
    // with that much room, so the run appends without copying the cache a second time.
    int64_t room = 0;
    // Unless forced, a state with stored logits must also pass the equivalence verdict
    // (checkEquivalence: its last step recomputed from the restored cache) under `profile`,
    // as `verify` judges it: a state verify fails on logits.equivalence is refused here too.
    bool equivalence = true;
    ToleranceProfile profile = ToleranceProfile::SameDevice;
};

struct Restored {
    Session session;
    Sampler sampler; // the recorded settings with the RNG state at capture
    Report report;   // the validation report restore ran first
};

// The report's errors as "id: message; id: message" (the first five, then "; ...").
std::string describeErrors(const Report& report);

// Validates `s` against `model`; refuses (error naming the violations) when there are
// errors unless options.force (logits.equivalence included, see RestoreOptions); then rebuilds the
// cache (KvCache::fromRaw) on the model's device and a Session over it. Structural violations
// (Violation::structural: shapes, byte sizes, dtype, architecture, token ids outside the
// vocabulary) are refused even when forced, with the violations named — never a crash inside the
// model.
Result<Restored> restore(const Snapshot& s, std::shared_ptr<const Model> model,
                         const RestoreOptions& options = {});

// Only the cache, rebuilt from the snapshot's raw bytes on `device` (no validation); `room`
// as in RestoreOptions.
Result<KvCache> cacheFromSnapshot(const Snapshot& s, const std::string& device, int64_t room = 0);

} // namespace kvscope::state
