// A Hugging Face tokenizer.json with a BPE model (internal). Also used for GGUF "gpt2"
// vocabularies, which are byte-level BPE with a pre-tokenizer chosen by tokenizer.ggml.pre.
#pragma once

#include "tokenizer/addedvocab.h"
#include "tokenizer/bpemodel.h"
#include "tokenizer/hfcomponents.h"
#include "tokenizer/tokenizer.h"

namespace kvscope::tok::hf {

struct Pipeline {
    std::unique_ptr<Normalizer> normalizer;
    std::unique_ptr<PreTokenizer> preTokenizer;
    std::unique_ptr<BpeModel> model;
    std::unique_ptr<PostProcessor> postProcessor;
    std::unique_ptr<Decoder> decoder;
    AddedVocab added;
};

struct Metadata {
    std::string kind;
    std::string path;
    std::string fingerprint;
    std::optional<std::string> chatTemplate;
    std::optional<int32_t> bos, eos;
    // Loaders that build the pipeline from something other than a tokenizer.json (GGUF gpt2)
    // keep here the tokenizer.json sections it was built from: "normalizer", "pre_tokenizer",
    // "post_processor", "decoder" (for exportHuggingFace).
    Json sections;
};

class HfTokenizer final : public Tokenizer {
public:
    HfTokenizer(Pipeline pipeline, Metadata meta);

    std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options) const override;
    std::string decode(std::span<const int32_t> ids, bool skipSpecialTokens) const override;
    std::string decodeNext(int32_t prev, int32_t id) const override;
    int32_t vocabSize() const override { return m_vocabSize; }
    std::optional<int32_t> bosId() const override { return m_meta.bos; }
    std::optional<int32_t> eosId() const override { return m_meta.eos; }
    std::string tokenText(int32_t id) const override;
    bool isSpecial(int32_t id) const override;
    std::string kind() const override { return m_meta.kind; }
    std::string fingerprint() const override { return m_meta.fingerprint; }
    std::optional<std::string> chatTemplate() const override { return m_meta.chatTemplate; }
    std::string sourcePath() const override { return m_meta.path; }

    // Only while loading, before the tokenizer is shared.
    void setFingerprint(std::string fingerprint) { m_meta.fingerprint = std::move(fingerprint); }
    void setBosEos(std::optional<int32_t> bos, std::optional<int32_t> eos) {
        m_meta.bos = bos;
        m_meta.eos = eos;
    }
    const AddedVocab& addedVocab() const { return m_p.added; }
    const BpeModel& model() const { return *m_p.model; }
    const PostProcessor& postProcessor() const { return *m_p.postProcessor; }
    const Metadata& metadata() const { return m_meta; }
    // Id of a vocabulary or added-token string; -1 when absent.
    int32_t tokenId(std::string_view text) const;

private:
    Pipeline m_p;
    Metadata m_meta;
    int32_t m_vocabSize = 0;
};

// Reads the "model" section's merges in either form ("a b" or ["a", "b"]).
std::vector<std::pair<std::string, std::string>> parseMerges(const Json& merges,
                                                             const std::string& where);

} // namespace kvscope::tok::hf
