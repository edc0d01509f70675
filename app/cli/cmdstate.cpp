// State commands: inspect, verify, continue, replay, drift, export, render-chat, and the
// snapshot writer behind `generate --snapshot-out`. All take --json.
// Exit codes: 0 ok, 1 failure (including a verify with error-severity violations), 2 usage.
#include "chat/template.h"
#include "clicommon.h"
#include "engine/session.h"
#include "formats/jsondepth.h"
#include "formats/jsonerror.h"
#include "snapfile/reader.h"
#include "state/ledger/chatprompt.h"
#include "state/probes/compare.h"
#include "state/interop/llamacpp.h"
#include "state/ledger/export.h"
#include "state/ledger/manifest.h"
#include "state/verify/restore.h"
#include "state/ledger/snapshotio.h"
#include "state/verify/verifyfile.h"
#include "tokenizer/tokenizer.h"
#include "util/fileio.h"
#include "workspace/workspace.h"

#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <iostream>

namespace kvscope::cli {

namespace {

using namespace kvscope::state;

void printViolations(const Report& r) {
    for (const auto& v : r.violations) {
        std::cout << std::left << std::setw(8) << severityName(v.severity) << v.id << "  "
                  << v.message;
        if (v.layer >= 0)
            std::cout << " [layer " << v.layer << "]";
        std::cout << "\n";
    }
}

std::string decodeTokens(const Model& model, int32_t prev, const std::vector<int32_t>& ids) {
    auto tok = model.tokenizer();
    if (!tok)
        return {};
    std::string text;
    for (int32_t id : ids) {
        text += tok->decodeNext(prev, id);
        prev = id;
    }
    return text;
}

void cmdInspect(const std::string& path, bool json) {
    auto r = snapfile::Reader::open(path);
    if (!r)
        throw CliFailure{r.message()};
    // The container is sound; the ledger inside may still be unreadable: then the document is
    // still shown (it is what there is to inspect) and the command fails naming the field.
    std::string ledgerError;
    try {
        (void)snapshotFromManifest(r.value().manifest());
    } catch (const std::exception& e) {
        ledgerError = e.what();
    }
    if (json)
        printJson(r.value().document());
    else
        std::cout << "file         " << path << " (" << r.value().fileSize() << " bytes, format v"
                  << r.value().formatVersion() << ", " << r.value().blobs().size() << " blobs)\n"
                  << describeManifest(r.value().manifest());
    if (!ledgerError.empty())
        throw CliFailure{path + ": the ledger is unreadable: " + ledgerError};
}

struct VerifyArgs {
    std::string snapshot;
    ModelOptions model;
    std::string profile = "same-device";
    bool json = false;
};

void cmdVerify(const VerifyArgs& a) {
    const auto profile = profileOrFail(a.profile);
    auto model = loadModelOrFail(a.model, false);
    auto v = verifyFile(a.snapshot, model, {.profile = profile});
    if (a.json) {
        printJson(v.toJson());
    } else {
        printViolations(v.report);
        if (v.equivalence) {
            const auto& c = v.equivalence->comparison;
            std::cout << "equivalence  " << (v.equivalence->equivalent ? "yes" : "NO") << " ("
                      << profileName(profile) << "): KL " << c.kl << ", max |dlogit| " << c.maxAbs
                      << ", top-1 " << (c.top1Agree ? "agrees" : "differs") << ", top-5 overlap "
                      << c.topKOverlap << "/5\n";
        }
        std::cout << (v.report.ok() ? "OK" : "FAILED") << ": " << v.report.violations.size()
                  << " finding(s)\n";
    }
    if (!v.report.ok())
        throw CliFailure{a.snapshot + ": verification failed", kExitFailure};
}

struct ContinueArgs {
    std::string snapshot;
    ModelOptions model;
    int steps = 64;
    bool force = false;
    std::string profile = "same-device";
    bool json = false;
    std::string snapshotOut;
    std::optional<float> temperature;
    std::optional<uint64_t> seed;
};

void cmdContinue(const ContinueArgs& a) {
    checkOutputPath(a.snapshotOut, "--snapshot-out");
    const ToleranceProfile profile = profileOrFail(a.profile);
    auto model = loadModelOrFail(a.model, false);
    const Snapshot snap = loadSnapshotOrFail(a.snapshot);
    // Built with room for the steps: a cache used in place from the file would be copied
    // whole by the first of them.
    auto restored = restore(snap, model, {.force = a.force, .room = a.steps, .profile = profile});
    if (!restored)
        throw CliFailure{a.snapshot + ": " + restored.message()};
    auto& r = restored.value();
    if (a.temperature || a.seed) {
        // The recorded sampler, overridden; a new seed (or a new temperature) restarts the RNG.
        SamplerSettings st = r.sampler.settings();
        if (a.temperature)
            st.temperature = *a.temperature;
        if (a.seed)
            st.seed = *a.seed;
        if (Status ok = checkSamplerSettings(st, "--temperature/--seed"); !ok)
            throw CliFailure{ok.message(), kExitUsage};
        r.sampler = Sampler(st);
    }
    const int32_t last = snap.tokens.empty() ? -1 : snap.tokens.back();
    auto gen = r.session.generate(a.steps, r.sampler);
    if (!gen) {
        // A forced restore carries what verify found: usually the cause (NaN keys, logits).
        std::string why = a.snapshot + ": " + gen.message();
        if (r.report.hasErrors())
            why += "; the snapshot was restored with --force past: " + describeErrors(r.report);
        throw CliFailure{why};
    }
    const std::string text = decodeTokens(*model, last, gen.value().tokens);
    if (!a.snapshotOut.empty()) {
        CaptureOptions co;
        co.sampler = &r.sampler;
        co.prompt = snap.prompt;
        co.parentId = snap.lineage.id;
        co.operation = "continue";
        co.parameters = {{"steps", a.steps}, {"forced", a.force}};
        co.parent = &snap; // an evicted state's gaps stay recorded
        auto s = capture(r.session, co);
        if (!s)
            throw CliFailure{s.message()};
        if (Status st = save(s.value(), a.snapshotOut); !st)
            throw CliFailure{st.message()};
    }
    if (a.json) {
        printJson({{"tokens", gen.value().tokens},
                   {"text", text},
                   {"stop_reason", gen.value().stopReason},
                   {"warnings", r.report.toJson()["violations"]}});
    } else {
        if (!model->tokenizer())
            for (int32_t id : gen.value().tokens)
                std::cout << id << " ";
        std::cout << text << "\n";
    }
}

struct ReplayArgs {
    std::string snapshot;
    ModelOptions model;
    double threshold = 0;
    bool json = false;
};

void cmdReplay(const ReplayArgs& a) {
    auto model = loadModelOrFail(a.model, false);
    const Snapshot snap = loadSnapshotOrFail(a.snapshot);
    auto r = replay(snap, model, a.threshold);
    if (!r)
        throw CliFailure{a.snapshot + ": " + r.message()};
    const auto& c = r.value().cache;
    if (a.json) {
        printJson(toJson(r.value()));
        return;
    }
    if (!c.mismatch.empty()) {
        std::cout << "cache shapes differ: " << c.mismatch << "\n";
        return;
    }
    std::cout << "layer  max|dK|      max|dV|      cos K      cos V      first diverging pos\n";
    for (const auto& d : c.layers)
        std::cout << std::setw(5) << d.layer << "  " << std::setw(11) << d.keyMaxAbs << "  "
                  << std::setw(11) << d.valueMaxAbs << "  " << std::setw(9) << d.keyCosine << "  "
                  << std::setw(9) << d.valueCosine << "  " << d.firstDivergingPosition << "\n";
    std::cout << "threshold " << c.threshold << ": "
              << (c.firstDivergingLayer < 0
                      ? "replay matches the restored cache"
                      : "first divergence at layer " + std::to_string(c.firstDivergingLayer) +
                            ", position " + std::to_string(c.firstDivergingPosition))
              << "\npositions " << (r.value().positionsMatch ? "are 0..n-1" : "are NOT 0..n-1")
              << "; last-step logits max |dlogit| " << r.value().logits.maxAbs << "\n";
}

struct DriftArgs {
    std::string a, b;
    ModelOptions model;
    int steps = 32;
    bool force = false;
    std::string profile = "same-device";
    bool json = false;
};

void cmdDrift(const DriftArgs& a) {
    const ToleranceProfile profile = profileOrFail(a.profile);
    auto model = loadModelOrFail(a.model, false);
    const Snapshot sa = loadSnapshotOrFail(a.a), sb = loadSnapshotOrFail(a.b);
    auto outcome =
        ws::driftSnapshots(sa, sb, model, a.steps, a.force, profile, {"A " + a.a, "B " + a.b});
    if (!outcome)
        throw CliFailure{outcome.message()};
    const auto& d = outcome.value().result;
    if (a.json) {
        printJson(outcome.value().toJson());
        return;
    }
    std::cout << "step  token  B's own  KL           max|dlogit|  top1  top5\n";
    for (const auto& s : d.steps)
        std::cout << std::setw(4) << s.step << "  " << std::setw(5) << s.tokenA << "  "
                  << std::setw(7) << s.ownTokenB << "  " << std::setw(11) << s.logits.kl << "  "
                  << std::setw(11) << s.logits.maxAbs << "  "
                  << (s.logits.top1Agree ? "yes " : "NO  ") << "  " << s.logits.topKOverlap
                  << "/5\n";
    std::cout << "first diverging token: "
              << (d.firstDivergingStep < 0 ? std::string("none")
                                           : "step " + std::to_string(d.firstDivergingStep))
              << "; max KL " << d.maxKl << ", max |dlogit| " << d.maxAbs << "\n";
    const auto& t = outcome.value().tolerance;
    std::cout << "tolerance (" << profileName(profile) << "): KL <= " << t.maxKl
              << ", max |dlogit| <= " << t.maxAbsLogit << "; "
              << outcome.value().stepsOutsideTolerance() << " of " << d.steps.size()
              << " steps outside it\n";
}

struct ExportArgs {
    std::string snapshot, format = "safetensors", output;
    std::string keyType = "f16", valueType = "f16";
    bool transposeValues = false;
    bool json = false;
};

void cmdExport(const ExportArgs& a) {
    const std::string& path = a.snapshot;
    const std::string& format = a.format;
    const std::string& out = a.output;
    if (format != "safetensors" && format != "llamacpp")
        throw CliFailure{"unknown export format '" + format +
                             "' (supported: safetensors, llamacpp)",
                         kExitUsage};
    checkOutputPath(out, "--output");
    const Snapshot snap = loadSnapshotOrFail(path);
    if (format == "llamacpp") {
        auto bytes = state::llamacpp::exportSequence(
            snap,
            {.keyType = a.keyType, .valueType = a.valueType, .transposeValues = a.transposeValues});
        if (!bytes)
            throw CliFailure{path + ": " + bytes.message()};
        try {
            writeFileAtomic(out, bytes.value().data(), bytes.value().size());
        } catch (const std::exception& e) {
            throw CliFailure{e.what()};
        }
    } else if (Status st = exportSafetensors(snap, out); !st) {
        throw CliFailure{st.message()};
    }
    if (a.json)
        printJson({{"output", out}, {"format", format}, {"layers", snap.layers.size()}});
    else
        std::cout << "wrote " << out << " (" << snap.layers.size() << " layers, "
                  << snap.cacheLength << " positions)\n";
}

struct RenderArgs {
    std::string templatePath, messagesPath;
    bool addGenerationPrompt = false;
    std::vector<std::string> sets;
    bool json = false;
};

void cmdRenderChat(const RenderArgs& a) {
    std::string source, messagesText;
    try {
        source = readFileText(a.templatePath);
        messagesText = readFileText(a.messagesPath);
    } catch (const std::exception& e) {
        throw CliFailure{e.what()};
    }
    auto tmpl = chat::Template::parse(source, a.templatePath);
    if (!tmpl)
        throw CliFailure{tmpl.message()};
    nlohmann::ordered_json messages;
    try {
        checkJsonDepth(messagesText, a.messagesPath);
        messages = nlohmann::ordered_json::parse(messagesText);
    } catch (const KvError& e) {
        throw CliFailure{e.what()};
    } catch (const std::exception& e) {
        throw CliFailure{a.messagesPath +
                         ": not valid JSON: " + describeJsonError(e, messagesText)};
    }
    chat::RenderOptions o;
    if (messages.is_object() && messages.contains("messages")) {
        // {"messages": [...], "add_generation_prompt": ..., other variables...}
        for (const auto& [k, v] : messages.items())
            if (k != "messages" && k != "add_generation_prompt")
                o.extraVariables[k] = v;
        if (messages.contains("add_generation_prompt") &&
            messages["add_generation_prompt"].is_boolean())
            o.addGenerationPrompt = messages["add_generation_prompt"].get<bool>();
        messages = nlohmann::ordered_json(messages["messages"]);
    }
    if (!messages.is_array())
        throw CliFailure{a.messagesPath + ": expected a JSON array of messages"};
    o.addGenerationPrompt = o.addGenerationPrompt || a.addGenerationPrompt;
    for (const auto& s : a.sets) {
        const auto eq = s.find('=');
        if (eq == std::string::npos || eq == 0)
            throw CliFailure{"--set expects NAME=VALUE, got '" + s + "'", kExitUsage};
        const std::string name = s.substr(0, eq), value = s.substr(eq + 1);
        // JSON when it parses (true, 3, "x", [..]); otherwise the literal string.
        auto parsed = nlohmann::ordered_json::parse(value, nullptr, false);
        o.extraVariables[name] = parsed.is_discarded() ? nlohmann::ordered_json(value) : parsed;
    }
    auto text = tmpl.value().render(messages, o);
    if (!text)
        throw CliFailure{text.message()};
    if (a.json)
        printJson({{"text", text.value()}});
    else
        std::cout << text.value();
}

} // namespace

void saveGenerateSnapshot(const std::string& path, const Session& session, const Sampler& sampler,
                          const std::vector<int32_t>& prompt, bool promptFromIds) {
    CaptureOptions co;
    co.sampler = &sampler;
    co.prompt = plainPromptMeta(prompt, session.model()->config().bosId,
                                promptFromIds ? "explicit" : "tokenizer");
    co.operation = "generate";
    if (Status st = saveCapture(session, co, path); !st)
        throw CliFailure{st.message()};
}

void registerStateCommands(CLI::App& app) {
    registerAttentionCommand(app);
    registerAttributeCommand(app);
    registerLocalizeCommand(app);
    registerBranchesCommand(app);
    {
        auto* cmd =
            app.add_subcommand("inspect", "Print a snapshot's manifest (no tensors are read)");
        auto path = std::make_shared<std::string>();
        auto json = std::make_shared<bool>(false);
        cmd->add_option("snapshot", *path, "Snapshot file (.kvsnap)")->required();
        addJsonFlag(cmd, *json);
        cmd->callback([=] { cmdInspect(*path, *json); });
    }
    {
        auto* cmd =
            app.add_subcommand("verify", "Check every invariant of a snapshot against a model");
        auto a = std::make_shared<VerifyArgs>();
        cmd->add_option("snapshot", a->snapshot,
                        "Snapshot file (.kvsnap) or llama.cpp state file (ggsq, ggsn, slot)")
            ->required();
        addModelOptions(cmd, a->model);
        cmd->add_option("--profile", a->profile,
                        "Equivalence tolerance: exact, same-device, cross-device")
            ->capture_default_str();
        addJsonFlag(cmd, a->json);
        cmd->callback([a] { cmdVerify(*a); });
    }
    {
        auto* cmd = app.add_subcommand("continue", "Restore a snapshot and generate more tokens");
        auto a = std::make_shared<ContinueArgs>();
        cmd->add_option("snapshot", a->snapshot, "Snapshot file (.kvsnap)")->required();
        addModelOptions(cmd, a->model);
        cmd->add_option("-n,--steps", a->steps, "New tokens to generate")->capture_default_str();
        cmd->add_flag("--force", a->force,
                      "Restore even when verification finds errors (a failed equivalence "
                      "verdict included)");
        cmd->add_option("--profile", a->profile,
                        "Equivalence tolerance the restore must meet, as verify's: exact, "
                        "same-device, cross-device")
            ->capture_default_str();
        cmd->add_option("--snapshot-out", a->snapshotOut, "Snapshot the state after continuing");
        cmd->add_option("--temperature", a->temperature,
                        "Override the recorded sampler's temperature (0 = greedy)");
        cmd->add_option("--seed", a->seed, "Override the recorded sampler's seed");
        addJsonFlag(cmd, a->json);
        cmd->callback([a] { cmdContinue(*a); });
    }
    {
        auto* cmd = app.add_subcommand("replay", "Rebuild the cache from the tokens and compare");
        auto a = std::make_shared<ReplayArgs>();
        cmd->add_option("snapshot", a->snapshot, "Snapshot file (.kvsnap)")->required();
        addModelOptions(cmd, a->model);
        cmd->add_option("--threshold", a->threshold, "Absolute |dK|,|dV| bound (default by dtype)")
            ->check(CLI::Validator(
                [](std::string& v) {
                    const double x = std::strtod(v.c_str(), nullptr);
                    return std::isfinite(x) && x >= 0
                               ? std::string()
                               : "'" + v + "' is not a finite number >= 0 (0: the dtype's default)";
                },
                ""));
        addJsonFlag(cmd, a->json);
        cmd->callback([a] { cmdReplay(*a); });
    }
    {
        auto* cmd =
            app.add_subcommand("drift", "Continue two snapshots in lockstep and compare logits");
        auto a = std::make_shared<DriftArgs>();
        cmd->add_option("a", a->a, "Reference snapshot")->required();
        cmd->add_option("b", a->b, "Compared snapshot")->required();
        addModelOptions(cmd, a->model);
        cmd->add_option("-n,--steps", a->steps, "Steps")->capture_default_str();
        cmd->add_flag("--force", a->force,
                      "Restore even when verification finds (non-structural) errors");
        cmd->add_option("--profile", a->profile,
                        "Tolerance profile of the band: exact, same-device, cross-device")
            ->capture_default_str();
        addJsonFlag(cmd, a->json);
        cmd->callback([a] { cmdDrift(*a); });
    }
    {
        auto* cmd = app.add_subcommand("export", "Export a snapshot's state for other tools");
        auto a = std::make_shared<ExportArgs>();
        cmd->add_option("snapshot", a->snapshot, "Snapshot file (.kvsnap)")->required();
        cmd->add_option("--format", a->format,
                        "Output format: safetensors (Hugging Face past_key_values), llamacpp "
                        "(a ggsq v3 sequence state)")
            ->capture_default_str();
        cmd->add_option("-o,--output", a->output, "Output file")->required();
        cmd->add_option("--key-type", a->keyType,
                        "llamacpp: K cache type (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, "
                        "iq4_nl)")
            ->capture_default_str();
        cmd->add_option("--value-type", a->valueType, "llamacpp: V cache type")
            ->capture_default_str();
        cmd->add_flag("--transpose-v", a->transposeValues,
                      "llamacpp: V transposed (llama.cpp without flash attention)");
        addJsonFlag(cmd, a->json);
        cmd->callback([a] { cmdExport(*a); });
    }
    {
        auto* cmd =
            app.add_subcommand("render-chat", "Render a chat template like apply_chat_template");
        auto a = std::make_shared<RenderArgs>();
        cmd->add_option("--template", a->templatePath, "Jinja chat template file")->required();
        cmd->add_option("--messages", a->messagesPath, "JSON file: an array of messages")
            ->required();
        cmd->add_flag("--add-generation-prompt", a->addGenerationPrompt,
                      "Append the assistant prompt");
        cmd->add_option("--set", a->sets,
                        "Template variable NAME=VALUE (VALUE as JSON if it parses)");
        addJsonFlag(cmd, a->json);
        cmd->callback([a] { cmdRenderChat(*a); });
    }
}

} // namespace kvscope::cli
