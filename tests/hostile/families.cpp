#include "families.h"

namespace kvscope::hostile {

const std::vector<std::string>& modelCommands() {
    static const std::vector<std::string> cmds = {"info",       "generate", "logits",
                                                  "convert",    "verify",   "induction",
                                                  "transplant", "continue", "replay"};
    return cmds;
}

namespace {

// The snapshot captured with the model the hostile one was made from, so that a restore
// fails because of the damage, not because the snapshot belongs to another format's copy.
const std::string& snapshotFor(const std::string& model, const Bases& b) {
    const std::string ext = fs::path(model).extension().string();
    if (ext == ".gguf")
        return b.snapshotGguf;
    if (ext == ".bin")
        return b.snapshot;
    return b.snapshotHf;
}

} // namespace

std::vector<std::string> modelArgs(const std::string& command, const std::string& model,
                                   const Bases& b, const fs::path& dir) {
    const std::string out = (dir / "out").string();
    const std::string& snapshot = snapshotFor(model, b);
    if (command == "info")
        return {"info", "-m", model};
    if (command == "generate")
        return {"generate", "-m", model, "-p", "Once upon a time", "-n", "4", "--temperature", "0"};
    if (command == "logits")
        return {"logits", "-m", model, "-p", "Once upon a time"};
    if (command == "convert")
        return {"convert", "-m", model, "-o", out + "-hf"};
    if (command == "verify")
        return {"verify", snapshot, "-m", model};
    if (command == "induction")
        return {"induction", "-m", model, "--length", "4"};
    if (command == "transplant")
        return {"transplant", "-m", model, "--recipient", "Once upon a time", "--donor", "The cat",
                "-l",         "1",  "-n",  "2",           "--positions",      "last"};
    if (command == "continue")
        return {"continue", snapshot, "-m", model, "-n", "2"};
    if (command == "replay")
        return {"replay", snapshot, "-m", model};
    if (command == "tokenize")
        return {"tokenize", "-t", model, "--text", "Once upon a time"};
    return {command, "-m", model};
}

const std::vector<std::string>& snapshotCommands() {
    static const std::vector<std::string> cmds = {
        "inspect", "verify", "continue", "replay",       "drift",      "diff", "truncate", "patch",
        "splice",  "fork",   "export",   "fault inject", "transplant", "tree", "fault lab"};
    return cmds;
}

std::vector<std::string> snapshotArgs(const std::string& command, const std::string& s,
                                      const Bases& b, const fs::path& dir) {
    const std::string out = (dir / "out.kvsnap").string();
    const std::string& m = b.llama2c;
    if (command == "inspect")
        return {"inspect", s};
    if (command == "verify")
        return {"verify", s, "-m", m};
    if (command == "continue")
        return {"continue", s, "-m", m, "-n", "2"};
    if (command == "replay")
        return {"replay", s, "-m", m};
    if (command == "drift")
        return {"drift", b.snapshot, s, "-m", m, "-n", "2"};
    if (command == "diff")
        return {"diff", s, b.snapshot};
    if (command == "truncate")
        return {"truncate", s, "--at", "3", "-m", m, "-o", out};
    if (command == "patch")
        return {"patch", b.snapshot, "--from", s, "--layer", "1", "-m", m, "-o", out};
    if (command == "splice")
        return {"splice", s,   "--from", b.snapshotB, "--range", "1:3",
                "--at",   "2", "-m",     m,           "-o",      out};
    if (command == "fork")
        return {"fork", s, "-n", "2", "--steps", "1", "-m", m, "-o", (dir / "forks").string()};
    if (command == "export")
        return {"export", s, "--format", "safetensors", "-o", (dir / "out.safetensors").string()};
    if (command == "fault inject")
        return {"fault", "inject", "position-offset", s, "-o", out};
    if (command == "fault lab")
        return {"fault", "lab", s, "-m", m, "-n", "2", "--fault", "position-offset"};
    if (command == "transplant")
        return {"transplant", "-m", m,   "--recipient-snapshot", s,     "--donor", "The cat", "-l",
                "1",          "-n", "2", "--positions",          "last"};
    if (command == "tree")
        return {"tree", fs::path(s).parent_path().string()};
    return {command, s};
}

std::string commandOf(const std::vector<std::string>& args) {
    if (args.empty())
        return "";
    if (args[0] == "fault" && args.size() > 1)
        return "fault " + args[1];
    return args[0];
}

std::string baseName(const std::string& path) {
    return fs::path(path).filename().string();
}

void addCase(Corpus& c, const fs::path& dir, CaseSpec spec) {
    Case k;
    k.family = std::move(spec.family);
    k.reader = std::move(spec.reader);
    k.command = commandOf(spec.args);
    k.args = std::move(spec.args);
    k.expect = spec.expect;
    k.names = spec.names.empty() && !spec.input.empty()
                  ? std::vector<std::string>{baseName(spec.input)}
                  : std::move(spec.names);
    // verify's exit 1 is its verdict on the snapshot: naming the snapshot is naming the input.
    if (k.command == "verify" && k.args.size() > 1)
        k.names.push_back(baseName(k.args[1]));
    k.fields = std::move(spec.fields);
    k.input = std::move(spec.input);
    k.note = std::move(spec.note);
    c.add(dir, std::move(k));
}

} // namespace kvscope::hostile
