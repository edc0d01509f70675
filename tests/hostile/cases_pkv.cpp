// Hugging Face past_key_values in safetensors (what `export --format safetensors` writes and
// `import` / `verify` read back, state/interop/hfstate.h), through `verify`, `import` and
// `continue` (after `import --force`):
//   pkv.manifest.*   the `kvscope_manifest` metadata: broken JSON, not an object, missing
//                    records, a lying next position, deep nesting, a non-string value;
//   pkv.damaged.*    files the safetensors reader cannot open (truncated, header length past
//                    the end, broken header, data past the end): `verify` must not call them
//                    "not a .kvsnap", `import` must not print a library's exception;
//   pkv.positions.*  position_ids far below zero (keys rotated at 0..n), shifted by -5, beyond
//                    the context, decreasing, of the wrong length or dtype;
//   pkv.shape.*      K/V tensors of another head count, layer count, batch, rank, head size,
//                    length or dtype (each re-laid out so that the bytes agree), token ids,
//                    mask and logits that lie.
// The base is base.kvsnap exported by the CLI under test (hostile.cpp makeBases).
#include "families.h"

#include <cstring>
#include <limits>

namespace kvscope::hostile {

namespace {

using json = nlohmann::json;

// A safetensors file taken apart: its header (tensors and __metadata__) and each tensor's
// bytes; written back with the tensors packed in name order.
struct Pkv {
    json header;
    std::map<std::string, Bytes> data;

    static Pkv parse(const Bytes& f) {
        Pkv p;
        const auto n = getLE<std::uint64_t>(f, 0);
        p.header = json::parse(f.begin() + 8, f.begin() + 8 + static_cast<std::ptrdiff_t>(n));
        for (auto& [name, t] : p.header.items()) {
            if (name == "__metadata__")
                continue;
            const auto b = t["data_offsets"][0].get<std::size_t>();
            const auto e = t["data_offsets"][1].get<std::size_t>();
            const auto at = f.begin() + 8 + static_cast<std::ptrdiff_t>(n);
            p.data[name] =
                Bytes(at + static_cast<std::ptrdiff_t>(b), at + static_cast<std::ptrdiff_t>(e));
        }
        return p;
    }
    Bytes bytes() const {
        json h = header;
        Bytes area;
        for (const auto& [name, d] : data) {
            h[name]["data_offsets"] = {area.size(), area.size() + d.size()};
            area.insert(area.end(), d.begin(), d.end());
        }
        std::string text = h.dump();
        while ((8 + text.size()) % 8)
            text += ' ';
        Bytes f;
        appendLE<std::uint64_t>(f, text.size());
        f.insert(f.end(), text.begin(), text.end());
        f.insert(f.end(), area.begin(), area.end());
        return f;
    }
    void set(const std::string& name, const std::string& dtype, std::vector<std::int64_t> shape,
             Bytes d) {
        header[name] = {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {0, 0}}};
        data[name] = std::move(d);
    }
    void erase(const std::string& name) {
        header.erase(name);
        data.erase(name);
    }
    std::vector<std::int64_t> shape(const std::string& name) const {
        return header.at(name).at("shape").get<std::vector<std::int64_t>>();
    }
    std::string dtype(const std::string& name) const {
        return header.at(name).at("dtype").get<std::string>();
    }
};

Bytes i64s(const std::vector<std::int64_t>& v) {
    Bytes b;
    for (auto x : v)
        appendLE<std::int64_t>(b, x);
    return b;
}

struct Ctx {
    Corpus& c;
    Pkv base;
    Bytes baseBytes;
    std::int64_t length = 0;
    std::size_t rot = 0;

    std::string nextCommand() {
        static const char* const cmds[] = {"verify", "import", "continue"};
        return cmds[rot++ % 3];
    }

