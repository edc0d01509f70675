// `import`: states other engines write (llama.cpp ggsq/ggsn/slot files, Hugging Face
// past_key_values in safetensors) as kvscope snapshots,
// verified against the model before anything is written. The reading, import and verdict are
// core's (state/interop/llamacpp.h, state/verify/verifyfile.h).
#include "clicommon.h"
#include "state/interop/hfstate.h"
#include "state/interop/llamacpp.h"
#include "state/ledger/snapshotio.h"
#include "state/verify/verifyfile.h"
#include "util/fileio.h"

#include <filesystem>
#include <iomanip>
#include <iostream>
#include <unistd.h>

namespace kvscope::cli {

namespace {

using namespace kvscope::state;

struct ImportArgs {
    std::string file;
    ModelOptions model;
    std::string output;
    std::string format = "auto";
    int sequence = -1; // -1: the lowest present; a given --sequence is an id >= 0
    bool sequenceGiven = false;
    bool force = false;
    bool json = false;
};

// The input is a regular file that can be opened, or the failure says what it is instead
// ("<file>: not a regular file (it is a FIFO)", "... (it is a folder)", "cannot open file: No
// such file or directory"), before its magic or extension is read as a format's. The same
// check as every reader's (openRegularFile), so a FIFO is never waited on.
void checkInputFile(const std::string& path) {
    try {
        ::close(openRegularFile(path));
    } catch (const std::exception& e) {
        throw CliFailure{e.what()};
    }
}

void cmdImport(const ImportArgs& a) {
    checkOutputPath(a.output, "--output");
    if (a.format != "auto" && a.format != "llamacpp" && a.format != "safetensors")
        throw CliFailure{"unknown import format '" + a.format + "' (auto, llamacpp, safetensors)",
                         kExitUsage};
    if (a.sequenceGiven && a.sequence < 0)
        throw CliFailure{"--sequence " + std::to_string(a.sequence) +
                             ": a sequence id is 0 or more (leave --sequence out for the lowest "
                             "present)",
                         kExitUsage};
    checkInputFile(a.file);
    const bool llama = state::llamacpp::isStateFile(a.file);
    const bool hf =
        a.format == "safetensors" || (a.format == "auto" && !llama &&
                                      std::filesystem::path(a.file).extension() == ".safetensors");
    if (!hf && !llama)
        throw CliFailure{a.file + ": not a llama.cpp state file (no \"ggsq\"/\"ggsn\" magic)" +
                         (a.format == "auto" ? std::string(" nor a .safetensors file") : "")};
    auto model = loadModelOrFail(a.model, false);
    Imported imported;
    std::vector<int32_t> fileTokens;
    if (hf) {
        imported = state::hf::importSafetensors(a.file, model);
    } else {
        auto file = state::llamacpp::read(a.file);
        if (!file)
            throw CliFailure{file.message()};
        fileTokens = file.value().tokens;
        imported = state::llamacpp::import(file.value(), model, {.sequence = a.sequence});
    }
    const VerifyResult v = verifyImported(std::move(imported), model);
    const bool written = v.snapshot && (v.report.ok() || (a.force && !v.report.hasStructural()));
    if (written) {
        if (Status st = save(*v.snapshot, a.output); !st)
            throw CliFailure{st.message()};
    }
    if (a.json) {
        nlohmann::json j{{"file", a.file},
                         {"output", written ? nlohmann::json(a.output) : nlohmann::json()},
                         {"source", v.source},
                         {"cache_type", v.source.value("cache_type", nlohmann::json())},
                         {"ok", v.report.ok()},
                         {"violations", v.report.toJson()["violations"]}};
        if (v.snapshot) {
            j["tokens"] = v.snapshot->tokens;
            j["positions"] = v.snapshot->positions;
            j["lineage"] = {{"id", v.snapshot->lineage.id},
                            {"operation", v.snapshot->lineage.operation}};
        } else {
            j["tokens"] = fileTokens;
            j["positions"] = nlohmann::json::array();
        }
        if (v.equivalence)
            j["equivalence"] = toJson(*v.equivalence);
        printJson(j);
    } else {
        const auto& src = v.source;
        const auto version = src.value("version", nlohmann::json());
        std::cout << "source       " << src.value("engine", "") << " " << src.value("format", "")
                  << " "
                  << (version.is_string() ? version.get<std::string>() : "v" + version.dump())
                  << " (" << a.file << ", xxh3 " << src.value("hash", "") << ")\n";
        if (src.contains("cache_type"))
            std::cout << "cache        K " << src["cache_type"].value("k", "") << ", V "
                      << src["cache_type"].value("v", "")
                      << (src.value("v_transposed", false) ? " (transposed)" : "") << ", "
                      << src.value("cells", 0) << " cells"
                      << (src.contains("sequence")
                              ? " of sequence " + std::to_string(src.value("sequence", 0))
                              : std::string())
                      << "\n";
        if (v.snapshot)
            std::cout << "tokens       " << v.snapshot->tokens.size() << ", positions "
                      << (v.snapshot->positions.empty()
                              ? std::string("-")
                              : std::to_string(v.snapshot->positions.front()) + ".." +
                                    std::to_string(v.snapshot->positions.back()))
                      << "\n";
        for (const auto& x : v.report.violations)
            std::cout << std::left << std::setw(8) << severityName(x.severity) << x.id << "  "
                      << x.message << "\n";
        if (written)
            std::cout << "wrote " << a.output << "\n";
    }
    if (!written)
        throw CliFailure{a.file + (v.snapshot && !v.report.hasStructural()
                                       ? ": verification failed; nothing written (--force writes "
                                         "it anyway)"
                                       : ": cannot be imported onto this model; nothing written"),
                         kExitFailure};
}

} // namespace

void registerInteropCommands(CLI::App& app) {
    auto* cmd = app.add_subcommand(
        "import", "Import another engine's state as a snapshot: a llama.cpp state file (ggsq, "
                  "ggsn, server slot) or Hugging Face past_key_values (.safetensors)");
    auto a = std::make_shared<ImportArgs>();
    cmd->add_option("file", a->file, "llama.cpp state file or .safetensors past_key_values")
        ->required();
    addModelOptions(cmd, a->model);
    cmd->add_option("-o,--output", a->output, "Snapshot to write (.kvsnap)")->required();
    cmd->add_option("--format", a->format,
                    "Source format: auto (by magic, then extension), llamacpp, safetensors")
        ->capture_default_str();
    auto* sequence = cmd->add_option(
        "--sequence", a->sequence,
        "Sequence id (0 or more) to import from a session file (default: the lowest present)");
    cmd->add_flag("--force", a->force,
                  "Write the snapshot even when verification finds (non-structural) errors");
    addJsonFlag(cmd, a->json);
    cmd->callback([a, sequence] {
        a->sequenceGiven = sequence->count() > 0;
        cmdImport(*a);
    });
}

} // namespace kvscope::cli
