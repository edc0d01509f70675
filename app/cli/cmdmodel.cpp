// Model commands: info, generate, logits, tokenize.
#include "clicommon.h"
#include "engine/session.h"
#include "tokenizer/tokenizer.h"
#include "util/demomodel.h"
#include "util/topk.h"

#include <iostream>

namespace kvscope::cli {

namespace {

std::vector<int32_t> encodePrompt(const Model& model, const std::string& prompt,
                                  const std::vector<int32_t>& ids) {
    if (!ids.empty())
        return ids;
    auto tok = model.tokenizer();
    if (!tok)
        throw CliFailure{model.path() + ": no tokenizer found; pass --tokenizer or --prompt-ids"};
    auto out = tok->encode(prompt);
    if (out.empty()) {
        if (auto bos = tok->bosId())
            out.push_back(*bos);
        else
            throw CliFailure{"the prompt is empty and the tokenizer has no BOS token"};
    }
    return out;
}

void cmdInfo(const ModelOptions& mo, bool json) {
    auto model = loadModelOrFail(mo, false);
    const auto& c = model->config();
    nlohmann::json j = toJson(c);
    j["path"] = model->path();
    j["device"] = model->device();
    j["compute_dtype"] = model->computeDtype();
    j["cache_dtype"] = model->cacheDtype();
    j["parameters"] = model->parameterCount();
    j["mapped_weight_bytes"] = model->mappedWeightBytes();
    j["fingerprint"] = model->fingerprint();
    j["variations"] = configVariations(c);
    if (auto tok = model->tokenizer()) {
        j["tokenizer"] = {{"path", tok->sourcePath()},
                          {"kind", tok->kind()},
                          {"vocab_size", tok->vocabSize()},
                          {"fingerprint", tok->fingerprint()},
                          {"has_chat_template", tok->chatTemplate().has_value()}};
    }
    if (json) {
        printJson(j);
        return;
    }
    std::cout << "model        " << model->path() << " (" << c.sourceFormat << ", "
              << c.hfArchitecture << ")\n"
              << "parameters   " << model->parameterCount() << "\n"
              << "layers       " << c.nLayers << ", dim " << c.dim << ", ffn " << c.hiddenDim
              << "\n"
              << "heads        " << c.nHeads << " query / " << c.nKvHeads << " kv, head_dim "
              << c.headDim << "\n"
              << "vocab        " << c.vocabSize << ", context " << c.maxContext << "\n"
              << "rope         theta " << c.ropeTheta << ", scaling " << c.ropeScaling.type << "\n";
    if (const auto variations = configVariations(c); !variations.empty()) {
        std::cout << "variations   ";
        for (std::size_t i = 0; i < variations.size(); ++i)
            std::cout << (i ? "; " : "") << variations[i];
        std::cout << "\n";
    }
    std::cout << "weights      " << c.weightDtype << ", computing in " << model->computeDtype()
              << " on " << model->device() << ", KV cache in " << model->cacheDtype() << "\n"
              << "in place     " << model->mappedWeightBytes() / 1000000 << " MB of weights used "
              << "from the file's memory mapping, not copied\n"
              << "fingerprint  " << model->fingerprint() << "\n";
    if (auto tok = model->tokenizer())
        std::cout << "tokenizer    " << tok->sourcePath() << " (" << tok->kind() << ", "
                  << tok->vocabSize() << " tokens, fingerprint " << tok->fingerprint() << ")\n";
    else
        std::cout << "tokenizer    none\n";
}

// A token's text as a JSON string literal; bytes that are not UTF-8 (byte-level pieces of a
// llama2.c tokenizer may hold half a character) print as U+FFFD instead of failing.
std::string quoted(const std::string& piece) {
    return nlohmann::json(piece).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// "1,2,3" -> {1, 2, 3}; an empty entry ("1,,2"), a sign or anything but decimal digits is
// refused (usage exit) rather than skipped or read as 0. Ids beyond the vocabulary are the
// session's to refuse (it names the model).
std::vector<int32_t> parseIdList(const std::string& text) {
    std::vector<int32_t> ids;
    std::size_t begin = 0;
    while (true) {
        const std::size_t end = std::min(text.find(',', begin), text.size());
        const std::string item = text.substr(begin, end - begin);
        const std::string where = "entry " + std::to_string(ids.size() + 1);
        if (item.empty())
            throw CLI::ValidationError("--prompt-ids", where + " is empty");
        if (item.size() > 10 || item.find_first_not_of("0123456789") != std::string::npos ||
            std::stoll(item) > INT32_MAX)
            throw CLI::ValidationError("--prompt-ids", where + " '" + item.substr(0, 32) +
                                                           "' is not a token id (0.." +
                                                           std::to_string(INT32_MAX) + ")");
        ids.push_back(static_cast<int32_t>(std::stoll(item)));
        if (end == text.size())
            return ids;
        begin = end + 1;
    }
}

struct GenerateArgs {
    ModelOptions model;
    SamplerOptions sampler;
    std::string prompt;
    std::vector<int32_t> promptIds;
    int steps = 256;
    bool json = false;
    std::string snapshotOut; // generate --snapshot-out
};

void cmdGenerate(const GenerateArgs& a) {
    const SamplerSettings settings = a.sampler.settings(); // refused before the model loads
    checkOutputPath(a.snapshotOut, "--snapshot-out");
    auto model = loadModelOrFail(a.model, a.promptIds.empty());
    auto tok = model->tokenizer();
    const auto prompt = encodePrompt(*model, a.prompt, a.promptIds);
    Session session(model);
    // The prompt and the tokens to come in one reservation: the cache never grows by a copy.
    session.reserveFor(std::min<int64_t>(static_cast<int64_t>(prompt.size()) + a.steps,
                                         model->config().maxContext));
    if (Status s = session.feed(prompt); !s)
        throw CliFailure{s.message()};
    Sampler sampler(settings);
    int32_t prev = prompt.back();
    std::string text;
    if (!a.json && tok) {
        // Echo the prompt like run.c does (without the BOS piece).
        for (size_t i = 1; i < prompt.size(); ++i)
            std::cout << tok->decodeNext(prompt[i - 1], prompt[i]);
        if (prompt.size() == 1 && !tok->isSpecial(prompt[0]))
            std::cout << tok->decodeNext(-1, prompt[0]);
        std::cout.flush();
    }
    auto r = session.generate(a.steps, sampler, [&](int32_t id) {
        const std::string piece = tok ? tok->decodeNext(prev, id) : "";
        prev = id;
        text += piece;
        if (!a.json) {
            std::cout << (tok ? piece : std::to_string(id) + " ");
            std::cout.flush();
        }
        return true;
    });
    if (!r)
        throw CliFailure{r.message()};
    if (!a.snapshotOut.empty())
        saveGenerateSnapshot(a.snapshotOut, session, sampler, prompt, !a.promptIds.empty());
    if (a.json) {
        printJson({{"prompt_tokens", prompt},
                   {"tokens", r.value().tokens},
                   {"text", text},
                   {"stop_reason", r.value().stopReason},
                   {"cache_dtype", session.cache().dtype()},
                   {"sampler", toJson(settings, sampler.rngState())}});
    } else {
        std::cout << "\n";
    }
}

void cmdLogits(const GenerateArgs& a, int topN) {
    auto model = loadModelOrFail(a.model, a.promptIds.empty());
    const auto prompt = encodePrompt(*model, a.prompt, a.promptIds);
    Session session(model);
    HostTensor logits;
    if (Status s = session.feed(prompt, &logits); !s)
        throw CliFailure{s.message()};
    const int64_t V = logits.dim(1);
    if (a.json) {
        nlohmann::json rows = nlohmann::json::array();
        for (int64_t t = 0; t < logits.dim(0); ++t)
            rows.push_back(
                std::vector<float>(logits.data.begin() + t * V, logits.data.begin() + (t + 1) * V));
        printJson({{"tokens", prompt}, {"logits", rows}});
        return;
    }
    auto tok = model->tokenizer();
    for (int64_t t = 0; t < logits.dim(0); ++t) {
        std::span<const float> row(logits.data.data() + t * V, static_cast<size_t>(V));
        const std::vector<int64_t> order = topKIndices(row, static_cast<size_t>(std::max(0, topN)));
        const int n = static_cast<int>(order.size());
        std::cout << "pos " << t << " token " << prompt[static_cast<size_t>(t)] << " ->";
        for (int i = 0; i < n; ++i) {
            const auto id = static_cast<int32_t>(order[static_cast<size_t>(i)]);
            std::cout << "  " << id;
            if (tok)
                std::cout << " " << quoted(tok->tokenText(id));
            std::cout << " " << row[id];
        }
        std::cout << "\n";
    }
}

void cmdTokenize(const std::string& path, const std::string& text, bool noSpecial, bool json) {
    // No --tokenizer: the bundled demo model's (a folder resolves to its tokenizer.json).
    std::string source = path;
    if (source.empty()) {
        auto demo = findDemoModel();
        if (!demo)
            throw CliFailure{"no --tokenizer given and the bundled demo model was not found",
                             kExitUsage};
        std::cerr << "using the bundled demo model at " << *demo << "\n";
        source = *demo;
    }
    auto r = tok::Tokenizer::fromFile(source);
    if (!r)
        throw CliFailure{r.message()};
    const auto& tok = *r.value();
    const auto ids = tok.encode(text, {.addSpecialTokens = !noSpecial});
    if (json) {
        std::vector<std::string> pieces;
        for (int32_t id : ids)
            pieces.push_back(tok.tokenText(id));
        printJson({{"ids", ids}, {"tokens", pieces}, {"decoded", tok.decode(ids)}});
        return;
    }
    for (int32_t id : ids)
        std::cout << id << "\t" << quoted(tok.tokenText(id)) << "\n";
}

} // namespace

void registerModelCommands(CLI::App& app) {
    {
        auto* cmd =
            app.add_subcommand("info", "Describe a model: architecture, sizes, fingerprints");
        auto mo = std::make_shared<ModelOptions>();
        auto json = std::make_shared<bool>(false);
        addModelOptions(cmd, *mo, false);
        addJsonFlag(cmd, *json);
        cmd->callback([mo, json] { cmdInfo(*mo, *json); });
    }
    auto addPromptOptions = [](CLI::App* cmd, GenerateArgs& a) {
        cmd->add_option("-p,--prompt", a.prompt, "Prompt text (BOS added as the tokenizer does)");
        cmd->add_option_function<std::string>(
            "--prompt-ids", [&a](const std::string& text) { a.promptIds = parseIdList(text); },
            "Prompt as comma-separated token ids (instead of text)");
    };
    {
        auto* cmd = app.add_subcommand("generate", "Prefill a prompt and generate tokens");
        auto a = std::make_shared<GenerateArgs>();
        addModelOptions(cmd, a->model, false);
        addPromptOptions(cmd, *a);
        cmd->add_option("-n,--steps", a->steps, "New tokens to generate")->capture_default_str();
        addSamplerOptions(cmd, a->sampler);
        addJsonFlag(cmd, a->json);
        cmd->add_option("--snapshot-out", a->snapshotOut,
                        "Save the final state (cache, tokens, sampler, ...) as a .kvsnap snapshot");
        cmd->callback([a] { cmdGenerate(*a); });
    }
    {
        auto* cmd = app.add_subcommand("logits", "Print the logits at every prompt position");
        auto a = std::make_shared<GenerateArgs>();
        auto top = std::make_shared<int>(5);
        addModelOptions(cmd, a->model, false);
        addPromptOptions(cmd, *a);
        cmd->add_option("--top", *top, "Top entries per position in text mode")
            ->capture_default_str();
        addJsonFlag(cmd, a->json);
        cmd->callback([a, top] { cmdLogits(*a, *top); });
    }
    {
        auto* cmd = app.add_subcommand("tokenize", "Encode text with a tokenizer");
        auto path = std::make_shared<std::string>();
        auto text = std::make_shared<std::string>();
        auto noSpecial = std::make_shared<bool>(false);
        auto json = std::make_shared<bool>(false);
        cmd->add_option("-t,--tokenizer", *path,
                        "tokenizer.json, .gguf or llama2.c .bin (default: the bundled demo "
                        "model's)");
        cmd->add_option("--text", *text, "Text to encode")->required();
        cmd->add_flag("--no-special", *noSpecial,
                      "Do not add special tokens (HF add_special_tokens=False)");
        addJsonFlag(cmd, *json);
        cmd->callback([=] { cmdTokenize(*path, *text, *noSpecial, *json); });
    }
}

} // namespace kvscope::cli
