// Writes the committed seed corpora (tests/fuzz/corpus/<target>/) with kvscope's own writers,
// then loads every seed back through the real readers: a seed that does not load would only
// teach the fuzzer the first error. Run after a format change, from the build tree:
//   make_fuzz_seeds <repository>/tests/fuzz/corpus
// The chat template seeds are hand-written files; this program only checks that they render.
#include "chat/template.h"
#include "formats/ggufwriter.h"
#include "formats/safetensorswriter.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "util/fileio.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

using namespace kvscope;
namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

namespace {

[[noreturn]] void die(const std::string& message) {
    std::fprintf(stderr, "make_fuzz_seeds: %s\n", message.c_str());
    std::exit(1);
}

void check(const Status& st) {
    if (!st)
        die(st.message());
}

void writeText(const fs::path& path, const std::string& text) {
    writeFileAtomic(path.string(), text.data(), text.size());
}

std::vector<float> ramp(std::size_t n, float scale) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = scale * (static_cast<float>(i % 17) - 8.0f);
    return v;
}

// ---- GGUF and safetensors -------------------------------------------------------------------

void ggufSeeds(const fs::path& dir) {
    gguf::Writer w;
    w.set("general.architecture", gguf::Value::string("llama"));
    w.set("general.name", gguf::Value::string("fuzz seed"));
    w.set("llama.block_count", gguf::Value::scalar<std::uint32_t>(1));
    w.set("llama.context_length", gguf::Value::scalar<std::uint64_t>(64));
    w.set("llama.rope.freq_base", gguf::Value::scalar<float>(10000.0f));
    w.set("llama.attention.layer_norm_rms_epsilon", gguf::Value::scalar<double>(1e-5));
    w.set("test.i8", gguf::Value::scalar<std::int8_t>(-3));
    w.set("test.u16", gguf::Value::scalar<std::uint16_t>(65535));
    w.set("test.i16", gguf::Value::scalar<std::int16_t>(-2));
    w.set("test.i32", gguf::Value::scalar<std::int32_t>(-70000));
    w.set("test.i64", gguf::Value::scalar<std::int64_t>(-1));
    w.set("test.u8", gguf::Value::scalar<std::uint8_t>(7));
    w.set("test.bool", gguf::Value::scalar<bool>(true));
    w.set("test.f32s", gguf::Value::array<float>(std::vector<float>{0.5f, -1.0f, 3.0f}));
    w.set("test.i32s", gguf::Value::array<std::int32_t>(std::vector<std::int32_t>{1, -2, 3}));
    w.set("test.u64s",
          gguf::Value::array<std::uint64_t>(std::vector<std::uint64_t>{1, 1ull << 40}));
    const bool bools[] = {true, false};
    w.set("test.bools", gguf::Value::array<bool>(std::span<const bool>(bools)));
    w.set("test.strings", gguf::Value::stringArray({"a", "", "\xE2\x96\x81x"}));
    w.addTensor("token_embd.weight", {32, 2}, ramp(64, 0.25f), gguf::TensorType::F32);
    w.addTensor("blk.0.attn_q.weight", {32, 2}, ramp(64, 0.5f), gguf::TensorType::F16);
    w.addTensor("blk.0.attn_k.weight", {32, 1}, ramp(32, 0.5f), gguf::TensorType::BF16);
    w.addTensor("blk.0.ffn_up.weight", {32, 2}, ramp(64, 0.1f), gguf::TensorType::Q8_0);
    std::vector<std::uint8_t> q4(18, 0x21); // one Q4_0 block: f16 scale 0x2121, nibbles
    w.addTensor("blk.0.ffn_gate.weight", {32}, gguf::TensorType::Q4_0, q4);
    std::vector<std::uint8_t> q41(20, 0x13); // one Q4_1 block
    w.addTensor("blk.0.ffn_down.weight", {32}, gguf::TensorType::Q4_1, q41);
    std::vector<std::uint8_t> f64(16, 0);
    w.addTensor("output_norm.weight", {2}, gguf::TensorType::F64, f64);
    w.addTensor("rope.scalar", {}, gguf::TensorType::I32, std::vector<std::uint8_t>(4, 1));
    w.addTensor("empty", {0, 4}, gguf::TensorType::F32, {});
    std::vector<std::uint8_t> q6(210, 0x5A); // a type readF32 refuses
    w.addTensor("blk.0.attn_v.weight", {256}, gguf::TensorType::Q6_K, q6);
    check(w.write((dir / "tensors.gguf").string()));

    gguf::Writer aligned(64);
    aligned.set("general.alignment", gguf::Value::scalar<std::uint32_t>(64));
    aligned.addTensor("a", {3}, ramp(3, 1.0f), gguf::TensorType::F32);
    aligned.addTensor("b", {5}, ramp(5, 1.0f), gguf::TensorType::F16);
    check(aligned.write((dir / "aligned64.gguf").string()));

    check(gguf::Writer().write((dir / "empty.gguf").string()));
}

