#include "clicommon.h"

#include "state/ledger/snapshotio.h"
#include "util/demomodel.h"
#include "util/fileio.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <iostream>

namespace kvscope::cli {

state::ToleranceProfile profileOrFail(const std::string& name) {
    auto p = state::parseProfile(name);
    if (!p)
        throw CliFailure{"unknown tolerance profile '" + name +
                             "' (exact, same-device, cross-device)",
                         kExitUsage};
    return *p;
}

CLI::Validator cacheDtypeCheck() {
    return CLI::Validator(
        [](const std::string& v) {
            return v == "f32" || v == "f16" || v == "bf16"
                       ? std::string()
                       : "--cache-dtype " + v + ": f32, f16 or bf16";
        },
        "f32|f16|bf16", "cache dtype");
}

void addModelOptions(CLI::App* cmd, ModelOptions& o, bool required) {
    auto* m = cmd->add_option("-m,--model", o.model,
                              required ? "Model: llama2.c .bin, .gguf, or a Hugging Face folder"
                                       : "Model: llama2.c .bin, .gguf, or a Hugging Face folder "
                                         "(default: the bundled demo model)");
    if (required)
        m->required();
    cmd->add_option("-t,--tokenizer", o.tokenizer,
                    "Tokenizer: tokenizer.json, .gguf or llama2.c tokenizer .bin "
                    "(default: the model's own)");
    cmd->add_option("--device", o.device, "cpu, cuda or cuda:N")->capture_default_str();
    cmd->add_option("--dtype", o.dtype, "Compute dtype: f32, f16, bf16 (default: f32 on CPU)");
    cmd->add_option("--cache-dtype", o.cacheDtype,
                    "KV cache dtype of the sessions this command runs: f32, f16, bf16 (default: "
                    "the compute dtype). f16, llama.cpp's default, halves the cache")
        ->check(cacheDtypeCheck());
    cmd->add_flag("--huge-pages", o.hugePages,
                  "Copy the weights out of the file mapping onto huge pages (faster decoding "
                  "where mapped pages stream slowly; slower load)");
}

void addSamplerOptions(CLI::App* cmd, SamplerOptions& o) {
    cmd->add_option("--temperature", o.temperature, "0 = greedy")->capture_default_str();
    cmd->add_option("--top-p", o.topP, "Nucleus sampling threshold (0 or 1 disables)")
        ->capture_default_str();
    cmd->add_option("--top-k", o.topK, "Keep the k most likely tokens (0 disables)")
        ->capture_default_str();
    cmd->add_option("--seed", o.seed, "RNG seed")->capture_default_str();
}

SamplerSettings SamplerOptions::settings() const {
    const SamplerSettings s{temperature, topP, topK, seed};
    if (Status st = checkSamplerSettings(s, "sampler flags"); !st)
        throw CliFailure{st.message(), kExitUsage};
    return s;
}

void checkOutputPath(const std::string& path, const char* flag) {
    if (path.empty())
        return;
    try {
        resolveOutputPath(path);
    } catch (const std::exception& e) {
        throw CliFailure{std::string(flag) + ": " + e.what(), kExitUsage};
    }
}

namespace {

// Options whose empty value means something (an empty prompt is BOS alone; an empty text
// tokenizes to nothing). Every other option refuses "" instead of reading it as 0 or default.
bool mayBeEmpty(const CLI::Option& o) {
    for (const char* name : {"prompt", "system", "text"})
        if (o.check_lname(name))
            return true;
    return false;
}

// Checks one value of an option by its type before CLI11 converts it: CLI11 reads "-1" into
// an unsigned as 2^64-1, "nan" into a float, "" as 0, and "0x10" as 16.
std::string checkValue(const std::string& type, const std::string& v, bool emptyOk) {
    if (v.empty())
        return emptyOk ? std::string() : std::string("the value is empty");
    if (type == "UINT" || type == "INT") {
        const bool neg = type == "INT" && v[0] == '-';
        const std::string digits = neg ? v.substr(1) : v;
        if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos)
            return "'" + v + "' is not a decimal " +
                   (type == "UINT" ? std::string("number >= 0") : std::string("integer"));
        errno = 0;
        if (neg)
            (void)std::strtoll(v.c_str(), nullptr, 10);
        else
            (void)std::strtoull(v.c_str(), nullptr, 10);
        if (errno == ERANGE)
            return "'" + v + "' is out of range";
    } else if (type == "FLOAT") {
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        if (end == v.c_str() || *end != '\0')
            return "'" + v + "' is not a number";
        if (!std::isfinite(x))
            return "'" + v + "' is not a finite number";
    }
    return {};
}

} // namespace

void addValueChecks(CLI::App& app) {
    for (CLI::Option* o : app.get_options()) {
        if (o->get_type_size_min() == 0)
            continue; // a flag
        const std::string type = o->get_type_name();
        const bool emptyOk = mayBeEmpty(*o);
        o->check(CLI::Validator(
            [type, emptyOk](std::string& v) { return checkValue(type, v, emptyOk); }, ""));
    }
    for (CLI::App* sub : app.get_subcommands({}))
        addValueChecks(*sub);
}

void addJsonFlag(CLI::App* cmd, bool& json) {
    cmd->add_flag("--json", json, "Print machine-readable JSON");
}

namespace {

// An empty `model` means the bundled demo model; says so on stderr.
std::string resolveModelPath(const std::string& model) {
    if (!model.empty())
        return model;
    auto demo = findDemoModel();
    if (!demo)
        throw CliFailure{"no --model given and the bundled demo model was not found (looked in "
                         "$KVSCOPE_DEMO_MODEL, <exe>/../share/kvscope/demo-model and the source "
                         "tree's resources/demo-model)",
                         kExitUsage};
    std::cerr << "using the bundled demo model at " << *demo << "\n";
    return *demo;
}

} // namespace

std::shared_ptr<const Model> loadModelOrFail(const ModelOptions& o, bool requireTokenizer) {
    LoadOptions lo;
    lo.tokenizerPath = o.tokenizer;
    lo.device = o.device;
    lo.dtype = o.dtype;
    lo.weightsOnHugePages = o.hugePages;
    lo.cacheDtype = o.cacheDtype;
    lo.requireTokenizer = requireTokenizer;
    auto r = Model::load(resolveModelPath(o.model), lo);
    if (!r)
        throw CliFailure{r.message()};
    return r.value();
}

void printJson(const nlohmann::json& j) {
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

state::Snapshot loadSnapshotOrFail(const std::string& path) {
    auto s = state::load(path);
    if (!s)
        throw CliFailure{s.message() + " (run `kvscope-cli verify` for the full report)"};
    return std::move(s).value();
}

} // namespace kvscope::cli
