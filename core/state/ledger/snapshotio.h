// Saving and loading snapshots as .kvsnap files (container: core/snapfile/FORMAT.md; ledger
// manifest: LEDGER.md).
//
// save() streams every K/V layer straight into the file (zstd + byte shuffle) and writes
// atomically: an existing file at the path is untouched unless the new one is complete.
// load() is strict: it fails on the first problem. It maps the file: K/V blobs stored
// uncompressed (kvscope's fp32 caches) are checksummed and then used in place, not copied
// (ByteBuffer), and restore() builds the cache over them (cacheFromSnapshot). readLedger() is the
// tolerant form the verifier uses: it records every problem it meets as a Violation and returns
// what it could read. Every count and shape from the file is checked against the manifest and the
// container's bounds before anything is allocated from it.
//
// Thread-safety: free functions; distinct files may be saved/loaded concurrently.
#pragma once

#include "snapfile/reader.h"
#include "snapfile/writer.h"
#include "state/ledger/snapshot.h"
#include "state/verify/validate.h"

#include <optional>

namespace kvscope::state {

struct SaveOptions {
    snapfile::WriteOptions write; // compression level, shuffle
};

Status save(const Snapshot& s, const std::string& path, const SaveOptions& options = {});

// Streams the blobs and the manifest of `s` into an open writer (used by save()).
Status writeSnapshot(const Snapshot& s, snapfile::Writer& writer);

// Reads the whole snapshot; any error-severity problem is an error naming the file.
Result<Snapshot> load(const std::string& path);

// The ledger manifest only (no tensor data is read): the GUI's snapshot list, `inspect`.
Result<nlohmann::json> loadManifest(const std::string& path);

// Tolerant read from an open container: problems (ledger version, missing or mistyped
// fields, blobs whose dtype/shape disagree with the manifest, checksum failures) are
// appended to `problems`. Returns nullopt only when the manifest itself is unusable.
// With tensors = false only the manifest is interpreted.
std::optional<Snapshot> readLedger(const snapfile::Reader& reader, bool tensors,
                                   std::vector<Violation>& problems);

} // namespace kvscope::state
