// HF normalizers: NFC/NFD/NFKC/NFKD, Lowercase, Prepend, Replace, Strip, Sequence.
#include "tokenizer/hfcomponents.h"
#include "tokenizer/pattern.h"
#include "tokenizer/unicode.h"

#include "util/status.h"

namespace kvscope::tok::hf {

namespace {

class UnicodeForm final : public Normalizer {
public:
    explicit UnicodeForm(std::string form) : m_form(std::move(form)) {}
    std::string normalize(std::string s) const override { return uni::normalize(s, m_form); }

private:
    std::string m_form;
};

class Lowercase final : public Normalizer {
public:
    std::string normalize(std::string s) const override { return uni::toLower(s); }
};

class Prepend final : public Normalizer {
public:
    explicit Prepend(std::string p) : m_prepend(std::move(p)) {}
    std::string normalize(std::string s) const override {
        return s.empty() ? s : m_prepend + s; // HF prepends to non-empty strings only
    }
    double growth() const override { return 1 + static_cast<double>(m_prepend.size()); }

private:
    std::string m_prepend;
};

class Replace final : public Normalizer {
public:
    Replace(const Json& j, const std::string& where)
        : m_pattern(j, where), m_content(getString(j, "content", where)) {}
    std::string normalize(std::string s) const override {
        return m_pattern.replaceAll(s, m_content);
    }
    double growth() const override { return m_pattern.replaceGrowth(m_content.size()); }

private:
    Pattern m_pattern;
    std::string m_content;
};

class Strip final : public Normalizer {
public:
    Strip(bool left, bool right) : m_left(left), m_right(right) {}
    std::string normalize(std::string s) const override {
        std::size_t begin = 0, end = s.size();
        if (m_left) {
            while (begin < end) {
                std::size_t i = begin;
                if (!uni::isWhitespace(uni::next(s, i)))
                    break;
                begin = i;
            }
        }
        if (m_right) {
            while (end > begin) {
                std::size_t start = end - 1;
                while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80)
                    --start;
                std::size_t i = start;
                if (!uni::isWhitespace(uni::next(s, i)))
                    break;
                end = start;
            }
        }
        return s.substr(begin, end - begin);
    }

private:
    bool m_left, m_right;
};

class Sequence final : public Normalizer {
public:
    std::vector<std::unique_ptr<Normalizer>> items;
    std::string normalize(std::string s) const override {
        for (const auto& n : items)
            s = n->normalize(std::move(s));
        return s;
    }
    double growth() const override {
        double g = 1;
        for (const auto& n : items)
            g *= n->growth();
        return g;
    }
};

} // namespace

std::unique_ptr<Normalizer> makeNormalizer(const Json& j, const std::string& where) {
    if (j.is_null())
        return nullptr;
    const std::string type = getString(j, "type", where);
    if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD")
        return std::make_unique<UnicodeForm>(type);
    if (type == "Lowercase")
        return std::make_unique<Lowercase>();
    if (type == "Prepend")
        return std::make_unique<Prepend>(getString(j, "prepend", where));
    if (type == "Replace")
        return std::make_unique<Replace>(j, where);
    if (type == "Strip")
        return std::make_unique<Strip>(getBool(j, "strip_left", true, where),
                                       getBool(j, "strip_right", true, where));
    if (type == "Sequence") {
        auto seq = std::make_unique<Sequence>();
        const Json& list = member(j, "normalizers", where);
        if (!list.is_array())
            throw KvError(where + ".normalizers: expected an array");
        for (std::size_t i = 0; i < list.size(); ++i)
            if (auto n = makeNormalizer(list[i], where + ".normalizers[" + std::to_string(i) + "]"))
                seq->items.push_back(std::move(n));
        return seq;
    }
    throw KvError(where + ": unsupported normalizer type '" + type + "'");
}

} // namespace kvscope::tok::hf
