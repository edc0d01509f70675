// HF decoders (ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, BPEDecoder,
// Sequence) and post-processors (TemplateProcessing, ByteLevel, RobertaProcessing,
// BertProcessing, Sequence).
#include "tokenizer/hfcomponents.h"
#include "tokenizer/pattern.h"
#include "tokenizer/unicode.h"

#include "util/status.h"

namespace kvscope::tok::hf {

namespace {

// A non-negative integer member (a count), with the path in the error.
std::size_t countOf(const Json& j, const char* key, const std::string& where) {
    const Json& v = member(j, key, where);
    if (!v.is_number_unsigned())
        throw KvError(where + "." + key + ": " + v.dump() + " is not a non-negative integer");
    return v.get<std::size_t>();
}

class ByteLevelDecoder final : public Decoder {
public:
    void apply(std::vector<std::string>& tokens) const override {
        std::string bytes;
        for (const auto& t : tokens) {
            // A token with a character outside the byte alphabet (an added token such as
            // "<|im_start|>" is inside it, but e.g. "▁" is not) is kept as its UTF-8 bytes.
            std::string mapped;
            bool ok = true;
            for (std::size_t i = 0; i < t.size() && ok;) {
                const int b = uni::charToByte(uni::next(t, i));
                if (b < 0)
                    ok = false;
                else
                    mapped += static_cast<char>(b);
            }
            bytes += ok ? mapped : t;
        }
        tokens.assign(1, uni::lossy(bytes));
    }
    bool isByteLevel() const override { return true; }
};

class MetaspaceDecoder final : public Decoder {
public:
    MetaspaceDecoder(const Json& j, const std::string& where) {
        m_replacement = j.contains("replacement") ? getString(j, "replacement", where) : "\u2581";
        if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string())
            m_prepend = j["prepend_scheme"].get<std::string>() != "never";
        else
            m_prepend = getBool(j, "add_prefix_space", true, where);
    }
    void apply(std::vector<std::string>& tokens) const override {
        for (std::size_t i = 0; i < tokens.size(); ++i) {
            std::string out;
            const std::string& t = tokens[i];
            for (std::size_t k = 0; k < t.size();) {
                if (!m_replacement.empty() &&
                    t.compare(k, m_replacement.size(), m_replacement) == 0) {
                    if (!(i == 0 && m_prepend))
                        out += ' ';
                    k += m_replacement.size();
                } else {
                    out += t[k++];
                }
            }
            tokens[i] = std::move(out);
        }
    }

private:
    std::string m_replacement;
    bool m_prepend = true;
};

class ByteFallbackDecoder final : public Decoder {
public:
    void apply(std::vector<std::string>& tokens) const override {
        std::vector<std::string> out;
        std::string pending;
        auto flush = [&] {
            if (pending.empty())
                return;
            if (uni::isValid(pending))
                out.push_back(pending);
            else
                for (std::size_t i = 0; i < pending.size(); ++i)
                    out.push_back("\xEF\xBF\xBD");
            pending.clear();
        };
        for (auto& t : tokens) {
            if (const int value = uni::byteToken(t); value >= 0) {
                pending += static_cast<char>(value);
            } else {
                flush();
                out.push_back(std::move(t));
            }
        }
        flush();
        tokens = std::move(out);
    }
};

class FuseDecoder final : public Decoder {
public:
    void apply(std::vector<std::string>& tokens) const override {
        std::string all;
        for (const auto& t : tokens)
            all += t;
        tokens.assign(1, all);
    }
};

class StripDecoder final : public Decoder {
public:
    StripDecoder(const Json& j, const std::string& where)
        : m_content(getString(j, "content", where)), m_start(countOf(j, "start", where)),
          m_stop(countOf(j, "stop", where)) {}
    void apply(std::vector<std::string>& tokens) const override {
        for (auto& t : tokens) {
            std::vector<std::string> chars;
            for (std::size_t i = 0; i < t.size();) {
                const std::size_t b = i;
                uni::next(t, i);
                chars.push_back(t.substr(b, i - b));
            }
            std::size_t begin = 0, end = chars.size();
            for (std::size_t i = 0; i < m_start && i < chars.size() && chars[i] == m_content; ++i)
                begin = i + 1;
            for (std::size_t i = 0; i < m_stop && i < chars.size(); ++i) {
                const std::size_t idx = chars.size() - i - 1;
                if (chars[idx] != m_content)
                    break;
                end = idx;
            }
            std::string out;
            for (std::size_t i = begin; i < end; ++i)
                out += chars[i];
            t = std::move(out);
        }
    }

private:
    std::string m_content;
    std::size_t m_start, m_stop;
};

class ReplaceDecoder final : public Decoder {
public:
    ReplaceDecoder(const Json& j, const std::string& where)
        : m_pattern(j, where), m_content(getString(j, "content", where)) {}
    void apply(std::vector<std::string>& tokens) const override {
        for (auto& t : tokens)
            t = m_pattern.replaceAll(t, m_content);
    }
    double growth() const override { return m_pattern.replaceGrowth(m_content.size()); }

private:
    Pattern m_pattern;
    std::string m_content;
};

class BpeSuffixDecoder final : public Decoder { // "BPEDecoder": suffix </w> -> space
public:
    explicit BpeSuffixDecoder(std::string suffix) : m_suffix(std::move(suffix)) {}
    void apply(std::vector<std::string>& tokens) const override {
        for (std::size_t i = 0; i < tokens.size(); ++i) {
            auto& t = tokens[i];
            std::string out;
            for (std::size_t p = 0; p < t.size();) {
                if (!m_suffix.empty() && t.compare(p, m_suffix.size(), m_suffix) == 0) {
                    out += i + 1 == tokens.size() ? "" : " ";
                    p += m_suffix.size();
                } else {
                    out += t[p++];
                }
            }
            t = std::move(out);
        }
    }

private:
    std::string m_suffix;
};

class SequenceDecoder final : public Decoder {
public:
    std::vector<std::unique_ptr<Decoder>> items;
    void apply(std::vector<std::string>& tokens) const override {
        for (const auto& d : items)
            d->apply(tokens);
    }
    bool isByteLevel() const override { return items.size() == 1 && items[0]->isByteLevel(); }
    double growth() const override {
        double g = 1;
        for (const auto& d : items)
            g *= d->growth();
        return g;
    }
};

// ---- post-processors ----

class NoPost final : public PostProcessor {
public:
    void apply(std::vector<int32_t>&, bool) const override {}
};

// A token id in a post-processor section: an integer in the range vocabulary ids may have.
int32_t tokenIdOf(const Json& id, const std::string& where) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (1 << 26))
        throw KvError(where + ": " + id.dump() + " is not a token id (an integer in 0..67108863)");
    return id.get<int32_t>();
}

