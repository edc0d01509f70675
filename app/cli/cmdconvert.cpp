// convert: write a loaded model (llama2.c, GGUF or HF) as a Hugging Face folder or, for the
// llama family, as a GGUF file llama.cpp runs.
#include "clicommon.h"
#include "engine/convert.h"

#include <iostream>

namespace kvscope::cli {

void registerConvertCommand(CLI::App& app) {
    auto* cmd = app.add_subcommand(
        "convert", "Write a model as a Hugging Face folder, a GGUF file or a llama2.c checkpoint");
    struct Args {
        ModelOptions model;
        std::string to = "hf";
        std::string out;
        std::string dtype;
        bool force = false;
        bool json = false;
    };
    auto a = std::make_shared<Args>();
    addModelOptions(cmd, a->model);
    cmd->add_option("--to", a->to,
                    "Target format: hf (a folder), gguf (one file), llama2c (a run.c checkpoint)")
        ->check(CLI::IsMember({"hf", "gguf", "llama2c"}))
        ->capture_default_str();
    cmd->add_option("-o,--output", a->out, "Output folder (hf) or file (gguf, llama2c)")
        ->required();
    cmd->add_option("--out-dtype", a->dtype,
                    "Weights dtype: f32, f16, bf16; for --to gguf also q8_0, q4_0, q4_k, q5_k, "
                    "q6_k, q4_k_m, q5_k_m, each the bytes llama-quantize makes from the f32 "
                    "file (q4_k, q5_k: its --pure Q4_K, --pure Q5_K) (default: as loaded)")
        ->check(CLI::IsMember(
            {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k", "q4_k_m", "q5_k_m"}));
    cmd->add_flag("--force", a->force, "Replace the files of an existing model folder or file");
    addJsonFlag(cmd, a->json);
    cmd->callback([a] {
        if (a->dtype.size() > 1 && a->dtype[0] == 'q' && a->to != "gguf")
            throw CliFailure{"--out-dtype " + a->dtype +
                             ": quantized weights are written to GGUF only (--to gguf)"};
        auto model = loadModelOrFail(a->model, false);
        ConvertOptions o;
        o.dtype = a->dtype;
        o.overwrite = a->force;
        if (a->to == "gguf" || a->to == "llama2c") {
            checkOutputPath(a->out, "--output");
            if (Status s = a->to == "gguf" ? convertToGguf(*model, a->out, o)
                                           : convertToLlama2c(*model, a->out, o);
                !s)
                throw CliFailure{s.message()};
            if (a->json)
                printJson({{"output", a->out}, {"format", a->to}, {"source", model->path()}});
            else
                std::cout << "wrote " << a->out << "\n";
            return;
        }
        if (Status s = convertToHuggingFace(*model, a->out, o); !s)
            throw CliFailure{s.message()};
        if (a->json)
            printJson({{"output", a->out}, {"format", a->to}, {"source", model->path()}});
        else
            std::cout << "wrote " << a->out << " (config.json, model.safetensors"
                      << (model->tokenizer() ? ", tokenizer.json, tokenizer_config.json" : "")
                      << ", generation_config.json)\n";
    });
}

} // namespace kvscope::cli
