// llama.cpp states as kvscope snapshots and back. The files themselves (layout, cache types,
// reader) are formats/llamacppstate.h; docs/INTEROP.md describes both. A llama.cpp state carries
// no model identity at all — no architecture (ggsq), no hash, no config — so importing needs the
// model it is meant for, and the key provenance check of the validation core (layer-0 keys
// recomputed from the tokens) is what tells a wrong model. What llama.cpp does not store (logits,
// sampler, prompt meta) is recorded as absent; the last step's logits are recomputed and marked so.
//
// Thread-safety: free functions over values.
#pragma once

#include "formats/llamacppstate.h"
#include "state/interop/imported.h"

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kvscope {
class Model;
}

namespace kvscope::state::llamacpp {

using namespace kvscope::llamacpp;

// --- import ---

struct ImportOptions {
    int32_t sequence = -1; // the sequence to import from a ggsn; -1: the lowest present
};

// The state as a kvscope snapshot on `model`: cells selected for one sequence and ordered by
// position, keys brought to kvscope's layout (Hadamard rotation undone, llama-family
// interleaved pairs to rotate_half), values untransposed, everything dequantized to the
// model's cache dtype (Model::cacheDtype); the last step's logits recomputed; lineage `import`.
Imported import(const StateFile& file, std::shared_ptr<const Model> model,
                const ImportOptions& options = {});

// --- export ---

struct ExportOptions {
    std::string keyType = "f16"; // any cacheType name
    std::string valueType = "f16";
    bool transposeValues = false; // llama.cpp without flash attention
    int32_t sequence = 0;         // the id written in the cell records
};
// A kvscope snapshot as a ggsq v3 file llama.cpp can load with llama_state_seq_load_file:
// cells in position order, keys in llama.cpp's layout for the model's architecture (and
// Hadamard-rotated for quantized keys where llama.cpp would rotate them). Refuses a snapshot
// whose tokens and cells differ in number or whose mask hides cells (llama.cpp has no mask).
Result<std::vector<uint8_t>> exportSequence(const Snapshot& s, const ExportOptions& options = {});

} // namespace kvscope::state::llamacpp