class TemplatePost final : public PostProcessor {
public:
    TemplatePost(const Json& j, const std::string& where) {
        const Json& single = member(j, "single", where);
        if (!single.is_array())
            throw KvError(where + ".single: expected an array");
        const Json* specials = j.contains("special_tokens") ? &j["special_tokens"] : nullptr;
        for (std::size_t i = 0; i < single.size(); ++i) {
            const Json& item = single[i];
            const std::string w = where + ".single[" + std::to_string(i) + "]";
            if (item.contains("Sequence")) {
                m_items.push_back({true, {}});
            } else if (item.contains("SpecialToken")) {
                const std::string name = getString(item["SpecialToken"], "id", w + ".SpecialToken");
                if (!specials || !specials->contains(name))
                    throw KvError(w + ": special token '" + name +
                                  "' is not listed in special_tokens");
                const std::string sw = where + ".special_tokens[\"" + name + "\"]";
                const Json& ids = member((*specials)[name], "ids", sw);
                if (!ids.is_array())
                    throw KvError(sw + ".ids: expected an array");
                Item it{false, {}};
                for (std::size_t k = 0; k < ids.size(); ++k)
                    it.ids.push_back(tokenIdOf(ids[k], sw + ".ids[" + std::to_string(k) + "]"));
                m_items.push_back(std::move(it));
            } else {
                throw KvError(w + ": expected Sequence or SpecialToken");
            }
        }
    }
    void apply(std::vector<int32_t>& ids, bool addSpecialTokens) const override {
        if (!addSpecialTokens)
            return;
        std::vector<int32_t> out;
        for (const auto& item : m_items) {
            if (item.sequence)
                out.insert(out.end(), ids.begin(), ids.end());
            else
                out.insert(out.end(), item.ids.begin(), item.ids.end());
        }
        ids = std::move(out);
    }
    std::vector<int32_t> addedIds() const override {
        std::vector<int32_t> out;
        for (const auto& item : m_items)
            out.insert(out.end(), item.ids.begin(), item.ids.end());
        return out;
    }

private:
    struct Item {
        bool sequence;
        std::vector<int32_t> ids;
    };
    std::vector<Item> m_items;
};

