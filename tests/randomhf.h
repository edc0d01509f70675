// Tiny random Hugging Face checkpoints for the suites that need an architecture no shared
// model has (GPT-2's learned positions, Qwen2's biases, Llama 3's rope scaling): a config.json
// and the tensors it names, filled with seeded normal values, written as a model folder.
#pragma once

#include "formats/safetensorswriter.h"
#include "util/fileio.h"

#include <QDir>
#include <QString>
#include <QtGlobal>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace testhf {

// Tensor names and shapes, in the order they are written.
using Shapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// How the weights are drawn: N(0, std); norm weights 1 + jitter * N(0, std) (0: exactly 1).
struct Fill {
    uint32_t seed = 1234;
    float std = 0.2f;
    float normJitter = 0.1f;
};

// A GPT-2 (GPT2LMHeadModel: learned absolute positions, gelu_new, fused QKV) of `layers`
// layers of width `embd` with 4 heads, `positions` positions and a vocabulary of `vocab`.
struct Gpt2 {
    int64_t embd = 32, layers = 2, positions = 64, vocab = 50;
    nlohmann::json config() const {
        return {{"architectures", {"GPT2LMHeadModel"}},
                {"n_embd", embd},
                {"n_layer", layers},
                {"n_head", 4},
                {"n_positions", positions},
                {"vocab_size", vocab},
                {"n_inner", nullptr},
                {"layer_norm_epsilon", 1e-5},
                {"activation_function", "gelu_new"}};
    }
    Shapes tensors() const {
        const int64_t C = embd;
        Shapes t = {{"transformer.wte.weight", {vocab, C}},
                    {"transformer.wpe.weight", {positions, C}},
                    {"transformer.ln_f.weight", {C}},
                    {"transformer.ln_f.bias", {C}}};
        for (int64_t l = 0; l < layers; ++l)
            for (auto [n, s] : Shapes{{"ln_1.weight", {C}},
                                      {"ln_1.bias", {C}},
                                      {"ln_2.weight", {C}},
                                      {"ln_2.bias", {C}},
                                      {"attn.c_attn.weight", {C, 3 * C}},
                                      {"attn.c_attn.bias", {3 * C}},
                                      {"attn.c_proj.weight", {C, C}},
                                      {"attn.c_proj.bias", {C}},
                                      {"mlp.c_fc.weight", {C, 4 * C}},
                                      {"mlp.c_fc.bias", {4 * C}},
                                      {"mlp.c_proj.weight", {4 * C, C}},
                                      {"mlp.c_proj.bias", {C}}})
                t.push_back({"transformer.h." + std::to_string(l) + "." + n, s});
        return t;
    }
};

// Writes `folder` (made when missing): model.safetensors with `tensors` drawn as `fill` says,
// then config.json. Returns the folder.
inline QString writeFolder(const QString& folder, const nlohmann::json& config,
                           const Shapes& tensors, const Fill& fill = {}) {
    QDir().mkpath(folder);
    kvscope::safetensors::Writer w;
    std::mt19937 rng(fill.seed);
    std::normal_distribution<float> normal(0.0f, fill.std);
    for (const auto& [name, shape] : tensors) {
        int64_t n = 1;
        for (int64_t d : shape)
            n *= d;
        std::vector<float> v(static_cast<size_t>(n));
        const bool isNorm =
            (name.find("norm") != std::string::npos || name.find("ln_") != std::string::npos) &&
            name.ends_with(".weight");
        for (float& x : v)
            x = isNorm ? (fill.normJitter == 0 ? 1.0f : 1.0f + normal(rng) * fill.normJitter)
                       : normal(rng);
        w.addTensor(name, shape, v);
    }
    if (!w.write((folder + "/model.safetensors").toStdString()))
        qFatal("cannot write %s/model.safetensors", qPrintable(folder));
    const std::string text = config.dump(2);
    kvscope::writeFileAtomic((folder + "/config.json").toStdString(), text.data(), text.size());
    return folder;
}

} // namespace testhf
