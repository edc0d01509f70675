// The fault lab: named, documented transformations of a valid snapshot that mimic real
// restore failures (an off-by-one position, a stale cache_position, another model's cache, a
// swapped tokenizer, an f16 round trip behind an f32 manifest, a duplicated BOS, a cache cut
// without fixing positions/mask, a cache not reset between sessions, one corrupted layer,
// keys rotated with the wrong RoPE theta).
//
// Each fault names the validation check (validate.h) that `verify` reports for it; the lab
// (faultLab) injects every fault, verifies the result through a real .kvsnap file
// (verifyFile) and measures the drift of the faulty state against the clean one (compare.h),
// so the claim "verify names it, and it changes the continuation" is measured, not asserted.
// A fault never edits its input: it returns a new Snapshot whose lineage is
// {"operation": "fault", "parameters": {"fault": name, ...}} with the clean snapshot as parent.
//
// Thread-safety: free functions over values; a FaultContext may be shared between threads
// (models and tokenizers are immutable).
#pragma once

#include "engine/session.h"
#include "state/probes/compare.h"
#include "state/ledger/snapshot.h"
#include "state/verify/validate.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope {
class Model;
namespace tok {
class Tokenizer;
}
} // namespace kvscope

namespace kvscope::state {

// What a fault may need besides the snapshot.
struct FaultContext {
    // The model the snapshot belongs to. Required by the faults that recompute state
    // (foreign-cache for its geometry, duplicate-bos, leaked-state).
    std::shared_ptr<const Model> model;
    // foreign-cache: the model whose K/V are used (same layers / kv heads / head dim). Null:
    // a random-weight model of the snapshot's config (Model::createRandom, param `seed`).
    std::shared_ptr<const Model> otherModel;
    // tokenizer-swapped: the tokenizer whose fingerprint replaces the snapshot's. Null: a
    // built-in byte-level llama2.c tokenizer of the model's vocabulary size.
    std::shared_ptr<const tok::Tokenizer> otherTokenizer;
    // Fault parameters (`--param k=v`); each fault documents its keys. Unknown keys are errors.
    std::map<std::string, std::string> params;
};

struct FaultParam {
    std::string name;
    std::string defaultValue; // as text; "" = derived from the snapshot (described in help)
    std::string help;
};

struct FaultInfo {
    std::string name;        // kebab-case, stable
    std::string description; // one line
    std::string check;       // the check id verify reports for it (allChecks())
    // The effect is by design only on metadata (the K/V, positions and tokens are intact):
    // drift against the clean state may be zero.
    bool metadataOnly = false;
    std::vector<FaultParam> params;
};

// Every fault, in a fixed order.
const std::vector<FaultInfo>& allFaults();
// nullptr for an unknown name.
const FaultInfo* findFault(std::string_view name);
nlohmann::json toJson(const FaultInfo& f); // {"name", "description", "check", ...}

// Applies fault `name` to `clean` (which is not modified). Errors name the fault and the
// parameter or snapshot field that prevents it (unknown fault, bad parameter, a cache dtype
// or architecture the fault does not apply to, a missing model).
Result<Snapshot> injectFault(std::string_view name, const Snapshot& clean,
                             const FaultContext& context);

// The session a runtime would continue from after restoring `faulty` despite its errors:
// restore() with force; for a cache whose K/V were cut while positions and mask were not
// (truncated-cache), the positions/mask beyond the cache are dropped first, because that is
// all the runtime could attend to. Errors when no cache can be built at all.
Result<Session> forcedSession(const Snapshot& faulty, std::shared_ptr<const Model> model);

struct FaultLabOptions {
    int steps = 16;      // drift steps (greedy)
    std::string workDir; // where the faulty .kvsnap files are written for verify; empty:
                         // a fresh folder under the system temp dir, removed after
    std::vector<std::string> faults; // empty: all
};

struct FaultLabRow {
    std::string fault;
    std::string check;              // the documented check
    bool caught = false;            // verify reported `check`
    std::vector<std::string> found; // ids verify reported (warnings and errors, in order)
    bool metadataOnly = false;
    std::optional<Equivalence> equivalence; // when verify computed it
    // Drift clean -> faulty (greedy, teacher-forced on the clean state's tokens; compare.h).
    // Step 0 compares the stored next-token logits; step 1 is the first step computed through
    // the restored (faulty) cache.
    double klStep0 = 0, klStep1 = 0, maxKl = 0;
    int firstDivergingStep = -1; // -1: no diverging token within `steps`
    int steps = 0;               // drift steps run
    // Where the row stopped. NotInjected / NotSaved: the fault does not apply to this state or
    // model (GPT-2 has no RoPE to rotate wrongly) or its file could not be written: nothing was
    // learned about the engine. Refused / ContinuationFailed: the forced restore or the
    // continuation raised an error: the engine flagged the fault.
    enum class Stage { Measured, NotInjected, NotSaved, Refused, ContinuationFailed };
    Stage stage = Stage::Measured;
    std::string error; // why, when stage != Measured
    bool effect() const { return klStep0 > 0 || klStep1 > 0 || firstDivergingStep >= 0; }
    bool applied() const { return stage != Stage::NotInjected && stage != Stage::NotSaved; }
    bool engineRaised() const {
        return stage == Stage::Refused || stage == Stage::ContinuationFailed;
    }
};
// "measured" | "not-injected" | "not-saved" | "refused" | "continuation-failed"
std::string stageName(FaultLabRow::Stage s);
nlohmann::json toJson(const FaultLabRow& r);

// One row of the fault lab: fault `name` with context.params injected into `clean`, saved to
// `file` and verified from it with context.model, continued forcibly and compared with `base`
// (the clean state restored) over `steps` greedy steps. faultLab() runs it for every fault with
// its documented defaults, the insights lab for variants (another offset, dtype); the row's
// stage says where it stopped.
FaultLabRow measureFault(std::string_view name, const Snapshot& clean, const FaultContext& context,
                         const Session& base, int steps, const std::string& file);

// Injects every fault (or options.faults) into `clean`, verifies each through a file with
// context.model, and measures drift against the clean state restored normally. Errors: no
// model, or the clean state itself cannot be restored. A fault that cannot be applied
// becomes a row with `error` set.
Result<std::vector<FaultLabRow>> faultLab(const Snapshot& clean, const FaultContext& context,
                                          const FaultLabOptions& options = {});

} // namespace kvscope::state
