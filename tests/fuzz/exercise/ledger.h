// The ledger manifest (state/ledger/manifest.h) of a fuzzed input — a .kvsnap's document, or
// the `kvscope_manifest` metadata of a past_key_values safetensors file — through the
// torch-free part of the ledger reader (fuzz_snapfile, fuzz_safetensors, tst_fuzzregressions):
// snapshotFromManifest either accepts it or throws a KvError naming the manifest field (never a
// library's exception: that is the `[json.exception...]` text issue 44 found in import notes);
// an accepted manifest, head_mask (ledger version 2) included, describes itself, and what
// toManifest writes back reads again with the same geometry.
//
// The import path behind it (hfstate.cpp, llamacppimport.cpp) binds the state to a Model and
// cannot run without libtorch; the hostile corpus (tests/hostile) covers it end to end.
#pragma once

#include "check.h"
#include "state/ledger/manifest.h"

#include <nlohmann/json.hpp>
#include <string>

namespace kvscope::fuzz {

inline Status exerciseLedger(const nlohmann::json& manifest) {
    state::Snapshot s;
    try {
        s = state::snapshotFromManifest(manifest);
    } catch (const KvError& e) {
        // The manifest's own fields ("manifest: cache.length ..."), its version, or the parts
        // parsed by the engine's value types ("model config: missing field 'rope_theta'").
        const std::string what = e.what();
        for (const char* part : {"manifest", "ledger version", "model config", "sampler"})
            if (what.find(part) != std::string::npos)
                return Status::ok();
        return Status::error("a ledger error that names no manifest field: " + what);
    }
    // A head mask the ledger accepts was bounded by it before anything could be allocated.
    if (manifest.is_object() && manifest.contains("head_mask")) {
        const auto& hm = manifest["head_mask"];
        if (!hm.is_object() || !hm.contains("count") || !hm["count"].is_number_integer())
            return Status::error("an accepted head_mask without an integer count");
        if (hm["count"].get<int64_t>() < 0)
            return Status::error("an accepted head_mask with a negative count");
    }
    try {
        (void)state::describeManifest(manifest);
    } catch (const KvError&) {
        // describeManifest may refuse what it cannot show; it must not throw anything else.
    }
    const nlohmann::json written = state::toManifest(s);
    state::Snapshot again;
    try {
        again = state::snapshotFromManifest(written);
    } catch (const KvError& e) {
        return Status::error(std::string("toManifest wrote a manifest its reader refuses: ") +
                             e.what());
    }
    if (again.layers.size() != s.layers.size() || again.kvHeads != s.kvHeads ||
        again.headDim != s.headDim || again.cacheLength != s.cacheLength ||
        again.nextPosition != s.nextPosition)
        return Status::error("a manifest read, written and read again changed its geometry");
    return Status::ok();
}

} // namespace kvscope::fuzz
