// llama.cpp state files (ggsq): every header and record field made to lie, truncations at and
// around each field boundary, trailing bytes, random byte flips, and a layout that does not
// fit the model — through `verify FILE.ggsq -m M` and `import FILE.ggsq -m M -o OUT`. The base
// is the state llama.cpp itself wrote for stories260K (tim-dog.ggsq, read in place).
#include "families.h"

namespace kvscope::hostile {

namespace {

struct Ctx {
    Corpus& c;
    Bytes base;
    std::string gguf;
    int rot = 0;

    void add(const std::string& family, const Bytes& b, const std::string& note,
             Expect e = Expect::Refuse, std::vector<std::string> fields = {},
             std::string model = {}) {
        const auto dir = c.newCaseDir();
        const auto path = dir / "state.ggsq";
        writeAll(path, b);
        const std::string m = model.empty() ? gguf : model;
        std::vector<std::string> args =
            (rot++ % 2 == 0)
                ? std::vector<std::string>{"verify", path.string(), "-m", m}
                : std::vector<std::string>{"import", path.string(), "-m",
                                           m,        "-o",          (dir / "out.kvsnap").string()};
        addCase(
            c, dir,
            {family, "llamacpp", std::move(args), e, {}, std::move(fields), path.string(), note});
    }
};

} // namespace

void addLlamaCppCases(Corpus& corpus) {
    const fs::path src = fs::path(corpus.bases().data) / "llamacpp/stories260K/tim-dog.ggsq";
    if (!fs::exists(src))
        throw std::runtime_error(src.string() + " is missing");
    Ctx x{corpus, readAll(src), corpus.bases().gguf};
    const Bytes& b = x.base;
    const uint32_t n = getLE<uint32_t>(b, 8);
    const std::size_t stateAt = 12 + 4 * std::size_t{n};
    const uint32_t cells = getLE<uint32_t>(b, stateAt + 4);
    const std::size_t cellsAt = stateAt + 8;
    const std::size_t dataAt = cellsAt + 12 * std::size_t{cells}; // v_trans, n_layer, K 0
    const std::size_t k0 = dataAt + 8;

    auto lie32 = [&](const std::string& name, std::size_t at, uint32_t v,
                     const std::string& field) {
        Bytes m = b;
        putLE<uint32_t>(m, at, v);
        x.add("llamacpp.lie." + name, m, field + " = " + std::to_string(v), Expect::Refuse,
              {field});
    };
    lie32("magic", 0, 0x67677372u, "magic");
    lie32("version", 4, 2, "version");
    lie32("n_token", 8, 0x7fffffffu, "n_token");
    {
        // Five more tokens than stored: every later field shifts, and one of them lies.
        Bytes m = b;
        putLE<uint32_t>(m, 8, n + 5);
        x.add("llamacpp.lie.n_token.more", m, "n_token = " + std::to_string(n + 5), Expect::Refuse,
              {"n_token", "n_stream", "cell_count", "n_seq_id", "v_trans", "n_layer", "type",
               "row size"});
    }
    lie32("n_stream.zero", stateAt, 0, "n_stream");
    lie32("n_stream.huge", stateAt, 0xffffffffu, "n_stream");
    lie32("cell_count.huge", stateAt + 4, 0xfffffff0u, "cell_count");
    lie32("n_seq_id.huge", cellsAt + 4, 0x40000000u, "n_seq_id");
    lie32("v_trans", dataAt, 7, "v_trans");
    lie32("n_layer.zero", dataAt + 4, 0, "n_layer");
    lie32("n_layer.huge", dataAt + 4, 1u << 20, "n_layer");
    lie32("k_type.unknown", k0, 99, "type");
    lie32("k_type.q2k", k0, 10, "type"); // a ggml type llama.cpp never caches
    {
        Bytes m = b;
        putLE<uint64_t>(m, k0 + 4, 0);
        x.add("llamacpp.lie.row_size.zero", m, "layer 0 K row size 0", Expect::Refuse,
              {"row size"});
    }
    for (const uint64_t v : {uint64_t{1} << 40, ~uint64_t{0} / 3, uint64_t{65}}) {
        Bytes m = b;
        putLE<uint64_t>(m, k0 + 4, v);
        x.add("llamacpp.lie.row_size", m, "layer 0 K row size " + std::to_string(v), Expect::Refuse,
              {"row size", "K"});
    }
    // A row size that parses (the file is re-laid out) but is not the model's: the layout check.
    {
        Bytes m(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(k0 + 4));
        Bytes tail(b.begin() + static_cast<std::ptrdiff_t>(k0 + 12), b.end());
        appendLE<uint64_t>(m, 64 + 2); // 2 more bytes per cell...
        const std::size_t rows = 64 * std::size_t{cells};
        m.insert(m.end(), tail.begin(), tail.begin() + static_cast<std::ptrdiff_t>(rows));
        m.insert(m.end(), 2 * std::size_t{cells}, 0);
        m.insert(m.end(), tail.begin() + static_cast<std::ptrdiff_t>(rows), tail.end());
        x.add("llamacpp.layout.row_size", m, "layer 0 K rows of 66 bytes", Expect::Refuse,
              {"row size"});
    }
    // The layout of another model (aidreams260K: 4 layers, MHA).
    x.add("llamacpp.layout.model", b, "stories260K state, aidreams260K model", Expect::Refuse,
          {"n_layer"}, corpus.bases().aidreams);
    // Token ids outside the vocabulary, positions that go backwards: named by the core.
    {
        Bytes m = b;
        putLE<int32_t>(m, 16, 100000);
        x.add("llamacpp.tokens.range", m, "token 1 = 100000", Expect::Refuse, {"tokens.range"});
    }
    {
        Bytes m = b;
        putLE<int32_t>(m, cellsAt + 12 * 5, 2); // cell 5 at position 2 (a duplicate)
        x.add("llamacpp.positions.duplicate", m, "cell 5 at position 2", Expect::Refuse,
              {"positions"});
    }
    // Trailing bytes: legal for llama.cpp's ggsq reader; kvscope warns and goes on.
    {
        Bytes m = b;
        m.insert(m.end(), 1000, 0x5a);
        x.add("llamacpp.trailing", m, "1000 bytes after the state", Expect::Succeed);
    }
    // Truncations at and around every field boundary.
    for (std::size_t cut : truncationPoints(
             b.size(), {8, 12, stateAt, stateAt + 4, cellsAt, dataAt, dataAt + 4, k0, k0 + 12},
             24)) {
        x.add("llamacpp.truncated", Bytes(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(cut)),
              "first " + std::to_string(cut) + " bytes", Expect::Refuse);
    }
    // Random byte flips in the header and records (the data may flip to anything harmless).
    for (int i = 0; i < 12; ++i) {
        Bytes m = b;
        const std::size_t at = corpus.below(k0 + 12);
        m[at] ^= static_cast<uint8_t>(1 + corpus.below(255));
        x.add("llamacpp.flip", m, "byte " + std::to_string(at) + " flipped", Expect::Either);
    }
}

} // namespace kvscope::hostile
