#include "state/verify/verifyfile.h"

#include "snapfile/format.h"
#include "state/interop/hfstate.h"
#include "state/interop/llamacpp.h"
#include "state/ledger/snapshotio.h"
#include "util/fileio.h"
#include "util/hash.h"

#include <cstring>
#include <filesystem>

namespace kvscope::state {

namespace {

uint32_t le32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}
uint64_t le64(const uint8_t* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
}

// Reads the 64-byte header ourselves (FORMAT.md) so that the common file faults get their
// own check ids before the container reader turns them into one error message.
bool checkHeader(const std::string& path, std::vector<Violation>& out) {
    uint64_t size = 0;
    uint8_t h[64] = {};
    try {
        const std::string head = readFileHead(path, 64, &size); // refuses FIFOs and devices
        std::memcpy(h, head.data(), head.size());
    } catch (const std::exception& e) {
        out.push_back(makeViolation("file.unreadable", e.what()));
        return false;
    }
    const auto& magic = snapfile::format::kMagic;
    if (size < magic.size() || std::memcmp(h, magic.data(), magic.size()) != 0) {
        out.push_back(makeViolation("file.magic", path +
                                                      ": not a state kvscope reads: no .kvsnap or "
                                                      "llama.cpp (ggsq/ggsn) magic bytes, and "
                                                      "not named .safetensors"));
        return false;
    }
    if (size < 64) {
        out.push_back(
            makeViolation("file.truncated", path + ": " + std::to_string(size) +
                                                " bytes, shorter than the 64-byte header"));
        return false;
    }
    const uint32_t version = le32(h + 8);
    if (version == 0 || version > snapfile::format::kVersion) {
        out.push_back(makeViolation(
            "format.version", path + ": format version " + std::to_string(version) +
                                  (version == 0 ? " is invalid"
                                                : " is newer than this kvscope supports (" +
                                                      std::to_string(snapfile::format::kVersion) +
                                                      "); upgrade kvscope")));
        return false;
    }
    if (hash64(h, 56) != le64(h + 56)) {
        out.push_back(
            makeViolation("file.checksum", path + ": the header checksum does not match"));
        return false;
    }
    const uint64_t required = le64(h + 16);
    if (required & ~snapfile::format::kKnownRequiredFeatures) {
        out.push_back(makeViolation(
            "format.features", path + ": requires unknown format features 0x" +
                                   hex64(required & ~snapfile::format::kKnownRequiredFeatures)));
        return false;
    }
    const uint64_t moff = le64(h + 32), msize = le64(h + 40);
    if (moff < snapfile::format::kHeaderSize) {
        out.push_back(makeViolation(
            "file.header", path + ": header field manifest_offset = " + std::to_string(moff) +
                               " lies inside the 64-byte header"));
        return false;
    }
    if (moff > UINT64_MAX - msize || moff + msize != size) {
        out.push_back(makeViolation("file.truncated",
                                    path + ": the header says the file ends at byte " +
                                        (moff > UINT64_MAX - msize ? std::string("(overflow)")
                                                                   : std::to_string(moff + msize)) +
                                        " but it has " + std::to_string(size) + " bytes"));
        return false;
    }
    return true;
}

} // namespace

nlohmann::json VerifyResult::toJson() const {
    nlohmann::json j = report.toJson();
    if (equivalence)
        j["equivalence"] = state::toJson(*equivalence);
    if (!source.is_null())
        j["source"] = source;
    return j;
}

VerifyResult verifySnapshot(const Snapshot& s, std::shared_ptr<const Model> model,
                            const VerifyOptions& options, std::vector<Violation> readViolations) {
    VerifyResult out;
    auto& v = out.report.violations;
    out.readViolations = readViolations;
    v = std::move(readViolations);
    try {
        // (Only a structural problem — an unreadable or mistyped blob — makes them meaningless;
        // a forceable finding of the reading, e.g. an import's, leaves the bytes sound.)
        const bool blobsOk = !out.report.hasStructural();
        // Content checks are meaningful only on what was read intact; the model checks
        // (config, fingerprints) need only the manifest and always run.
        if (blobsOk) {
            auto more = validateSnapshot(s, options.validate);
            v.insert(v.end(), more.begin(), more.end());
        }
        if (model) {
            auto more = validateAgainstModel(s, *model);
            v.insert(v.end(), more.begin(), more.end());
        }
        if (model && options.equivalence && !out.report.hasErrors() && !s.tokens.empty() &&
            !s.lastLogits.empty()) {
            auto restored = restore(s, model, {.force = true, .validate = options.validate});
            if (!restored) {
                v.push_back(makeViolation("logits.equivalence",
                                          "could not restore: " + restored.message()));
                return out;
            }
            auto eq = checkEquivalence(restored.value().session, s.lastLogits, options.profile);
            if (!eq) {
                v.push_back(makeViolation("logits.equivalence", eq.message()));
                return out;
            }
            out.equivalence = eq.value();
            if (!eq.value().equivalent)
                v.push_back(makeViolation("logits.equivalence", describeMismatch(eq.value())));
        }
    } catch (const std::exception& e) {
        v.push_back(makeViolation("model.config", std::string("verification failed: ") + e.what()));
    }
    return out;
}

VerifyResult verifyImported(Imported imported, const std::shared_ptr<const Model>& model,
                            const VerifyOptions& options) {
    VerifyResult out;
    if (imported.snapshot) {
        out = verifySnapshot(*imported.snapshot, model, options, std::move(imported.violations));
        out.snapshot = std::move(imported.snapshot);
    } else {
        out.report.violations = std::move(imported.violations);
    }
    out.source = std::move(imported.source);
    return out;
}

VerifyResult verifyFile(const std::string& path, std::shared_ptr<const Model> model,
                        const VerifyOptions& options) {
    VerifyResult out;
    auto& v = out.report.violations;
    try {
        // A llama.cpp state (ggsq, ggsn, llama-server slot): imported onto the model, then the
        // same verdict. The file names no model, so without one only its structure is checked.
        if (state::llamacpp::isStateFile(path)) {
            auto file = state::llamacpp::read(path);
            if (!file) {
                v.push_back(makeViolation("import.file", file.message()));
                return out;
            }
            return verifyImported(state::llamacpp::import(file.value(), model), model, options);
        }
        // Hugging Face past_key_values in safetensors: the same, through the HF importer. By
        // name, so that a damaged one gets the safetensors reader's words, not a .kvsnap's.
        if (std::filesystem::path(path).extension() == ".safetensors")
            return verifyImported(state::hf::importSafetensors(path, model), model, options);
        if (!checkHeader(path, v))
            return out;
        // Mapped, like load(): uncompressed K/V are checked and kept in place, so the snapshot
        // a verify returns restores without a copy too.
        auto reader = snapfile::Reader::openMapped(path);
        if (!reader) {
            const std::string& msg = reader.message();
            v.push_back(makeViolation(
                msg.find("checksum") != std::string::npos ? "file.checksum" : "manifest.invalid",
                msg));
            return out;
        }
        auto snapshot = readLedger(reader.value(), true, v);
        if (!snapshot)
            return out;
        out = verifySnapshot(*snapshot, model, options, std::move(v));
        out.snapshot = std::move(snapshot);
    } catch (const std::exception& e) {
        v.push_back(makeViolation("file.unreadable", path + ": " + e.what()));
    }
    return out;
}

} // namespace kvscope::state
