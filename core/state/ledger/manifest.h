// The ledger manifest: the JSON document a .kvsnap file carries beside its tensor blobs
// (LEDGER.md documents every field). Converting a Snapshot to it and back; the tensors
// themselves travel as blobs named by blobName().
// Thread-safety: pure functions.
#pragma once

#include "state/ledger/snapshot.h"

#include <nlohmann/json.hpp>
#include <string>

namespace kvscope::state {

// Blob names: "layers.<l>.k", "layers.<l>.v", "tokens", "positions", "mask", "logits".
std::string layerBlobName(std::size_t layer, bool value);

// Everything but the tensor bytes (shapes, dtypes, counts, fingerprints, lineage, ...).
nlohmann::json toManifest(const Snapshot& s);

// Parses a manifest into a Snapshot without tensor data (layers hold null buffers; tokens,
// positions, mask and logits are empty — the blobs hold them). Throws KvError naming the
// field on a missing or mistyped field, a negative count, or an unsupported ledger version
// (message starts with "ledger version").
Snapshot snapshotFromManifest(const nlohmann::json& manifest);

// Short, human-readable summary lines of a manifest (for `inspect`).
std::string describeManifest(const nlohmann::json& manifest);

} // namespace kvscope::state
