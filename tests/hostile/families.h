// Helpers shared by the case families (cases_*.cpp): the command lines that push one input
// through each command, and a one-call way to register a damaged-input case.
#pragma once

#include "bytes.h"
#include "corpus.h"

#include <algorithm>
#include <string>
#include <vector>

namespace kvscope::hostile {

// Commands that load a model given with -m (each loads it before doing anything else).
const std::vector<std::string>& modelCommands();
// kvscope-cli arguments running `command` (one of modelCommands()) on `model`; outputs go to
// `dir`.
std::vector<std::string> modelArgs(const std::string& command, const std::string& model,
                                   const Bases& b, const fs::path& dir);

// Commands that read a snapshot (the hostile one is always given as the first snapshot
// argument, except where the command's second snapshot is the point: drift B, patch --from).
const std::vector<std::string>& snapshotCommands();
std::vector<std::string> snapshotArgs(const std::string& command, const std::string& snapshot,
                                      const Bases& b, const fs::path& dir);

// The command of an argument list ("fault inject" for two-word commands).
std::string commandOf(const std::vector<std::string>& args);

struct CaseSpec {
    std::string family;
    std::string reader;
    std::vector<std::string> args;
    Expect expect = Expect::Refuse;
    std::vector<std::string> names;  // default: the input's file name
    std::vector<std::string> fields; // optional field/key names
    std::string input;               // the hostile file or folder
    std::string note;
};
// Registers a case whose files are already in dir.
void addCase(Corpus& c, const fs::path& dir, CaseSpec spec);

// The file name of a path ("x.gguf").
std::string baseName(const std::string& path);

// The field names a case accepts, from "a|b" (either name will do).
inline std::vector<std::string> alternatives(const std::string& names) {
    std::vector<std::string> out;
    for (std::size_t p = 0; p <= names.size();) {
        const std::size_t e = std::min(names.find('|', p), names.size());
        out.push_back(names.substr(p, e - p));
        p = e + 1;
    }
    return out;
}

} // namespace kvscope::hostile