void safetensorsSeeds(const fs::path& dir) {
    safetensors::Writer w;
    w.setMetadata("format", "pt");
    w.setMetadata("note", "fuzz seed \xC3\xA9");
    w.addTensor("model.embed_tokens.weight", {4, 3}, ramp(12, 0.5f), safetensors::DType::F32);
    w.addTensor("model.layers.0.self_attn.q_proj.weight", {2, 3}, ramp(6, 0.5f),
                safetensors::DType::F16);
    w.addTensor("model.norm.weight", {3}, ramp(3, 1.0f), safetensors::DType::BF16);
    w.addTensor("f64", safetensors::DType::F64, {2}, std::vector<std::uint8_t>(16, 0x3F));
    w.addTensor("ids", safetensors::DType::I64, {2}, std::vector<std::uint8_t>(16, 1));
    w.addTensor("mask", safetensors::DType::Bool, {2, 2}, {1, 0, 0, 1});
    w.addTensor("scalar", safetensors::DType::U8, {}, {9});
    w.addTensor("empty", safetensors::DType::F32, {0, 3}, {});
    check(w.write((dir / "tensors.safetensors").string()));

    safetensors::Writer none;
    check(none.write((dir / "empty.safetensors").string()));
}

// ---- Tokenizers -----------------------------------------------------------------------------

// A tiny vocabulary: the pieces a few English words merge into, spelled with `space` for ' '.
struct Merge {
    std::string a, b;
};
const std::vector<Merge> kMerges = {{"h", "e"},   {"l", "l"},   {" ", "t"},     {" t", "he"},
                                    {"o", "r"},   {"he", "ll"}, {"hell", "o"},  {" ", "w"},
                                    {" w", "or"}, {"l", "d"},   {" wor", "ld"}, {"i", "n"},
                                    {" ", "a"},   {" a", "n"},  {" an", "d"},   {"1", "2"}};

std::string spell(const std::string& s, const std::string& space) {
    std::string out;
    for (const char c : s)
        out += c == ' ' ? space : std::string(1, c);
    return out;
}

// GPT-2 byte-level spelling of s.
std::string byteLevel(const std::string& s) {
    std::string out;
    for (const unsigned char c : s)
        out += tok::uni::byteToChar(c);
    return out;
}

void llama2cSeed(const fs::path& path) {
    std::vector<std::pair<std::string, float>> tokens = {
        {"<unk>", 0.0f}, {"\n<s>\n", 0.0f}, {"\n</s>\n", 0.0f}};
    for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        tokens.emplace_back(name, 0.0f);
    }
    for (const char* c : {" ", "a", "d", "e", "h", "i", "l", "n", "o", "r", "t", "w", "1", "2"})
        tokens.emplace_back(c, -1000.0f);
    float score = -1.0f;
    for (const auto& m : kMerges)
        tokens.emplace_back(m.a + m.b, score -= 0.5f);
    std::vector<std::uint8_t> out;
    auto put = [&](const void* p, std::size_t n) {
        out.insert(out.end(), static_cast<const std::uint8_t*>(p),
                   static_cast<const std::uint8_t*>(p) + n);
    };
    const std::int32_t maxLen = 8;
    put(&maxLen, 4);
    for (const auto& [piece, s] : tokens) {
        const auto len = static_cast<std::int32_t>(piece.size());
        put(&s, 4);
        put(&len, 4);
        put(piece.data(), piece.size());
    }
    writeFileAtomic(path.string(), out.data(), out.size());
}

