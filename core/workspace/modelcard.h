// What a model's own card says about using it: the example prompt a front end offers first.
// A Bible model should not be greeted with "Once upon a time".
//
// Thread-safety: reads the file system only.
#pragma once

#include <optional>
#include <string>

namespace kvscope::ws {

// The example prompt of the model at `modelPath` (a Hugging Face folder, or a model file —
// then the folder it lies in), from the README.md beside it, the first of:
//   1. kvscope's reference-generation marker (resources/demo-model/README.md):
//        <!-- reference-generation prompt="And it came to pass" steps=48 ... -->
//   2. the Hugging Face model-card metadata: the first `text:` of the `widget:` list in the
//      README's YAML front matter (`widget:\n  - text: "My name is"`).
// std::nullopt when there is no card, it names no prompt, or it cannot be read (a README
// that is not a regular file or is over 1 MiB is not read). generation_config.json and
// tokenizer_config.json have no standard field for an example prompt, so they are not read.
std::optional<std::string> examplePrompt(const std::string& modelPath);

// The same from a README's text (tests, and the folder lookup above).
std::optional<std::string> examplePromptFromCard(const std::string& readme);

} // namespace kvscope::ws
