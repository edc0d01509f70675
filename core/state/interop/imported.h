// What importing another engine's state gives: a snapshot (when the state fits the model), the
// findings of the import itself, and where the state came from. Shared by the llama.cpp
// (llamacpp.h) and Hugging Face (hfstate.h) importers.
#pragma once

#include "state/ledger/snapshot.h"
#include "state/verify/validate.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

namespace kvscope::state {

struct Imported {
    std::optional<Snapshot> snapshot;  // empty when the state does not fit the model at all
    std::vector<Violation> violations; // import.* findings (the file, its layout, sequences)
    nlohmann::json source;             // {"engine", "format", "version", "file", "hash", ...}
};

} // namespace kvscope::state
