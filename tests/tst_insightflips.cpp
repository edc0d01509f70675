// The insights lab's verdicts moved by the inputs docs/INSIGHTS.md names in "What would flip
// each verdict", built and run. Two inputs recur there:
//   - edited base: the demo model's standard state with one slot's layer-1 V scaled x10 by
//     state::patch (which recomputes the last logits, so restore's equivalence check passes).
//     The cache is no longer what its tokens compute, so a replay of the tokens loses the edit:
//     the experiments that compare a replay with a restore turn round.
//   - silenced attention: the demo model with every layer's attention output projection (wo)
//     zeroed, so that neither the context nor the positions reach the output: the experiments
//     that measure an effect of the cache on the output see none.
// Each row runs the experiment on the plain demo model too and checks that the verdict differs:
// the input flips it, it does not merely reach it.
#include "formats/safetensors.h"
#include "formats/safetensorswriter.h"
#include "insights/lab.h"
#include "state/surgery/surgery.h"

#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QTest>

#include <cstring>
#include <map>

using namespace kvscope;
using namespace kvscope::insights;

namespace {

const char* kDemo = KVSCOPE_TESTS_DIR "/../resources/demo-model";

using V = Verdict;

// The slot whose layer-1 values the edited base scales: inside the prompt, inside the first
// 32 slots and inside the first three quarters, where the experiments' cuts keep it.
constexpr int64_t kEditedSlot = 5;
constexpr float kScale = 100.0f;

} // namespace

Q_DECLARE_METATYPE(kvscope::insights::Verdict)

class TestInsightFlips : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;
    std::map<QString, LabContext> m_contexts;

    std::shared_ptr<const Model> load(const QString& folder) {
        auto r = Model::load(folder.toStdString());
        if (!r)
            qFatal("%s: %s", qPrintable(folder), r.message().c_str());
        return r.value();
    }

    LabContext make(std::shared_ptr<const Model> model) {
        auto ctx = makeLabContext(std::move(model));
        if (!ctx)
            qFatal("makeLabContext: %s", ctx.message().c_str());
        return std::move(ctx).value();
    }

    // A copy of the demo model's folder whose every self_attn.o_proj.weight is zeros.
    QString silencedDemo() {
        const QString dir = m_dir.filePath("silenced");
        QDir().mkpath(dir);
        for (const QString& f : QDir(kDemo).entryList(QDir::Files))
            if (f != "model.safetensors" && !QFile::copy(QString(kDemo) + "/" + f, dir + "/" + f))
                qFatal("cannot copy %s", qPrintable(f));
        auto file = safetensors::File::open(std::string(kDemo) + "/model.safetensors");
        if (!file)
            qFatal("%s", file.message().c_str());
        safetensors::Writer w;
        int zeroed = 0;
        for (const safetensors::TensorInfo& t : file.value().tensors()) {
            std::vector<uint8_t> bytes = file.value().readRaw(t.name);
            if (t.name.ends_with("self_attn.o_proj.weight")) {
                std::fill(bytes.begin(), bytes.end(), uint8_t(0));
                ++zeroed;
            }
            w.addTensor(t.name, t.dtype, t.shape, std::move(bytes));
        }
        if (zeroed != 4 || !w.write((dir + "/model.safetensors").toStdString()))
            qFatal("silenced demo: %d projections zeroed", zeroed);
        return dir;
    }

    // The demo model's standard state with slot kEditedSlot's layer-1 values (every KV head)
    // scaled by 10, patched in with the model so that the last logits are recomputed.
    LabContext editedBase(const LabContext& demo) {
        state::Snapshot source = demo.base;
        std::vector<uint8_t> v = source.layers[1].value->toVector();
        const int64_t len = source.cacheLength, dim = source.headDim;
        for (int64_t h = 0; h < source.kvHeads; ++h)
            for (int64_t d = 0; d < dim; ++d) {
                float x;
                const std::size_t at = std::size_t(((h * len + kEditedSlot) * dim + d) * 4);
                std::memcpy(&x, v.data() + at, 4);
                x *= kScale;
                std::memcpy(v.data() + at, &x, 4);
            }
        source.layers[1].value = std::make_shared<const state::ByteBuffer>(std::move(v));
        state::PatchOptions o;
        o.layer = 1;
        o.begin = kEditedSlot;
        o.end = kEditedSlot + 1;
        auto patched = state::patch(demo.base, source, o, demo.model);
        if (!patched || !patched.value().report.logitsRecomputed)
            qFatal("patching the edited base failed");
        return {demo.model, std::move(patched).value().snapshot, demo.prompt};
    }

    const LabContext& context(const QString& which) {
        if (auto it = m_contexts.find(which); it != m_contexts.end())
            return it->second;
        if (which == "demo")
            return m_contexts.emplace(which, make(load(kDemo))).first->second;
        if (which == "edited")
            return m_contexts.emplace(which, editedBase(context("demo"))).first->second;
        return m_contexts.emplace(which, make(load(silencedDemo()))).first->second;
    }

