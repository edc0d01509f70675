// Shared by the state-surgery suites (tst_surgery: truncate, fork, patch, splice;
// tst_lineage: diff, the lineage tree and the surgery CLI): stories260K with its tokenizer, two
// same-length states to operate on, and small helpers.
#pragma once

#include "engine/model.h"
#include "engine/session.h"
#include "state/surgery/diff.h"
#include "state/surgery/lineagetree.h"
#include "state/verify/restore.h"
#include "state/ledger/snapshotio.h"
#include "state/surgery/surgery.h"
#include "state/verify/verifyfile.h"
#include "randomhf.h"
#include "testdata.h"
#include "tokenizer/tokenizer.h"
#include "util/fileio.h"

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

using namespace kvscope;
using namespace kvscope::state;

namespace {

const QString kStories = "models/stories260K/stories260K.bin";
const QString kStoriesTok = "models/stories260K/tok512.bin";
const char* kCli = KVSCOPE_CLI;

inline Snapshot captureOrDie(const Session& s, const Sampler* sampler,
                             const std::vector<int32_t>& prompt) {
    CaptureOptions co;
    co.sampler = sampler;
    co.prompt = plainPromptMeta(prompt, s.model()->config().bosId);
    auto snap = capture(s, co);
    if (!snap)
        qFatal("%s", snap.message().c_str());
    return snap.value();
}

// prompt + `steps` tokens generated with `settings`, captured with the sampler.
inline Snapshot generated(const std::shared_ptr<const Model>& model, const std::string& text,
                          int steps, SamplerSettings settings = {0.0f, 0.9f, 0, 42}) {
    Session s(model);
    const auto prompt = model->tokenizer()->encode(text);
    if (!s.feed(prompt))
        qFatal("feed failed");
    Sampler sampler(settings);
    auto r = s.generate(steps, sampler);
    if (!r)
        qFatal("%s", r.message().c_str());
    return captureOrDie(s, &sampler, prompt);
}

// Exactly these tokens fed (one prefill), captured.
inline Snapshot fed(const std::shared_ptr<const Model>& model, const std::vector<int32_t>& tokens) {
    Session s(model);
    if (!s.feed(tokens))
        qFatal("feed failed");
    Sampler greedy(SamplerSettings{0.0f});
    return captureOrDie(s, &greedy, tokens);
}

// Restores and continues `steps` tokens with the snapshot's own sampler.
inline std::vector<int32_t> continued(const Snapshot& s, const std::shared_ptr<const Model>& model,
                                      int steps) {
    auto r = restore(s, model);
    if (!r)
        qFatal("restore: %s", r.message().c_str());
    auto g = r.value().session.generate(steps, r.value().sampler);
    if (!g)
        qFatal("generate: %s", g.message().c_str());
    return g.value().tokens;
}

inline bool sameCache(const Snapshot& a, const Snapshot& b) {
    if (a.layers.size() != b.layers.size())
        return false;
    for (std::size_t l = 0; l < a.layers.size(); ++l)
        if (*a.layers[l].key != *b.layers[l].key || *a.layers[l].value != *b.layers[l].value)
            return false;
    return true;
}

inline double maxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size())
        return INFINITY;
    double d = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
        d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
    return d;
}

// Largest |x| of an f32 K/V buffer.
inline double maxAbsF32(std::span<const uint8_t> bytes) {
    double m = 0;
    for (std::size_t i = 0; i + 4 <= bytes.size(); i += 4) {
        float f;
        std::memcpy(&f, bytes.data() + i, 4);
        m = std::max(m, std::fabs(double(f)));
    }
    return m;
}

// A tiny random GPT-2 (learned absolute positions) as a Hugging Face folder.
inline std::shared_ptr<const Model> randomGpt2(const QString& folder) {
    const testhf::Gpt2 shape;
    testhf::writeFolder(folder, shape.config(), shape.tensors(), {.seed = 7, .normJitter = 0});
    auto m = Model::load(folder.toStdString());
    if (!m)
        qFatal("%s", m.message().c_str());
    return m.value();
}

inline std::vector<int32_t> someIds(int n, int salt, int vocab) {
    std::vector<int32_t> ids;
    for (int i = 0; i < n; ++i)
        ids.push_back(int32_t((i * 7 + salt) % vocab));
    return ids;
}

inline PatchOptions po(int layer, int head = -1, int64_t begin = -1, int64_t end = -1) {
    PatchOptions o;
    o.layer = layer;
    o.head = head;
    o.begin = begin;
    o.end = end;
    return o;
}

struct Run {
    int code = -1;
    QByteArray out, err;
    QJsonObject json() const { return QJsonDocument::fromJson(out).object(); }
};

inline Run cli(const QStringList& args) {
    QProcess p;
    p.start(kCli, args);
    p.waitForFinished(600000);
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, p.readAllStandardOutput(),
            p.readAllStandardError()};
}

inline QString ids(const Report& r) {
    QStringList l;
    for (const auto& v : r.violations)
        l << QString::fromStdString(v.id + ": " + v.message);
    return l.join("; ");
}

} // namespace

// The fixture: a temporary folder, the model, m_a ("Once upon a time" + 20 greedy tokens) and
// m_b (other text, same length). setUp() leaves the model null when the data is absent (the
// tests then skip through KVSCOPE_REQUIRE_DATA).
class SurgeryFixture : public QObject {
protected:
    QTemporaryDir m_dir;
    std::shared_ptr<const Model> m_model;
    Snapshot m_a; // "Once upon a time" + 20 greedy tokens
    Snapshot m_b; // other text, same length as m_a
    std::string tmp(const QString& name) const { return m_dir.filePath(name).toStdString(); }
    QString qtmp(const QString& name) const { return m_dir.filePath(name); }

    void setUp() {
        QVERIFY(m_dir.isValid());
        if (!testdata::exists(kStories) || !testdata::exists(kStoriesTok))
            return;
        LoadOptions o;
        o.tokenizerPath = testdata::path(kStoriesTok);
        auto m = Model::load(testdata::path(kStories), o);
        QVERIFY2(m.isOk(), m.message().c_str());
        m_model = m.value();
        m_a = generated(m_model, "Once upon a time", 20);
        auto other = m_model->tokenizer()->encode(
            "Tom and his sister went to the park. They saw a big dog and a little cat. The dog "
            "was happy and ran around the tree.");
        QVERIFY(other.size() >= m_a.tokens.size());
        other.resize(m_a.tokens.size());
        m_b = fed(m_model, other);
        QCOMPARE(m_b.cacheLength, m_a.cacheLength);
    }
};
