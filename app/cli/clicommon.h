// Shared helpers for kvscope-cli's commands: option groups, model loading, output.
#pragma once

#include "engine/model.h"
#include "engine/session.h"
#include "engine/sampler.h"
#include "state/ledger/snapshot.h"
#include "state/verify/restore.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>

namespace kvscope::cli {

// Exit codes: 0 ok, 1 failure, 2 usage.
// The whole command line program (cli.cpp): parses argv, runs the command, returns the exit
// code below.
int run(int argc, char** argv);
// Ends the process with `code` once run() has returned: flushes the output streams and exits
// without running static destructors. Those of Debian's libtorch unregister every operator one
// by one: 0.07 s of a 0.7 s `random-model --list`, and in a forked child of the hostile
// corpus's zygote most of a short case (every dispatcher page it writes is copied first).
// Everything kvscope writes is complete (files atomically renamed, streams flushed) when run()
// returns.
[[noreturn]] void exitNow(int code);

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// Thrown by commands to end with a message and an exit code.
struct CliFailure {
    std::string message;
    int code = kExitFailure;
};

struct ModelOptions {
    std::string model;
    std::string tokenizer;
    std::string device = "cpu";
    std::string dtype;
    bool hugePages = false;
    std::string cacheDtype; // empty: the compute dtype (LoadOptions::cacheDtype)
};

struct SamplerOptions {
    float temperature = 1.0f;
    float topP = 0.9f;
    int topK = 0;
    uint64_t seed = 42;
    // The flags as settings, checked by core's checkSamplerSettings (CliFailure, usage exit).
    SamplerSettings settings() const;
};

// Fails early (usage exit) when an output path is one the writers refuse (a folder, device,
// FIFO or socket; core's resolveOutputPath), before any model is loaded or token generated.
void checkOutputPath(const std::string& path, const char* flag);

void addModelOptions(CLI::App* cmd, ModelOptions& o, bool required = true);
// A --profile value as a tolerance profile (usage exit naming the three).
state::ToleranceProfile profileOrFail(const std::string& name);
// The check of a --cache-dtype value (usage exit: "--cache-dtype q4: f32, f16 or bf16").
CLI::Validator cacheDtypeCheck();
void addSamplerOptions(CLI::App* cmd, SamplerOptions& o);
void addJsonFlag(CLI::App* cmd, bool& json);
// Adds to every option of `app` and its subcommands a check of each value by the option's type
// (usage exit): integers decimal and in range (no sign on unsigned ones), floats finite, no
// empty value except for the texts an empty string is meaningful for (--prompt, --text, ...).
void addValueChecks(CLI::App& app);

std::shared_ptr<const Model> loadModelOrFail(const ModelOptions& o, bool requireTokenizer);
// Loads a .kvsnap snapshot; CliFailure naming the problem (and `verify` for the full report).
state::Snapshot loadSnapshotOrFail(const std::string& path);
void printJson(const nlohmann::json& j);

// Registers the model commands: info, generate, logits, tokenize.
void registerModelCommands(CLI::App& app);
// `survive` (cmdsurvive.cpp): the survival lab.
void registerSurviveCommand(CLI::App& app);
// Registers the state commands (cmdstate.cpp): snapshots, restore/verify/replay/drift, export,
// render-chat.
void registerStateCommands(CLI::App& app);
// `attention` (cmdattention.cpp), registered with the state commands.
void registerAttentionCommand(CLI::App& app);
// `attribute` (cmdattribute.cpp), registered with the state commands.
void registerAttributeCommand(CLI::App& app);
// `localize` (cmdlocalize.cpp), registered with the state commands.
void registerLocalizeCommand(CLI::App& app);
// `branches` (cmdbranches.cpp), registered with the state commands.
void registerBranchesCommand(CLI::App& app);
// Captures `session` (with the sampler's state and a plain-prompt segment map) and saves it
// as a .kvsnap snapshot; throws CliFailure. Used by `generate --snapshot-out` (cmdstate.cpp).
void saveGenerateSnapshot(const std::string& path, const Session& session, const Sampler& sampler,
                          const std::vector<int32_t>& prompt, bool promptFromIds);

} // namespace kvscope::cli