private slots:
    void flips_data() {
        QTest::addColumn<QString>("input");
        QTest::addColumn<int>("number");
        QTest::addColumn<Verdict>("verdict");
        const auto row = [](const char* input, int n, V v) {
            QTest::newRow(qPrintable(QString("%1 #%2").arg(input).arg(n)))
                << QString(input) << n << v;
        };
        // A replay of the tokens loses the edit; a restore, a truncate, a file keep it.
        row("edited", 1, V::Holds);
        row("edited", 5, V::DoesNotHold);
        row("edited", 6, V::Holds);
        row("edited", 20, V::DoesNotHold);
        row("edited", 21, V::Holds);
        row("edited", 24, V::HoldsWithCaveat); // the tokens survive, the logits move
        row("edited", 31, V::Holds);
        row("edited", 40, V::Holds);
        row("edited", 49, V::Holds);
        row("edited", 75, V::Holds);
        // Nothing in the cache reaches the output.
        row("silenced", 1, V::DoesNotHold);
        row("silenced", 7, V::DoesNotHold);
        row("silenced", 12, V::DoesNotHold);
        row("silenced", 14, V::DoesNotHold);
        row("silenced", 32, V::DoesNotHold);
        row("silenced", 34, V::DoesNotHold);
        row("silenced", 38, V::DoesNotHold);
        row("silenced", 45, V::DoesNotHold);
        row("silenced", 61, V::DoesNotHold);
        row("silenced", 63, V::HoldsWithCaveat);
        row("silenced", 64, V::HoldsWithCaveat);
        row("silenced", 65, V::DoesNotHold);
        row("silenced", 66, V::HoldsWithCaveat);
        row("silenced", 78, V::DoesNotHold);
    }

    void flips() {
        QFETCH(QString, input);
        QFETCH(int, number);
        QFETCH(Verdict, verdict);
        auto plain = runExperiment(number, context("demo"));
        QVERIFY2(plain, plain.message().c_str());
        auto moved = runExperiment(number, context(input));
        QVERIFY2(moved, moved.message().c_str());
        const Measurement& key = moved.value().measurements.front();
        qInfo("#%d on the demo model: %s; on %s: %s, %s = %g %s\n  %s", number,
              verdictName(plain.value().verdict).c_str(), qPrintable(input),
              verdictName(moved.value().verdict).c_str(), key.name.c_str(), key.value,
              key.unit.c_str(), moved.value().why.c_str());
        QCOMPARE(verdictName(moved.value().verdict), verdictName(verdict));
        QVERIFY2(plain.value().verdict != verdict, "the plain demo model reaches it already");
    }
};

QTEST_GUILESS_MAIN(TestInsightFlips)
#include "tst_insightflips.moc"