// The GGUF-embedded vocabularies: "llama" (SentencePiece by scores, byte tokens) and "gpt2"
// (byte-level BPE with merges), both without tensors.
void ggufVocabSeeds(const fs::path& dir) {
    const std::string sp = "\xE2\x96\x81"; // U+2581, SentencePiece's space
    {
        std::vector<std::string> pieces = {"<unk>", "<s>", "</s>"};
        std::vector<float> scores = {0, 0, 0};
        std::vector<std::int32_t> types = {2, 3, 3};
        for (int b = 0; b < 256; ++b) {
            char name[8];
            std::snprintf(name, sizeof name, "<0x%02X>", b);
            pieces.push_back(name);
            scores.push_back(0);
            types.push_back(6);
        }
        for (const char* c :
             {" ", "a", "d", "e", "h", "i", "l", "n", "o", "r", "t", "w", "1", "2"}) {
            pieces.push_back(spell(c, sp));
            scores.push_back(-1000);
            types.push_back(1);
        }
        float score = -1.0f;
        for (const auto& m : kMerges) {
            pieces.push_back(spell(m.a + m.b, sp));
            scores.push_back(score -= 0.5f);
            types.push_back(1);
        }
        pieces.push_back("<|im_end|>");
        scores.push_back(0);
        types.push_back(4);
        gguf::Writer w;
        w.set("tokenizer.ggml.model", gguf::Value::string("llama"));
        w.set("tokenizer.ggml.tokens", gguf::Value::stringArray(pieces));
        w.set("tokenizer.ggml.scores", gguf::Value::array<float>(scores));
        w.set("tokenizer.ggml.token_type", gguf::Value::array<std::int32_t>(types));
        w.set("tokenizer.ggml.bos_token_id", gguf::Value::scalar<std::uint32_t>(1));
        w.set("tokenizer.ggml.eos_token_id", gguf::Value::scalar<std::uint32_t>(2));
        w.set("tokenizer.ggml.unknown_token_id", gguf::Value::scalar<std::uint32_t>(0));
        w.set("tokenizer.ggml.add_bos_token", gguf::Value::scalar<bool>(true));
        w.set("tokenizer.ggml.add_space_prefix", gguf::Value::scalar<bool>(true));
        w.set("tokenizer.chat_template",
              gguf::Value::string("{% for m in messages %}{{ m.content }}{% endfor %}"));
        check(w.write((dir / "vocab-llama.gguf").string()));
    }
    {
        std::vector<std::string> pieces;
        for (int b = 0; b < 256; ++b)
            pieces.push_back(tok::uni::byteToChar(static_cast<unsigned char>(b)));
        std::vector<std::string> merges;
        for (const auto& m : kMerges) {
            pieces.push_back(byteLevel(m.a + m.b));
            merges.push_back(byteLevel(m.a) + " " + byteLevel(m.b));
        }
        std::vector<std::int32_t> types(pieces.size(), 1);
        pieces.push_back("<|endoftext|>");
        types.push_back(3);
        gguf::Writer w;
        w.set("tokenizer.ggml.model", gguf::Value::string("gpt2"));
        w.set("tokenizer.ggml.pre", gguf::Value::string("llama-bpe"));
        w.set("tokenizer.ggml.tokens", gguf::Value::stringArray(pieces));
        w.set("tokenizer.ggml.token_type", gguf::Value::array<std::int32_t>(types));
        w.set("tokenizer.ggml.merges", gguf::Value::stringArray(merges));
        const auto eot = static_cast<std::uint32_t>(pieces.size() - 1);
        w.set("tokenizer.ggml.bos_token_id", gguf::Value::scalar<std::uint32_t>(eot));
        w.set("tokenizer.ggml.eos_token_id", gguf::Value::scalar<std::uint32_t>(eot));
        w.set("tokenizer.ggml.add_bos_token", gguf::Value::scalar<bool>(true));
        check(w.write((dir / "vocab-gpt2.gguf").string()));
    }
}

