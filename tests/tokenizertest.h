// Helpers shared by the tokenizer tests (tst_tokenizer, tst_tokenizerexport).
#pragma once

#include "tokenizer/tokenizer.h"

#include <QByteArray>
#include <QFile>
#include <QList>
#include <QString>
#include <QStringList>
#include <QtTest>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tokenizertest {

using kvscope::tok::Tokenizer;
using TokPtr = std::shared_ptr<const Tokenizer>;
using Ids = std::vector<int32_t>;

inline QString idsText(const Ids& ids) {
    QStringList parts;
    for (int32_t id : ids)
        parts << QString::number(id);
    return parts.join(' ');
}

// Loaded once per path: the big vocabularies take a moment and every data row shares them.
inline TokPtr loadCached(const std::string& path) {
    static std::map<std::string, TokPtr> cache;
    auto it = cache.find(path);
    if (it != cache.end())
        return it->second;
    auto r = Tokenizer::fromFile(path);
    TokPtr t = r ? r.value() : nullptr;
    if (!r)
        qWarning("load %s failed: %s", path.c_str(), r.message().c_str());
    cache.emplace(path, t);
    return t;
}

// The texts of a llama.cpp vocab test's .inp file, as raw UTF-8.
inline QList<QByteArray> readInp(const QString& path) {
    QFile inp(path);
    QList<QByteArray> texts;
    if (!inp.open(QIODevice::ReadOnly))
        return texts;
    const QByteArray all = inp.readAll();
    const QByteArray sep = "\n__ggml_vocab_test__\n";
    qsizetype from = 0;
    for (qsizetype at = all.indexOf(sep); at >= 0; at = all.indexOf(sep, from)) {
        texts << all.mid(from, at - from);
        from = at + sep.size();
    }
    return texts;
}

// Pass/total per reference set, printed (qInfo "summary KEY: PASS/TOTAL") by print(), which the
// tests call from cleanupTestCase.
class PassCounts {
public:
    void count(const QString& key, bool pass) {
        auto& [ok, total] = m_counts[key];
        ok += pass ? 1 : 0;
        ++total;
    }
    void print() const {
        for (const auto& [key, v] : m_counts)
            qInfo("summary %s: %d/%d", qPrintable(key), v.first, v.second);
    }

private:
    std::map<QString, std::pair<int, int>> m_counts;
};

} // namespace tokenizertest
