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

#include <functional>
#include <optional>

namespace kvscope::state {

struct SaveOptions {
    snapfile::WriteOptions write; // compression level, shuffle
};

Status save(const Snapshot& s, const std::string& path, const SaveOptions& options = {});

// capture(session, options) saved to `path` without a copy of the whole cache: each layer's K
// and V are copied from the live cache as they are written, so the peak is one layer's copy
// (capture() then save() holds the session's cache and all of its copy at once: 1.07 GB for
// an 8B model's 4,096-token f32 cache). The file holds what save(capture(...)) writes; only the
// lineage's id and time differ. options.cacheBytes is ignored.
Status saveCapture(const Session& session, const CaptureOptions& options, const std::string& path,
                   const SaveOptions& save = {});

// A layer's K (value = false) or V bytes, for writers that fetch them as they write.
using LayerBytesFn = std::function<Bytes(std::size_t layer, bool value)>;

// Streams the blobs and the manifest of `s` into an open writer (used by save()); with
// `layerBytes`, each layer's K/V come from it, one at a time, instead of from s.layers.
Status writeSnapshot(const Snapshot& s, snapfile::Writer& writer,
                     const LayerBytesFn& layerBytes = {});

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