    Case& add(const std::string& family, const Bytes& bytes, std::string command,
              const std::string& note, Expect e, bool strict, std::vector<std::string> fields,
              const std::string& file = "past.safetensors") {
        if (command.empty())
            command = nextCommand();
        const auto dir = c.newCaseDir();
        const auto path = dir / file;
        writeAll(path, bytes);
        const std::string& m = c.bases().llama2c;
        std::vector<std::string> args;
        std::vector<std::string> names = {file};
        std::vector<std::vector<std::string>> setup;
        if (command == "verify") {
            args = {"verify", path.string(), "-m", m};
        } else if (command == "import") {
            args = {"import", path.string(), "-m", m, "-o", (dir / "out.kvsnap").string()};
        } else {
            setup.push_back({"import", path.string(), "-m", m, "-o", "imported.kvsnap", "--force"});
            args = {"continue", "imported.kvsnap", "-m", m, "-n", "2"};
            names.push_back("imported.kvsnap");
            // The field is judged on verify and import; here only the refusal and the file
            // (there is none when even `import --force` refused).
            fields.clear();
        }
        addCase(c, dir, {family, "pkv", args, e, names, std::move(fields), path.string(), note});
        Case& k = c.cases().back();
        k.setup = std::move(setup);
        k.mustRefuse = strict && e == Expect::Refuse;
        k.cleanOnSuccess = true;
        // A past_key_values file is not a snapshot: a message calling it one names the
        // wrong thing.
        k.forbidden = {"not a .kvsnap"};
        return k;
    }
    void addAll(const std::string& family, const Bytes& bytes, const std::string& note, Expect e,
                bool strict, const std::vector<std::string>& fields) {
        for (const char* cmd : {"verify", "import", "continue"})
            add(family, bytes, cmd, note, e, strict, fields);
    }
};

void manifestCases(Ctx& x) {
    auto withManifest = [&](const json& value) {
        Pkv p = x.base;
        p.header["__metadata__"]["kvscope_manifest"] = value;
        return p.bytes();
    };
    const std::string good = x.base.header["__metadata__"].value("kvscope_manifest", "{}");
    json m = json::parse(good, nullptr, false);
    // The tensors are intact: a broken manifest may be noted or refused, by name.
    const std::vector<std::pair<std::string, json>> lies = {
        {"broken-json", good.substr(0, good.size() / 2)},
        {"array", "[1, 2, 3]"},
        {"missing-lineage",
         [&] {
             json j = m;
             j.erase("lineage");
             j.erase("model");
             return j.dump();
         }()},
        {"version-99",
         [&] {
             json j = m;
             j["kvscope_ledger"] = 99;
             return j.dump();
         }()},
        {"deep", std::string(100000, '[') + std::string(100000, ']')},
    };
    for (const auto& [tag, value] : lies)
        for (const char* cmd : {"verify", "import"})
            x.add("pkv.manifest." + tag, withManifest(value), cmd, "kvscope_manifest: " + tag,
                  Expect::Either, false, {"manifest"});
    {
        json j = m;
        j["positions"]["next"] = -1000;
        x.addAll("pkv.manifest.next", withManifest(j.dump()),
                 "kvscope_manifest positions.next -1000", Expect::Refuse, true,
                 {"position", "next"});
    }
    {
        Pkv p = x.base;
        p.header["__metadata__"].erase("kvscope_manifest");
        x.add("pkv.manifest.absent", p.bytes(), "import",
              "format kvscope-state without its manifest", Expect::Either, false, {});
        p.header["__metadata__"]["kvscope_manifest"] = 42;
        x.add("pkv.manifest.not-string", p.bytes(), "verify",
              "kvscope_manifest is a number (metadata values are strings)", Expect::Either, false,
              {"manifest", "metadata"});
    }
}

void damagedCases(Ctx& x) {
    const Bytes& b = x.baseBytes;
    const auto n = getLE<std::uint64_t>(b, 0);
    std::vector<std::pair<std::string, Bytes>> files;
    files.emplace_back("truncated-100", Bytes(b.begin(), b.begin() + 100));
    files.emplace_back("truncated-data", Bytes(b.begin(), b.end() - 40));
    {
        Bytes m = b;
        putLE<std::uint64_t>(m, 0, std::uint64_t{1} << 40);
        files.emplace_back("header-length", m);
    }
    {
        Bytes m = b;
        m[8] = '['; // the header's opening brace
        files.emplace_back("header-json", m);
    }
    {
        Bytes m = b;
        m.resize(8 + n); // header only: every tensor's data lies past the end
        files.emplace_back("no-data", m);
    }
    for (const auto& [tag, f] : files)
        for (const char* cmd : {"verify", "import"})
            x.add("pkv.damaged." + tag, f, cmd, tag, Expect::Refuse, true, {});
}

void positionCases(Ctx& x) {
    const std::int64_t n = x.length;
    auto withPositions = [&](std::vector<std::int64_t> pos, const std::string& dtype = "I64") {
        Pkv p = x.base;
        const std::int64_t count = static_cast<std::int64_t>(pos.size());
        Bytes d;
        if (dtype == "F32") {
            for (auto v : pos)
                appendLE<float>(d, static_cast<float>(v));
        } else {
            d = i64s(pos);
        }
        p.set("position_ids", dtype, {1, count}, d);
        return p.bytes();
    };
    auto from = [&](std::int64_t first, std::int64_t count) {
        std::vector<std::int64_t> v;
        for (std::int64_t i = 0; i < count; ++i)
            v.push_back(first + i);
        return v;
    };
    x.addAll("pkv.positions.far-negative", withPositions(from(-1000, n)),
             "position_ids -1000.. (keys rotated at 0..n)", Expect::Refuse, true,
             {"position", "provenance"});
    x.addAll("pkv.positions.shift-5", withPositions(from(-5, n)),
             "position_ids -5.. (keys rotated at 0..n)", Expect::Refuse, true,
             {"position", "provenance"});
    x.addAll("pkv.positions.beyond-context", withPositions(from(1000, n)),
             "position_ids 1000.. (context 512)", Expect::Refuse, true,
             {"position", "context", "provenance"});
    {
        auto v = from(0, n);
        std::reverse(v.begin(), v.end());
        x.add("pkv.positions.decreasing", withPositions(v), "", "position_ids n-1..0",
              Expect::Refuse, true, {"position"});
    }
    x.add("pkv.positions.count", withPositions(from(0, n - 1)), "",
          "position_ids one shorter than the cache", Expect::Refuse, true, {"position"});
    x.add("pkv.positions.int64",
          withPositions(from(std::numeric_limits<std::int64_t>::max() - n, n)), "",
          "position_ids ending at INT64_MAX-1", Expect::Refuse, true, {"position", "context"});
    x.add("pkv.positions.dtype", withPositions(from(0, n), "F32"), "",
          "position_ids as F32 (noted, taken as 0..n-1)", Expect::Either, false, {"position"});
}

void shapeCases(Ctx& x) {
    const Pkv& base = x.base;
    const std::int64_t n = x.length;
    const std::string k0 = "past_key_values.0.key", v0 = "past_key_values.0.value";
    const auto shape = base.shape(k0); // [1, kv_heads, n, head_dim]
    const std::string dt = base.dtype(k0);
    const std::size_t el = dt == "F32" ? 4 : 2;
    const std::int64_t heads = shape[1], hd = shape[3];
    const std::int64_t layers = [&] {
        std::int64_t l = 0;
        while (base.header.contains("past_key_values." + std::to_string(l) + ".key"))
            ++l;
        return l;
    }();
    auto lie = [&](const std::string& tag, const std::string& note, auto mutate,
                   std::vector<std::string> fields) {
        Pkv p = base;
        mutate(p);
        x.add("pkv.shape." + tag, p.bytes(), "", note, Expect::Refuse, true, std::move(fields));
    };
    auto firstHeads = [&](Pkv& p, const std::string& name, std::int64_t h) {
        const Bytes& d = p.data[name];
        p.set(name, dt, {1, h, n, hd},
              Bytes(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(h * n * hd * el)));
    };
    lie("kv-heads", "every layer's K and V with 3 KV heads (the model has 4)",
        [&](Pkv& p) {
            for (std::int64_t l = 0; l < layers; ++l)
                for (const char* w : {".key", ".value"})
                    firstHeads(p, "past_key_values." + std::to_string(l) + w, heads - 1);
        },
        {"shape", "head"});
    lie("layers-fewer", "the last layer's K and V missing",
        [&](Pkv& p) {
            p.erase("past_key_values." + std::to_string(layers - 1) + ".key");
            p.erase("past_key_values." + std::to_string(layers - 1) + ".value");
        },
        {"layer"});
    lie("layers-more", "a layer past the model's (a copy of layer 0)",
        [&](Pkv& p) {
            p.set("past_key_values." + std::to_string(layers) + ".key", dt, shape, p.data[k0]);
            p.set("past_key_values." + std::to_string(layers) + ".value", dt, shape, p.data[v0]);
        },
        {"layer"});
    lie("value-missing", "layer 2's value missing",
        [&](Pkv& p) { p.erase("past_key_values.2.value"); }, {"value", "missing"});
    lie("batch-2", "layer 0's key as batch 2 of half the length",
        [&](Pkv& p) {
            if (n % 2 == 0)
                p.set(k0, dt, {2, heads, n / 2, hd}, p.data[k0]);
            else
                p.set(k0, dt, {2, heads, n, hd}, [&] {
                    Bytes d = p.data[k0];
                    d.insert(d.end(), p.data[k0].begin(), p.data[k0].end());
                    return d;
                }());
        },
        {"shape"});
    lie("rank-5", "layer 0's key of rank 5",
        [&](Pkv& p) {
            p.set(k0, dt, {1, 1, heads, n, hd}, p.data[k0]);
        },
        {"shape"});
    lie("head-dim", "layer 0's key with head size 2x (half the heads)",
        [&](Pkv& p) {
            p.set(k0, dt, {1, heads / 2, n, hd * 2}, p.data[k0]);
        },
        {"shape"});
    lie("length", "layer 2's K and V one position shorter",
        [&](Pkv& p) {
            for (const char* w : {".key", ".value"}) {
                const std::string name = std::string("past_key_values.2") + w;
                const Bytes& d = p.data[name];
                Bytes cut;
                for (std::int64_t h = 0; h < heads; ++h) {
                    const auto at = d.begin() + static_cast<std::ptrdiff_t>(h * n * hd * el);
                    cut.insert(cut.end(), at, at + static_cast<std::ptrdiff_t>((n - 1) * hd * el));
                }
                p.set(name, dt, {1, heads, n - 1, hd}, cut);
            }
        },
        {"length"});
    lie("dtype-i32", "layer 0's key as I32", [&](Pkv& p) { p.set(k0, "I32", shape, p.data[k0]); },
        {"dtype", "I32"});
    lie("dtype-mixed", "layer 0's key as F16 (the rest F32)",
        [&](Pkv& p) {
            p.set(k0, "F16", shape,
                  Bytes(p.data[k0].begin(),
                        p.data[k0].begin() + static_cast<std::ptrdiff_t>(p.data[k0].size() / 2)));
        },
        {"dtype", "F16"});
    lie("input-ids-length", "input_ids 3 longer than the cache",
        [&](Pkv& p) {
            Bytes d = p.data["input_ids"];
            for (int i = 0; i < 3; ++i)
                appendLE<std::int64_t>(d, 1);
            p.set("input_ids", p.dtype("input_ids"), {1, n + 3}, d);
        },
        {"length", "token"});
    lie("input-ids-range", "input_ids[2] = 999999 (vocabulary 512)",
        [&](Pkv& p) {
            Bytes& d = p.data["input_ids"];
            if (p.dtype("input_ids") == "I64")
                putLE<std::int64_t>(d, 16, 999999);
            else
                putLE<std::int32_t>(d, 8, 999999);
        },
        {"token"});
    lie("mask-2", "attention_mask entries 2",
        [&](Pkv& p) {
            Bytes& d = p.data["attention_mask"];
            const std::size_t w = p.dtype("attention_mask") == "I64" ? 8 : 4;
            for (std::size_t i = 0; i < d.size(); i += w)
                d[i] = 2;
        },
        {"mask"});
    lie("logits-count", "last_logits of 10 entries (vocabulary 512)",
        [&](Pkv& p) {
            p.set("last_logits", "F32", {1, 10}, Bytes(40, 0));
        },
        {"logits"});
    {
        // Logits that are finite and the right size but not what the state computes: verify
        // fails on logits.equivalence, and continue must refuse it too (README: continue
        // refuses errors without --force).
        Pkv p = base;
        Bytes& d = p.data["last_logits"];
        for (std::size_t i = 0; i + 4 <= d.size(); i += 4)
            putLE<float>(d, i, getLE<float>(d, i) + static_cast<float>(i % 7));
        x.addAll("pkv.logits.equivalence", p.bytes(), "last_logits perturbed by 0..6",
                 Expect::Refuse, true, {"logits", "equivalence"});
    }
    {
        Pkv p = base;
        p.erase("input_ids");
        x.add("pkv.shape.no-input-ids", p.bytes(), "import", "no input_ids", Expect::Either, false,
              {"input_ids", "token"});
    }
    x.addAll("pkv.valid", x.baseBytes, "the exported state itself (control)", Expect::Succeed,
             false, {});
}

} // namespace

void addPastKeyValuesCases(Corpus& c) {
    Ctx x{c, {}, readAll(c.bases().pastKeyValues)};
    x.base = Pkv::parse(x.baseBytes);
    for (const char* need :
         {"past_key_values.0.key", "input_ids", "position_ids", "attention_mask", "last_logits"})
        if (!x.base.header.contains(need))
            throw std::runtime_error(c.bases().pastKeyValues + ": no " + need +
                                     " (export changed; update cases_pkv.cpp)");
    x.length = x.base.shape("past_key_values.0.key")[2];
    manifestCases(x);
    damagedCases(x);
    positionCases(x);
    shapeCases(x);
}

} // namespace kvscope::hostile
