// The hostile corpus: what one case is, and the context every case family builds on.
//
// A case is one kvscope-cli invocation on inputs written into its own folder
// (<out>/cases/<id>/). Families (cases_*.cpp) add cases through Corpus::add(); everything they
// write is derived from the valid bases (Bases) and a seeded generator, so two runs with the
// same bases produce the same corpus.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace kvscope::hostile {

namespace fs = std::filesystem;

// What a case should end with. Refuse: exit != 0 is expected (exit 0 is reported as an
// unexpected success). Succeed: a control or a legal-but-hostile input (exit != 0 is reported
// as an unexpected refusal). Either: both are fine as long as nothing crashes or hangs.
enum class Expect { Refuse, Succeed, Either };

struct Case {
    std::string id;      // "c0042", also the folder name
    std::string dir;     // <out>/cases/<id>: the command runs there
    std::string family;  // corpus class, "gguf.lie.n_tensors"
    std::string reader;  // which reader the hostile input goes through: "gguf", "kvsnap", ...
    std::string command; // kvscope-cli command: "info", "fault inject", ...
    std::vector<std::string> args; // after the program name
    Expect expect = Expect::Refuse;
    // An error (exit != 0) must contain one of these (the damaged file's name, or the flag).
    std::vector<std::string> names;
    // When non-empty, an error must also contain one of these (the field / key / flag).
    std::vector<std::string> fields;
    std::string input; // the hostile input (file or folder), for its size
    std::uint64_t inputBytes = 0;
    bool inputIsFolder = false; // a lineage folder: exempt from the 10 MB rule
    std::string note;           // what was done to the input
    // Run after the command; returns a problem ("the FIFO was replaced") or "".
    std::function<std::string()> postCheck;

    // Optional, for the pipelines and sharper rules the newer classes need:
    // kvscope-cli invocations run first in the case folder, under the same limits and not
    // judged (`import --force X -o s.kvsnap` before `continue s.kvsnap`).
    std::vector<std::vector<std::string>> setup;
    // An exit 0 is a failure (verdict `accepted`), not just reported: a state the issue shows
    // slipping through (positions far below zero, a "mamba" ggsn, `survive --budget 25`).
    bool mustRefuse = false;
    // Text the output must not contain, whatever the exit ("not a .kvsnap" for a damaged
    // .safetensors): a message naming the wrong thing is `unclear`.
    std::vector<std::string> forbidden;
    // When non-empty, an exit 0 must say one of these (an export that drops what its format
    // cannot hold must say so); otherwise `unclear`.
    std::vector<std::string> successMustSay;
    // Internal text (a library's exception, a stack) is `unclear` on exit 0 too: an import
    // that succeeds with `[json.exception...]` in its note.
    bool cleanOnSuccess = false;
    // Per-case limits (0: the run's): a wall-clock limit shorter than the hang limit for
    // inputs that must be refused quickly, and a peak RSS that applies whatever the input's
    // size (a 48 MB state whose cell count costs gigabytes).
    double timeoutSeconds = 0;
    std::uint64_t maxRssKb = 0;
};

// The valid inputs every family starts from (absolute paths, made before the corpus).
struct Bases {
    std::string cli;              // kvscope-cli
    std::string data;             // /work/shared
    std::string llama2c;          // stories260K.bin
    std::string llama2cTok;       // tok512.bin beside it
    std::string gguf;             // stories260K.gguf
    std::string aidreams;         // aidreams260K.bin (its tok512.bin beside it)
    std::string snapshot;         // base.kvsnap: generate "Once upon a time" -n 8, greedy
    std::string snapshotB;        // a second state of the same model (another prompt)
    std::string snapshotFar;      // a state of aidreams260K (another model and geometry)
    std::string snapshotGguf;     // a state of stories260K.gguf (what -m x.gguf cases restore)
    std::string snapshotHf;       // a state of the converted HF folder
    std::string hf;               // convert -m stories260K.bin -o hf
    std::string pastKeyValues;    // export base.kvsnap --format safetensors (HF past_key_values)
    std::string snapshotHeadMask; // survive base.kvsnap, TOVA head-adaptive 50 %: ledger v2
    std::string chatTemplate;     // chatml.jinja
    std::string tokenizerJson;    // an HF tokenizer.json from shared/tokenizers
    std::string messages;         // a small messages.json
};

class Corpus {
public:
    Corpus(fs::path root, Bases bases, std::uint64_t seed);

    const Bases& bases() const { return m_bases; }
    // A fresh, empty folder for the next case; pass it to add() with the case.
    fs::path newCaseDir();
    // Registers a case built in dir (newCaseDir()); fills id and input size.
    void add(const fs::path& dir, Case c);
    std::vector<Case>& cases() { return m_cases; }

    // Deterministic generator (splitmix64): same seed, same corpus.
    std::uint64_t next();
    std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : next() % n; }

    // The folder holding shared fixtures of families (made once, not cases themselves).
    fs::path fixtures() const { return m_root / "fixtures"; }
    fs::path root() const { return m_root; }

private:
    fs::path m_root;
    Bases m_bases;
    std::uint64_t m_state;
    int m_nextId = 0;
    std::vector<Case> m_cases;
};

// Families: each adds its cases (corpus.cpp calls them in this order).
void addLlama2cCases(Corpus& c);         // cases_llama2c.cpp: .bin model + tokenizer.bin
void addGgufCases(Corpus& c);            // cases_gguf.cpp
void addHfCases(Corpus& c);              // cases_hf.cpp: safetensors, config.json, tokenizer.json
void addKvsnapCases(Corpus& c);          // cases_kvsnap.cpp: container + ledger manifest
void addLineageCases(Corpus& c);         // cases_lineage.cpp: tree folders, chains, cycles
void addChatCases(Corpus& c);            // cases_chat.cpp: render-chat templates and messages
void addArgumentCases(Corpus& c);        // cases_args.cpp: out-of-range CLI arguments
void addSpecialFileCases(Corpus& c);     // cases_special.cpp: FIFOs, devices, folders, writers
void addLlamaCppCases(Corpus& c);        // cases_llamacpp.cpp: llama.cpp state files (ggsq)
void addLlamaCppSessionCases(Corpus& c); // cases_ggsn.cpp: ggsn sessions, server slot files
void addPastKeyValuesCases(Corpus& c);   // cases_pkv.cpp: HF past_key_values safetensors
void addHeadMaskCases(Corpus& c);        // cases_headmask.cpp: ledger v2 head masks, positions
void addLabArgumentCases(Corpus& c);     // cases_args_lab.cpp: survive, attention, import, ...
void addProbeCases(Corpus& c);           // cases_probes.cpp: localize, branches, lens, attribute

} // namespace kvscope::hostile