class WrapPost final : public PostProcessor { // Roberta/Bert: cls A sep
public:
    WrapPost(const Json& j, const std::string& where) {
        for (const char* key : {"cls", "sep"}) {
            const Json& pair = member(j, key, where); // ["<s>", 0]
            const std::string w = where + "." + key;
            if (!pair.is_array() || pair.size() != 2)
                throw KvError(w + ": expected [token, id]");
            (key[0] == 'c' ? m_cls : m_sep) = tokenIdOf(pair[1], w + "[1]");
        }
    }
    std::vector<int32_t> addedIds() const override { return {m_cls, m_sep}; }
    void apply(std::vector<int32_t>& ids, bool addSpecialTokens) const override {
        if (!addSpecialTokens)
            return;
        ids.insert(ids.begin(), m_cls);
        ids.push_back(m_sep);
    }

private:
    int32_t m_cls, m_sep;
};

class SequencePost final : public PostProcessor {
public:
    std::vector<std::unique_ptr<PostProcessor>> items;
    void apply(std::vector<int32_t>& ids, bool addSpecialTokens) const override {
        for (const auto& p : items)
            p->apply(ids, addSpecialTokens);
    }
    std::vector<int32_t> addedIds() const override {
        std::vector<int32_t> out;
        for (const auto& p : items) {
            const auto ids = p->addedIds();
            out.insert(out.end(), ids.begin(), ids.end());
        }
        return out;
    }
};

} // namespace

Json bosEosTemplate(const std::optional<NamedToken>& bos, const std::optional<NamedToken>& eos) {
    Json single = Json::array(), pair = Json::array(), specials = Json::object();
    auto append = [&](Json& list, const char* sequence, int typeId) {
        auto special = [&](const NamedToken& t) {
            specials[t.content] = {{"id", t.content},
                                   {"ids", Json::array({t.id})},
                                   {"tokens", Json::array({t.content})}};
            list.push_back({{"SpecialToken", {{"id", t.content}, {"type_id", typeId}}}});
        };
        if (bos)
            special(*bos);
        list.push_back({{"Sequence", {{"id", sequence}, {"type_id", typeId}}}});
        if (eos)
            special(*eos);
    };
    append(single, "A", 0);
    append(pair, "A", 0);
    append(pair, "B", 1);
    return {{"type", "TemplateProcessing"},
            {"single", single},
            {"pair", pair},
            {"special_tokens", specials}};
}

std::unique_ptr<Decoder> makeDecoder(const Json& j, const std::string& where) {
    if (j.is_null())
        return nullptr;
    const std::string type = getString(j, "type", where);
    if (type == "ByteLevel")
        return std::make_unique<ByteLevelDecoder>();
    if (type == "Metaspace")
        return std::make_unique<MetaspaceDecoder>(j, where);
    if (type == "ByteFallback")
        return std::make_unique<ByteFallbackDecoder>();
    if (type == "Fuse")
        return std::make_unique<FuseDecoder>();
    if (type == "Strip")
        return std::make_unique<StripDecoder>(j, where);
    if (type == "Replace")
        return std::make_unique<ReplaceDecoder>(j, where);
    if (type == "BPEDecoder")
        return std::make_unique<BpeSuffixDecoder>(
            j.contains("suffix") ? getString(j, "suffix", where) : "</w>");
    if (type == "Sequence") {
        auto seq = std::make_unique<SequenceDecoder>();
        const Json& list = member(j, "decoders", where);
        if (!list.is_array())
            throw KvError(where + ".decoders: expected an array");
        for (std::size_t i = 0; i < list.size(); ++i)
            if (auto d = makeDecoder(list[i], where + ".decoders[" + std::to_string(i) + "]"))
                seq->items.push_back(std::move(d));
        return seq;
    }
    throw KvError(where + ": unsupported decoder type '" + type + "'");
}

std::unique_ptr<PostProcessor> makePostProcessor(const Json& j, const std::string& where,
                                                 const TokenToId& tokenToId) {
    if (j.is_null())
        return std::make_unique<NoPost>();
    const std::string type = getString(j, "type", where);
    if (type == "ByteLevel")
        return std::make_unique<NoPost>(); // only adjusts offsets
    if (type == "TemplateProcessing")
        return std::make_unique<TemplatePost>(j, where);
    if (type == "RobertaProcessing" || type == "BertProcessing")
        return std::make_unique<WrapPost>(j, where);
    if (type == "Sequence") {
        auto seq = std::make_unique<SequencePost>();
        const Json& list = member(j, "processors", where);
        if (!list.is_array())
            throw KvError(where + ".processors: expected an array");
        for (std::size_t i = 0; i < list.size(); ++i)
            seq->items.push_back(makePostProcessor(
                list[i], where + ".processors[" + std::to_string(i) + "]", tokenToId));
        return seq;
    }
    throw KvError(where + ": unsupported post_processor type '" + type + "'");
}

} // namespace kvscope::tok::hf
