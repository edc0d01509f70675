// Which model each stored state was made with, as the views show it: whether it is the loaded
// model, and the tokenizer to decode its tokens with. A state of another model decoded with the
// loaded model's tokenizer prints another vocabulary's words for its ids ("<unk> ·ha ·she 1 is
// 603…"), so its own tokenizer is looked for where the state says its model was, and used only
// when its fingerprint is the one the state records; otherwise the views show ids.
//
// Thread-safety: TokenizerFinder is not thread-safe (the GUI's engine thread owns one).
#pragma once

#include "state/ledger/snapshot.h"

#include <map>
#include <memory>
#include <set>
#include <string>

namespace kvscope {
class Model;
namespace tok {
class Tokenizer;
}
} // namespace kvscope

namespace kvscope::ws {

// True when `s` was made with `loaded` (the same model fingerprint); false without a model.
bool madeWith(const state::Snapshot& s, const Model* loaded);

class TokenizerFinder {
public:
    // The tokenizer `s` was made with: the loaded model's when its fingerprint is the one `s`
    // records; else one read from `s`'s recorded model path (the folder itself, a .gguf or
    // .json file, else the tokenizer files beside the file) with that fingerprint; else null (`s`
    // records no tokenizer, or none was found there). What it reads is remembered by fingerprint,
    // the paths it tried are not tried again.
    std::shared_ptr<const tok::Tokenizer> find(const state::Snapshot& s, const Model* loaded);

private:
    std::map<std::string, std::shared_ptr<const tok::Tokenizer>> m_found; // by fingerprint
    std::set<std::string> m_tried;                                        // paths
};

} // namespace kvscope::ws