// tokenizer.json: a byte-level BPE (GPT-2 / Llama 3 style) and a SentencePiece-style BPE with
// byte fallback (Llama 2 style).
void hfSeeds(const fs::path& dir) {
    {
        Json vocab = Json::object();
        int id = 0;
        for (int b = 0; b < 256; ++b)
            vocab[tok::uni::byteToChar(static_cast<unsigned char>(b))] = id++;
        Json merges = Json::array();
        for (const auto& m : kMerges) {
            vocab[byteLevel(m.a + m.b)] = id++;
            merges.push_back(Json::array({byteLevel(m.a), byteLevel(m.b)}));
        }
        Json j = {
            {"version", "1.0"},
            {"added_tokens",
             Json::array({{{"id", id}, {"content", "<|begin_of_text|>"}, {"special", true}},
                          {{"id", id + 1},
                           {"content", "<|eot|>"},
                           {"special", true},
                           {"lstrip", true},
                           {"rstrip", true}},
                          {{"id", id + 2}, {"content", " hello"}, {"single_word", true}}})},
            {"normalizer", {{"type", "NFC"}}},
            {"pre_tokenizer",
             {{"type", "Sequence"},
              {"pretokenizers",
               Json::array(
                   {{{"type", "Split"},
                     {"pattern",
                      {{"Regex", "(?i:'s|'t)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
                                 " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s+(?!\\S)|\\s+"}}},
                     {"behavior", "Isolated"},
                     {"invert", false}},
                    {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
            {"post_processor",
             {{"type", "TemplateProcessing"},
              {"single",
               Json::array({{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                            {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
              {"special_tokens",
               {{"<|begin_of_text|>",
                 {{"id", "<|begin_of_text|>"},
                  {"ids", Json::array({id})},
                  {"tokens", Json::array({"<|begin_of_text|>"})}}}}}}},
            {"decoder", {{"type", "ByteLevel"}}},
            {"model",
             {{"type", "BPE"}, {"ignore_merges", true}, {"vocab", vocab}, {"merges", merges}}}};
        writeText(dir / "bytelevel.tokenizer.json", j.dump(1));
    }
    {
        const std::string sp = "\xE2\x96\x81";
        Json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
        int id = 3;
        for (int b = 0; b < 256; ++b) {
            char name[8];
            std::snprintf(name, sizeof name, "<0x%02X>", b);
            vocab[name] = id++;
        }
        for (const char* c : {" ", "a", "d", "e", "h", "i", "l", "n", "o", "r", "t", "w", "1", "2"})
            vocab[spell(c, sp)] = id++;
        Json merges = Json::array();
        for (const auto& m : kMerges) {
            vocab[spell(m.a + m.b, sp)] = id++;
            merges.push_back(spell(m.a, sp) + " " + spell(m.b, sp));
        }
        Json j = {
            {"added_tokens", Json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                                          {{"id", 1}, {"content", "<s>"}, {"special", true}},
                                          {{"id", 2}, {"content", "</s>"}, {"special", true}}})},
            {"normalizer",
             {{"type", "Sequence"},
              {"normalizers",
               Json::array(
                   {{{"type", "Prepend"}, {"prepend", sp}},
                    {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", sp}}})}}},
            {"pre_tokenizer", nullptr},
            {"post_processor",
             {{"type", "TemplateProcessing"},
              {"single", Json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                      {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
              {"special_tokens",
               {{"<s>",
                 {{"id", "<s>"}, {"ids", Json::array({1})}, {"tokens", Json::array({"<s>"})}}}}}}},
            {"decoder",
             {{"type", "Sequence"},
              {"decoders",
               Json::array({{{"type", "Replace"}, {"pattern", {{"String", sp}}}, {"content", " "}},
                            {{"type", "ByteFallback"}},
                            {{"type", "Fuse"}},
                            {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
            {"model",
             {{"type", "BPE"},
              {"unk_token", "<unk>"},
              {"fuse_unk", true},
              {"byte_fallback", true},
              {"vocab", vocab},
              {"merges", merges}}}};
        writeText(dir / "sentencepiece.tokenizer.json", j.dump(1));
    }
}

void checkTokenizers(const fs::path& dir) {
    for (const auto& e : fs::directory_iterator(dir)) {
        auto t = tok::Tokenizer::fromFile(e.path().string());
        if (!t)
            die(t.message());
        const auto ids = t.value()->encode("hello the world and 12 \xC3\xA9");
        std::printf("%s: %s, %d tokens; 'hello the world and 12 é' -> %zu ids -> '%s'\n",
                    e.path().filename().c_str(), t.value()->kind().c_str(), t.value()->vocabSize(),
                    ids.size(), t.value()->decode(ids, true).c_str());
    }
}

void checkTemplates(const fs::path& dir) {
    const auto messages = Json::parse(R"([{"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}])");
    for (const auto& e : fs::directory_iterator(dir)) {
        auto t = chat::Template::parse(readFileText(e.path().string()), e.path().filename());
        if (!t)
            die(t.message());
        chat::RenderOptions options;
        options.addGenerationPrompt = true;
        options.extraVariables = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
        auto text = t.value().render(messages, options);
        if (!text)
            die(e.path().string() + ": " + text.message());
        std::printf("%s: %zu bytes rendered\n", e.path().filename().c_str(), text.value().size());
    }
}

} // namespace

int main(int argc, char** argv) {
    if (argc != 2)
        die("usage: make_fuzz_seeds <repository>/tests/fuzz/corpus");
    const fs::path root = argv[1];
    for (const char* d : {"gguf", "safetensors", "tokenizer"})
        fs::create_directories(root / d);
    try {
        ggufSeeds(root / "gguf");
        safetensorsSeeds(root / "safetensors");
        llama2cSeed(root / "tokenizer" / "tok.bin");
        ggufVocabSeeds(root / "tokenizer");
        hfSeeds(root / "tokenizer");
    } catch (const std::exception& e) {
        die(e.what());
    }
    for (const auto& e : fs::directory_iterator(root / "gguf"))
        if (auto f = gguf::File::open(e.path().string()); !f)
            die(f.message());
    for (const auto& e : fs::directory_iterator(root / "safetensors"))
        if (auto f = safetensors::File::open(e.path().string()); !f)
            die(f.message());
    checkTokenizers(root / "tokenizer");
    checkTemplates(root / "chat");
    for (const char* d : {"gguf", "safetensors", "tokenizer", "chat"})
        for (const auto& e : fs::directory_iterator(root / d))
            std::printf("%-12s %-36s %6ju bytes\n", d, e.path().filename().c_str(),
                        static_cast<std::uintmax_t>(fs::file_size(e.path())));
    return 0;
}
