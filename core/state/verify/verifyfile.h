// Verifying a snapshot (file or value): the full invariant report for a .kvsnap file (or a
// llama.cpp state file, imported first: state/interop/llamacpp.h) and a model,
// without continuing the generation. File-level problems (not a snapshot, unknown format
// version, truncated, checksum failures, blobs whose dtype disagrees with the manifest) are
// reported as violations too, so every fault is named rather than surfacing as a bare
// load error. With a model and no error-severity violation so far, the state is restored
// and the equivalence verdict is computed (restore.h).
//
// Thread-safety: free function; reads the file once.
#pragma once

#include "state/interop/imported.h"
#include "state/verify/restore.h"
#include "state/verify/validate.h"

#include <memory>
#include <optional>

namespace kvscope::state {

struct VerifyOptions {
    ValidateOptions validate{};
    bool equivalence = true; // needs a model
    ToleranceProfile profile = ToleranceProfile::SameDevice;
};

struct VerifyResult {
    Report report;
    std::optional<Snapshot> snapshot;       // what could be read (tensors may be missing)
    std::optional<Equivalence> equivalence; // when computed
    // The violations met while reading the file (the first ones of report): they travel
    // with a snapshot kept in memory, so its later verdicts include them.
    std::vector<Violation> readViolations;
    // For a file another engine wrote (a llama.cpp state): where it came from
    // ({"engine", "format", "version", "file", "hash", "cache_type", ...}); null otherwise.
    nlohmann::json source;
    nlohmann::json toJson() const; // {"ok", "violations", "equivalence"?, "source"?}
};

VerifyResult verifyFile(const std::string& path, std::shared_ptr<const Model> model,
                        const VerifyOptions& options = {});

// The same verdict for a snapshot in memory: what verifyFile reports after reading a file,
// given the violations that reading produced (`readViolations`; none for a snapshot made in
// this process). This is kvscope's one verdict: `kvscope-cli verify`, the GUI's Validation
// panel, its restore dialog and its status light all come from it. `snapshot` stays empty.
VerifyResult verifySnapshot(const Snapshot& s, std::shared_ptr<const Model> model,
                            const VerifyOptions& options = {},
                            std::vector<Violation> readViolations = {});

// The verdict of another engine's state (state/interop/): its import findings, then, when it fits
// the model at all, verifySnapshot of the imported snapshot (kept in `snapshot`), and `source`.
// What verifyFile gives for such a file and `kvscope-cli import` decides on.
VerifyResult verifyImported(Imported imported, const std::shared_ptr<const Model>& model,
                            const VerifyOptions& options = {});

} // namespace kvscope::state
