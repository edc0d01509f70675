// random-model: a random-weight model in a real family's shape, as a Hugging Face folder.
#include "clicommon.h"
#include "engine/randommodel.h"

#include <chrono>
#include <cstdio>
#include <iostream>

namespace kvscope::cli {

namespace {

nlohmann::json shapeJson(const RandomModelShape& s) {
    return {{"name", s.name},
            {"model", s.realModel},
            {"tokenizer", s.tokenizer},
            {"parameters", llamaParameterCount(s.config)},
            {"config", toJson(s.config)}};
}

std::string millions(int64_t n) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1fM", static_cast<double>(n) / 1e6);
    return buf;
}

void printShapes() {
    std::printf("%-14s %-26s %6s %6s %6s %5s %4s %5s %7s %5s %5s %9s\n", "shape", "copies",
                "layers", "hidden", "ffn", "heads", "kv", "hdim", "vocab", "tied", "bias",
                "params");
    for (const auto& s : randomModelShapes()) {
        const auto& c = s.config;
        std::printf("%-14s %-26s %6lld %6lld %6lld %5lld %4lld %5lld %7lld %5s %5s %9s\n",
                    s.name.c_str(), s.realModel.c_str(), static_cast<long long>(c.nLayers),
                    static_cast<long long>(c.dim), static_cast<long long>(c.hiddenDim),
                    static_cast<long long>(c.nHeads), static_cast<long long>(c.nKvHeads),
                    static_cast<long long>(c.headDim), static_cast<long long>(c.vocabSize),
                    c.tiedEmbeddings ? "yes" : "no", c.attentionBias ? "yes" : "no",
                    millions(llamaParameterCount(c)).c_str());
    }
}

} // namespace

void registerRandomModelCommand(CLI::App& app) {
    auto* cmd = app.add_subcommand(
        "random-model", "Write a random-weight model in the real shape of a popular model family "
                        "(Hugging Face folder; nonsense outputs, real sizes)");
    struct Args {
        RandomModelOptions o;
        std::string out;
        bool list = false;
        bool json = false;
    };
    auto a = std::make_shared<Args>();
    std::vector<std::string> names;
    for (const auto& s : randomModelShapes())
        names.push_back(s.name);
    auto* list = cmd->add_flag("--list", a->list, "List the shapes with their parameter counts");
    auto* shape = cmd->add_option("--shape", a->o.shape, "Shape: " + randomModelShapeNames())
                      ->check(CLI::IsMember(names));
    auto* out = cmd->add_option("-o,--output", a->out, "Output folder");
    cmd->add_option("--tokenizer", a->o.tokenizerPath,
                    "Tokenizer copied into the folder: tokenizer.json or a folder holding one "
                    "(at most the shape's vocabulary; default: none, token ids only)");
    auto* layers =
        cmd->add_option("--layers", a->o.layers, "Decoder layers (default: the shape's)");
    cmd->add_option("--seed", a->o.seed, "Weights seed")->capture_default_str();
    cmd->add_option("--dtype", a->o.dtype, "Stored weights: f32, f16, bf16")
        ->check(CLI::IsMember({"f32", "f16", "bf16"}))
        ->capture_default_str();
    cmd->add_flag("--force", a->o.overwrite, "Replace the files of an existing model folder");
    list->excludes(shape);
    list->excludes(out);
    addJsonFlag(cmd, a->json);
    cmd->callback([a, layers] {
        if (a->list) {
            if (a->json) {
                nlohmann::json shapes = nlohmann::json::array();
                for (const auto& s : randomModelShapes())
                    shapes.push_back(shapeJson(s));
                printJson({{"shapes", shapes}});
            } else {
                printShapes();
            }
            return;
        }
        if (a->o.shape.empty())
            throw CliFailure{"--shape is required (one of " + randomModelShapeNames() +
                                 "), or --list",
                             kExitUsage};
        if (a->out.empty())
            throw CliFailure{"-o/--output is required (the folder to write)", kExitUsage};
        // 0 means "the shape's" to core; typed on the command line it is a mistake.
        if (layers->count() > 0 && a->o.layers < 1)
            throw CliFailure{"--layers: " + std::to_string(a->o.layers) + " is not at least 1",
                             kExitUsage};
        const auto start = std::chrono::steady_clock::now();
        auto r = writeRandomModel(a->out, a->o);
        if (!r)
            throw CliFailure{r.message()};
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const auto& v = r.value();
        if (a->json) {
            printJson({{"output", v.output},
                       {"shape", v.shape},
                       {"layers", v.config.nLayers},
                       {"parameters", v.parameters},
                       {"bytes", v.bytes},
                       {"dtype", a->o.dtype},
                       {"seed", a->o.seed},
                       {"vocab_size", v.config.vocabSize},
                       {"tokenizer",
                        v.tokenizer.empty() ? nlohmann::json() : nlohmann::json(v.tokenizer)},
                       {"tokenizer_tokens", v.tokenizerTokens},
                       {"seconds", seconds}});
        } else {
            std::cout << "wrote " << v.output << ": " << v.shape << ", " << v.config.nLayers
                      << " layers, " << millions(v.parameters) << " parameters (" << a->o.dtype
                      << "), " << v.bytes << " bytes in " << seconds << " s\n";
            if (v.tokenizer.empty())
                std::cout << "no tokenizer: pass --tokenizer for text prompts\n";
        }
    });
}

} // namespace kvscope::cli
