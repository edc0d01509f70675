// The pipeline stages of a Hugging Face tokenizer.json (internal): normalizers,
// pre-tokenizers, decoders and post-processors, built from their JSON sections.
// They mirror huggingface/tokenizers' components of the same names. Each object is
// immutable after construction and safe for concurrent const use.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kvscope::tok::hf {

using Json = nlohmann::json;

// One split of the input as it moves through the pipeline (HF's Split of a
// PreTokenizedString). `token` >= 0 once the piece is an added token; later stages skip it.
struct Piece {
    std::string text;
    bool atStart = false; // begins at offset 0 of the original input (Metaspace "first")
    int32_t token = -1;
};
using Pieces = std::vector<Piece>;

// growth(): an upper bound on how many times longer a stage can make a text through the
// strings the file configures (Replace content, Prepend, Metaspace replacement), 1 for the
// stages that only map characters (Unicode forms, case mapping: small fixed factors). A file
// could otherwise make a 30 KB tokenizer.json turn a 30 KB text into 1 GB (a Replace of every
// position by 30 KB), or chain Replaces to grow it exponentially; loaders refuse a pipeline
// whose product exceeds kMaxTextGrowth.
inline constexpr double kMaxTextGrowth = 256;

class Normalizer {
public:
    virtual ~Normalizer() = default;
    virtual std::string normalize(std::string s) const = 0;
    virtual double growth() const { return 1; }
};

class PreTokenizer {
public:
    virtual ~PreTokenizer() = default;
    virtual void apply(Pieces& pieces) const = 0;
    // true when this stage maps bytes to GPT-2 byte characters.
    virtual bool isByteLevel() const { return false; }
    virtual double growth() const { return 1; }
};

class Decoder {
public:
    virtual ~Decoder() = default;
    // HF decode_chain: tokens in, tokens out; the caller joins the result.
    virtual void apply(std::vector<std::string>& tokens) const = 0;
    virtual bool isByteLevel() const { return false; }
    virtual double growth() const { return 1; }
};

// Special tokens to add around a single sequence (HF post_processor, pairs not needed here).
class PostProcessor {
public:
    virtual ~PostProcessor() = default;
    virtual void apply(std::vector<int32_t>& ids, bool addSpecialTokens) const = 0;
    // Every id apply() may add: the loader checks them against the vocabulary, so encode()
    // never returns an id the tokenizer does not have.
    virtual std::vector<int32_t> addedIds() const { return {}; }
};

// Builders: `where` names the JSON path for error messages ("tok.json: pre_tokenizer").
// Unsupported types throw KvError "<where>: unsupported type 'X'".
// Lookup of token strings to ids, for processors that name tokens.
using TokenToId = std::function<int32_t(const std::string&)>;

std::unique_ptr<Normalizer> makeNormalizer(const Json& j, const std::string& where);
std::unique_ptr<PreTokenizer> makePreTokenizer(const Json& j, const std::string& where);
std::unique_ptr<Decoder> makeDecoder(const Json& j, const std::string& where);
std::unique_ptr<PostProcessor> makePostProcessor(const Json& j, const std::string& where,
                                                 const TokenToId& tokenToId);

// A TemplateProcessing section that puts `bos` before and `eos` after each sequence (either
// may be absent), spelled as Llama-style tokenizer.json files do.
struct NamedToken {
    std::string content;
    int32_t id = -1;
};
Json bosEosTemplate(const std::optional<NamedToken>& bos, const std::optional<NamedToken>& eos);

// JSON accessors with messages naming the path.
const Json& member(const Json& j, const char* key, const std::string& where);
std::string getString(const Json& j, const char* key, const std::string& where);
bool getBool(const Json& j, const char* key, bool fallback, const std::string& where);

} // namespace kvscope::tok::hf
