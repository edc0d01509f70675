// tst_widgets: the GUI's plain structs and item models, no model file needed.
#include "attentionpanel.h"
#include "colorscale.h"
#include "csv.h"
#include "displaytext.h"
#include "elidedlabel.h"
#include "exportmenu.h"
#include "heatmapplot.h"
#include "inductionpanel.h"
#include "kvsummary.h"
#include "plotwidget.h"
#include "positionmodel.h"
#include "selection.h"
#include "snapshotpanel.h"
#include "snapshottreemodel.h"
#include "tokenmodel.h"
#include "tokenstrip.h"
#include "transplantmodel.h"
#include "violationmodel.h"
#include "viewadapter.h"

#include "tokenizer/tokenizer.h"
#include "util/demomodel.h"
#include "workspace/modelcard.h"

#include <QAbstractItemModelTester>
#include <QSignalSpy>
#include <QSettings>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QFont>
#include <QTest>

#include <cmath>
#include <limits>
#include <sys/stat.h>

using namespace kvscope::widgets;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// A small synthetic session: n tokens, 2 layers, 2 KV heads, positions shifted by `offset`
// from index `from` on.
CacheViewPtr makeState(int n, int64_t offset = 0, int64_t from = 0) {
    auto s = std::make_shared<CacheView>();
    s->model.path = QStringLiteral("/synthetic");
    s->layers = 2;
    s->kvHeads = 2;
    s->headDim = 4;
    s->length = n;
    s->nextPosition = n + offset;
    for (int i = 0; i < n; ++i) {
        TokenInfo t;
        t.id = 100 + i;
        t.text = i == 0 ? QStringLiteral("<s>") : QStringLiteral(" w%1").arg(i);
        t.piece = t.text;
        t.position = i >= from ? i + offset : i;
        t.segment = i < n / 2 ? QStringLiteral("prompt") : QStringLiteral("generated");
        t.special = i == 0;
        s->tokens.push_back(t);
        s->positions.push_back(t.position);
        s->mask.push_back(1);
    }
    for (int l = 0; l < s->layers; ++l) {
        std::vector<float> k, v;
        for (int h = 0; h < s->kvHeads; ++h)
            for (int p = 0; p < n; ++p) {
                k.push_back(float(l * 100 + h * 10 + p));
                v.push_back(float(p));
            }
        s->keyNorms.push_back(k);
        s->valueNorms.push_back(v);
    }
    return s;
}

} // namespace

class TestWidgets : public QObject {
    Q_OBJECT
private slots:
    void valueStats() {
        const std::vector<float> v = {1.0f, -2.0f, kNaN, kInf, -kInf, 5.0f, kNaN};
        const auto s = ValueStats::scan(v);
        QCOMPARE(s.finite, 3);
        QCOMPARE(s.nan, 2);
        QCOMPARE(s.posInf, 1);
        QCOMPARE(s.negInf, 1);
        QCOMPARE(s.nonFinite(), 4);
        QCOMPARE(s.min, -2.0);
        QCOMPARE(s.max, 5.0);
    }

    void colorScaleRange() {
        const std::vector<float> v = {2.0f, 4.0f, kInf};
        const auto c = ColorScale::fromData(v);
        QCOMPARE(c.lo, 2.0);
        QCOMPARE(c.hi, 4.0);
        QCOMPARE(c.normalized(3.0), 0.5);
        QCOMPARE(c.normalized(-10.0), 0.0); // clamped
        QCOMPARE(c.normalized(10.0), 1.0);
        QVERIFY(std::isnan(c.normalized(std::numeric_limits<double>::infinity())));
        QVERIFY(std::isnan(ColorScale::displayValue(kInf)));
        QCOMPARE(ColorScale::displayValue(1.5f), 1.5);

        const std::vector<float> flat = {3.0f, 3.0f};
        const auto f = ColorScale::fromData(flat);
        QCOMPARE(f.lo, 2.5);
        QCOMPARE(f.hi, 3.5);
        QCOMPARE(f.normalized(3.0), 0.5);

        const std::vector<float> bad = {kNaN, kInf};
        const auto b = ColorScale::fromData(bad);
        QCOMPARE(b.lo, 0.0);
        QCOMPARE(b.hi, 1.0);

        // Difference maps: zero sits mid-scale (white) whatever the minimum difference is —
        // a layer whose max |Δ| is 4.3 is never painted like an unchanged one.
        const std::vector<float> deltas = {0.5f, 4.3f, 0.0f, kNaN};
        const auto d = ColorScale::symmetric(ValueStats::scan(deltas));
        QCOMPARE(d.lo, -double(4.3f));
        QCOMPARE(d.hi, double(4.3f));
        QCOMPARE(d.normalized(0.0), 0.5);
        QCOMPARE(d.normalized(double(4.3f)), 1.0);
        QCOMPARE(divergingColor(0.5), 0xffffffu);
        QVERIFY(divergingColor(1.0) != 0xffffffu);
        QCOMPARE(divergingColor(std::nan("")), kBadValueColor);
        const auto zeros = ColorScale::symmetric(ValueStats::scan(std::vector<float>{0.0f, 0.0f}));
        QCOMPARE(zeros.normalized(0.0), 0.5);

        const auto m = ColorScale::manual(5.0, 1.0);
        QCOMPARE(m.lo, 1.0);
        QCOMPARE(m.hi, 5.0);
        const auto e = ColorScale::manual(2.0, 2.0);
        QVERIFY(e.hi > e.lo);
    }

    void gradient() {
        QCOMPARE(gradientColor(0.0), 0x440154u);
        QCOMPARE(gradientColor(1.0), 0xfde725u);
        QCOMPARE(gradientColor(0.5), 0x21918cu);
        QCOMPARE(gradientColor(-3.0), 0x440154u);
        QCOMPARE(gradientColor(std::nan("")), kBadValueColor);
        // Monotonic in brightness of the green channel over the gradient.
        uint32_t prevGreen = 0;
        for (int i = 0; i <= 20; ++i) {
            const uint32_t g = (gradientColor(i / 20.0) >> 8) & 0xff;
            QVERIFY(g >= prevGreen);
            prevGreen = g;
        }
    }

    void geometry() {
        const HeatmapGeometry g{4, 3};
        QCOMPARE(g.cellAt(0.0, 0.0), std::optional(HeatmapCell{0, 0}));
        QCOMPARE(g.cellAt(-0.5, -0.5), std::optional(HeatmapCell{0, 0}));
        QCOMPARE(g.cellAt(0.49, 0.0), std::optional(HeatmapCell{0, 0}));
        QCOMPARE(g.cellAt(0.5, 0.0), std::optional(HeatmapCell{1, 0}));
        QCOMPARE(g.cellAt(3.4, 2.4), std::optional(HeatmapCell{3, 2}));
        QVERIFY(!g.cellAt(3.5, 0.0));
        QVERIFY(!g.cellAt(-0.51, 0.0));
        QVERIFY(!g.cellAt(0.0, 2.5));
        QVERIFY(!g.cellAt(std::nan(""), 0.0));
        QCOMPARE(g.index({3, 2}), 11);
        QCOMPARE(g.xMin(), -0.5);
        QCOMPARE(g.xMax(), 3.5);
        QVERIFY(!HeatmapGeometry{}.cellAt(0, 0));
    }

    // Core's alignment (state::alignPositions), which the Positions panel paints.
    void positionAlignment() {
        using kvscope::state::alignPositions;
        const auto ok = alignPositions(4, {0, 1, 2, 3}, 4);
        QCOMPARE(ok.mismatches, 0);
        QCOMPARE(ok.firstMismatch, -1);
        QVERIFY(!ok.nextMismatch());
        QVERIFY(!ok.lengthMismatch());
        QVERIFY(ok.aligned());

        // "position offset by one" fault: every stored position shifted.
        const auto off = alignPositions(3, {1, 2, 3}, 4);
        QCOMPARE(off.mismatches, 3);
        QCOMPARE(off.firstMismatch, 0);
        QVERIFY(off.nextMismatch());

        // Truncated cache without fixing the token buffer.
        const auto cut = alignPositions(5, {0, 1, 2}, 5);
        QCOMPARE(cut.rows.size(), size_t(5));
        QCOMPARE(cut.rows[3].stored, -1);
        QVERIFY(cut.rows[3].mismatch);
        QCOMPARE(cut.firstMismatch, 3);
        QVERIFY(cut.lengthMismatch());
        QVERIFY(cut.nextMismatch());

        // A recorded eviction: tokens 3 and 4 dropped by intent, each kept token at its own
        // position in its slot: aligned (verify reports it clean too). The same slots without
        // the record are the truncation above; a record the positions do not follow is not.
        const std::vector<int64_t> kept{0, 1, 2, 5, 6};
        const auto evicted = alignPositions(7, kept, 7, kept);
        QVERIFY(evicted.evictionRecorded);
        QVERIFY2(evicted.aligned(), qPrintable(QString::number(evicted.mismatches)));
        QCOMPARE(evicted.rows.size(), size_t(7));
        QVERIFY(evicted.rows[3].evicted && !evicted.rows[3].mismatch);
        QCOMPARE(evicted.rows[5].slot, 3);
        QCOMPARE(evicted.rows[5].stored, 5);
        const auto unrecorded = alignPositions(7, kept, 7);
        QVERIFY(!unrecorded.aligned());
        QVERIFY(unrecorded.lengthMismatch());
        const auto misfiled = alignPositions(7, {0, 1, 2, 4, 5}, 6, {0, 1, 2, 5, 6});
        QCOMPARE(misfiled.mismatches, 2); // slots 3, 4 hold tokens 5, 6 at positions 4, 5
        QVERIFY(alignPositions(7, kept, 7, {2, 1, 0, 5, 6}).lengthMismatch()); // not increasing
    }

    void kvSummary() {
        // 1 layer, 2 heads, 3 positions: head 0 = 1,2,3; head 1 = 4,5,NaN.
        const std::vector<std::vector<float>> norms = {{1, 2, 3, 4, 5, kNaN}};
        const auto byHead = KvSummary::layerByHead(norms, 2, 3);
        QCOMPARE(byHead.size(), size_t(2));
        QCOMPARE(byHead[0], 2.0f);
        QVERIFY(std::isnan(byHead[1])); // a bad slot stays visible in the summary
        const auto head1 = KvSummary::layerByPosition(norms, 2, 3, 1);
        QCOMPARE(head1[0], 4.0f);
        QCOMPARE(head1[1], 5.0f);
        const auto mean = KvSummary::layerByPosition(norms, 2, 3, -1);
        QCOMPARE(mean[0], 2.5f);
        QCOMPARE(mean[1], 3.5f);
        QVERIFY(std::isnan(mean[2]));
    }

    void csv() {
        CsvWriter w({QStringLiteral("a"), QStringLiteral("b")});
        w.row({QStringLiteral("x,y"), QStringLiteral("say \"hi\"")});
        w.row({QStringLiteral("line\nbreak"), QStringLiteral("plain")});
        QCOMPARE(w.text(),
                 QStringLiteral("a,b\n\"x,y\",\"say \"\"hi\"\"\"\n\"line\nbreak\",plain\n"));
    }

    void selection() {
        Selection s;
        QSignalSpy spy(&s, &Selection::changed);
        s.setBounds(4, 2, 10);
        QCOMPARE(spy.count(), 1);
        s.setBounds(4, 2, 11); // the cache grew and shrank back; nothing selected moved
        s.setBounds(4, 2, 10);
        QCOMPARE(spy.count(), 1);
        s.set(3, 1, 7);
        QCOMPARE(spy.count(), 2);
        s.set(3, 1, 7); // unchanged: no signal
        QCOMPARE(spy.count(), 2);
        s.set(99, 99, 99); // clamped
        QCOMPARE(s.layer(), 3);
        QCOMPARE(s.head(), 1);
        QCOMPARE(s.position(), 9);
        s.setBounds(2, 1, 5); // cache shrank: the selection follows
        QCOMPARE(s.layer(), 1);
        QCOMPARE(s.head(), 0);
        QCOMPARE(s.position(), 4);
        s.setBounds(0, 0, 0);
        QCOMPARE(s.position(), -1);
        s.set(-1, -1, 3); // negative layer/head keep their values; no cache, no position
        QCOMPARE(s.position(), -1);
    }

    void tokenModel() {
        TokenModel model;
        QAbstractItemModelTester tester(&model,
                                        QAbstractItemModelTester::FailureReportingMode::QtTest);
        QCOMPARE(model.rowCount(), 0);
        model.setState(makeState(6));
        QCOMPARE(model.rowCount(), 6);
        QCOMPARE(model.columnCount(), int(TokenModel::ColumnCount));
        QCOMPARE(model.index(2, TokenModel::IdColumn).data().toInt(), 102);
        QCOMPARE(model.index(2, TokenModel::TextColumn).data().toString(), QStringLiteral("·w2"));
        QCOMPARE(model.index(5, TokenModel::SegmentColumn).data().toString(),
                 QStringLiteral("generated"));
        QCOMPARE(model.index(0, 0).data(TokenModel::SpecialRole).toBool(), true);
        QVERIFY(model.index(1, 0).data(TokenModel::SegmentColorRole).value<QColor>() !=
                model.index(5, 0).data(TokenModel::SegmentColorRole).value<QColor>());
        QVERIFY(model.toCsv().startsWith(
            QStringLiteral("index,id,text,piece,position,segment\n0,100,<s>")));
        model.setState(makeState(2));
        QCOMPARE(model.rowCount(), 2);
        model.setState({});
        QCOMPARE(model.rowCount(), 0);
    }

    void positionModel() {
        PositionModel model;
        QAbstractItemModelTester tester(&model,
                                        QAbstractItemModelTester::FailureReportingMode::QtTest);
        model.setState(makeState(5));
        QCOMPARE(model.rowCount(), 5);
        QCOMPARE(model.alignment().mismatches, 0);
        QCOMPARE(model.index(4, PositionModel::StatusColumn).data().toString(),
                 QStringLiteral("ok"));
        model.setState(makeState(5, 1, 3)); // positions 3.. shifted by one
        QCOMPARE(model.alignment().mismatches, 2);
        QCOMPARE(model.index(3, PositionModel::StatusColumn).data().toString(),
                 QStringLiteral("off by 1"));
        QVERIFY(model.index(3, 0).data(Qt::ForegroundRole).isValid());
        QVERIFY(model.toCsv().contains(QStringLiteral("\n3,4,3,1\n")));
        model.setState({});
        QCOMPARE(model.rowCount(), 0);
    }

    void violationModel() {
        ViolationModel model;
        QAbstractItemModelTester tester(&model,
                                        QAbstractItemModelTester::FailureReportingMode::QtTest);
        auto report = std::make_shared<ValidationView>();
        report->subject = QStringLiteral("live session");
        QCOMPARE(report->worst(), SeverityRank::None);
        // Core's own violations (the model shows core's type; nothing mirrored).
        using kvscope::state::Severity;
        auto& vs = report->report.violations;
        vs.push_back({"prompt.bos", Severity::Note, "prompt", "no BOS", "why", -1, -1, 0});
        vs.push_back({"positions.contiguous", Severity::Error, "positional state", "gap, at slot 3",
                      "explained", 2, 1, 3});
        vs.push_back({"cache.shape", Severity::Warning, "KV cache", "NaN", "", 1, -1, -1, true});
        QCOMPARE(report->worst(), SeverityRank::Error);
        QCOMPARE(report->count(Severity::Warning), 1);
        model.setReport(report);
        QCOMPARE(model.rowCount(), 3);
        // Sorted by severity: error, warning, note.
        QCOMPARE(model.index(0, ViolationModel::IdColumn).data().toString(),
                 QStringLiteral("positions.contiguous"));
        QCOMPARE(model.index(1, ViolationModel::SeverityColumn).data().toString(),
                 QStringLiteral("warning"));
        QCOMPARE(model.index(2, ViolationModel::SeverityColumn).data().toString(),
                 QStringLiteral("note"));
        QCOMPARE(model.index(0, ViolationModel::WhereColumn).data().toString(),
                 QStringLiteral("layer 2, head 1, position 3"));
        QCOMPARE(model.index(0, 0).data(ViolationModel::PositionRole).toLongLong(), 3);
        QCOMPARE(model.index(0, 0).data(ViolationModel::ExplanationRole).toString(),
                 QStringLiteral("explained"));
        QVERIFY(model.toCsv().contains(QStringLiteral("\"gap, at slot 3\"")));
        QCOMPARE(model.index(1, 0).data(ViolationModel::StructuralRole).toBool(), true);
        QCOMPARE(model.index(0, 0).data(ViolationModel::StructuralRole).toBool(), false);
        model.setReport(std::make_shared<ValidationView>());
        QCOMPARE(model.rowCount(), 0);
    }

    void snapshotTreeModel() {
        SnapshotTreeModel model;
        QAbstractItemModelTester tester(&model,
                                        QAbstractItemModelTester::FailureReportingMode::QtTest);
        auto ledger = std::make_shared<LedgerView>();
        // The links come from core's lineage tree (parent = index, -1 for a root).
        auto node = [](QString id, QString parent, int parentIndex, QString op, qint64 tokens) {
            SnapshotNode n;
            n.id = id;
            n.parentId = parent;
            n.parent = parentIndex;
            n.operation = op;
            n.tokens = tokens;
            return n;
        };
        // root -> (fork -> truncate), (capture); "orphan" has a parent outside the ledger;
        // "bad" carries an out-of-range index and is shown as a root.
        ledger->nodes = {
            node("root", "", -1, "capture", 10),        node("fork1", "root", 0, "fork", 12),
            node("cap2", "root", 0, "capture", 20),     node("trunc", "fork1", 1, "truncate", 5),
            node("orphan", "elsewhere", -1, "load", 7), node("bad", "x", 99, "load", 1)};
        ledger->currentId = QStringLiteral("trunc");
        model.setLedger(ledger);
        QCOMPARE(model.rowCount(), 3); // root, orphan and bad
        const QModelIndex root = model.index(0, 0);
        QCOMPARE(model.data(root, SnapshotTreeModel::IdRole).toString(), QStringLiteral("root"));
        QCOMPARE(model.rowCount(root), 2);
        const QModelIndex fork = model.index(0, 0, root);
        QCOMPARE(model.rowCount(fork), 1);
        const QModelIndex trunc = model.index(0, 0, fork);
        QCOMPARE(model.parent(trunc), fork);
        QCOMPARE(model.parent(fork), root);
        QCOMPARE(model.indexOf(QStringLiteral("trunc")), trunc);
        QVERIFY(model.data(trunc, Qt::FontRole).value<QFont>().bold());
        QCOMPARE(model.index(1, SnapshotTreeModel::TokensColumn, root).data().toLongLong(), 20);
        QVERIFY(model.toCsv().contains(QStringLiteral("trunc,fork1,truncate")));
        // Another model's row names its model, is greyed and says why in its tooltip; the
        // loaded model's rows are not.
        auto other = std::make_shared<LedgerView>(*ledger);
        other->nodes[2].modelName = QStringLiteral("aidreams260K.bin");
        other->nodes[2].otherModel = true;
        other->nodes[2].ownTokenizerFound = false;
        model.setLedger(other);
        const QModelIndex cap2 = model.index(1, SnapshotTreeModel::ModelColumn, root);
        QCOMPARE(cap2.data().toString(), QStringLiteral("aidreams260K.bin"));
        QVERIFY(cap2.data(Qt::ForegroundRole).isValid());
        QVERIFY(!model.index(0, SnapshotTreeModel::ModelColumn, root)
                     .data(Qt::ForegroundRole)
                     .isValid());
        QVERIFY2(
            cap2.data(Qt::ToolTipRole).toString().contains(QStringLiteral("not the loaded model")),
            qPrintable(cap2.data(Qt::ToolTipRole).toString()));
        QVERIFY(cap2.data(Qt::ToolTipRole).toString().contains(QStringLiteral("as ids")));
        QVERIFY(model.toCsv().contains(QStringLiteral("aidreams260K.bin")));
        model.setLedger(std::make_shared<LedgerView>());
        QCOMPARE(model.rowCount(), 0);
        model.setLedger({});
        QCOMPARE(model.rowCount(), 0);
    }

    void transplantModel() {
        TransplantModel model;
        QAbstractItemModelTester tester(&model,
                                        QAbstractItemModelTester::FailureReportingMode::QtTest);
        QCOMPARE(model.rowCount(), 0);
        auto view = std::make_shared<TransplantView>();
        view->result.layer = 2;
        // core's result as it comes: a skipped intervention has no rows.
        view->result.persistence.push_back({"residual-only", {}, "prompts of different lengths"});
        kvscope::state::Persistence kv{"residual+kv", {}, {}};
        for (int step = 0; step < 3; ++step)
            kv.steps.push_back({step, 7, 0.5 * step, 1.0, step == 0, true});
        view->result.persistence.push_back(kv);
        view->stepTokens = {
            {}, {QStringLiteral("a, b"), QStringLiteral("a, b"), QStringLiteral("a, b")}};
        model.setResult(view);
        QCOMPARE(model.rowCount(), 3);
        QCOMPARE(model.data(model.index(0, TransplantModel::Intervention)).toString(),
                 QStringLiteral("residual+kv"));
        QCOMPARE(model.columnCount(), int(TransplantModel::ColumnCount));
        QCOMPARE(model.data(model.index(2, TransplantModel::KlDonor)).toString(),
                 QStringLiteral("1"));
        QCOMPARE(model.data(model.index(0, TransplantModel::MatchesDonor)).toString(),
                 QStringLiteral("yes"));
        const QString csv = model.toCsv();
        QCOMPARE(csv.count(QLatin1Char('\n')), 4);
        QVERIFY(csv.contains(QStringLiteral("\"a, b\""))); // quoted field
        model.setResult(nullptr);
        QCOMPARE(model.rowCount(), 0);
    }

    // The induction panel's tables: every head in core's ranking (by induction score, ties
    // keep layer-major order), the recalled tokens in text order; CSV of both.
    void inductionModels() {
        InductionView empty;
        QCOMPARE(empty.report.strongest().layer, -1);

        auto view = std::make_shared<InductionView>();
        view->layers = 2;
        view->queryHeads = 3;
        const double scores[2][3] = {{0.10, 0.62, 0.05}, {0.30, 0.10, 0.71}};
        for (int l = 0; l < 2; ++l)
            for (int h = 0; h < 3; ++h)
                view->report.heads.push_back({l, h, scores[l][h], 0.01 * (l * 3 + h)});
        view->report.recalled.push_back({5, 11, ",", 2, 1, 0.9});
        view->report.recalled.push_back({6, 12, " Jab", 1, 40, 0.001});
        view->recalledTexts << QStringLiteral(",") << QStringLiteral(" Jab");
        QCOMPARE(view->report.strongest().layer, 1);
        QCOMPARE(view->report.strongest().head, 2);

        InductionHeadModel heads;
        QAbstractItemModelTester headTester(&heads,
                                            QAbstractItemModelTester::FailureReportingMode::QtTest);
        QCOMPARE(heads.rowCount(), 0);
        heads.setReport(view);
        QCOMPARE(heads.rowCount(), 6);
        QCOMPARE(heads.columnCount(), int(InductionHeadModel::ColumnCount));
        // 0.71 (1,2), 0.62 (0,1), 0.30 (1,0), 0.10 (0,0), 0.10 (1,1), 0.05 (0,2)
        const int order[6][2] = {{1, 2}, {0, 1}, {1, 0}, {0, 0}, {1, 1}, {0, 2}};
        for (int r = 0; r < 6; ++r) {
            QCOMPARE(heads.head(r).layer, order[r][0]);
            QCOMPARE(heads.head(r).head, order[r][1]);
            QCOMPARE(heads.rowOf(order[r][0], order[r][1]), r);
        }
        QCOMPARE(heads.rowOf(2, 0), -1);
        QCOMPARE(heads.data(heads.index(0, InductionHeadModel::Induction)).toString(),
                 QStringLiteral("0.710"));
        QCOMPARE(
            heads.data(heads.index(0, InductionHeadModel::Induction), InductionHeadModel::ScoreRole)
                .toDouble(),
            0.71);
        QCOMPARE(heads.data(heads.index(1, InductionHeadModel::Layer)).toInt(), 0);
        const QString csv = heads.toCsv();
        QCOMPARE(csv.count(QLatin1Char('\n')), 7);
        QVERIFY(csv.startsWith(QStringLiteral("layer,head,induction,previous_token\n1,2,0.71,")));

        InductionRecallModel recall;
        QAbstractItemModelTester recallTester(
            &recall, QAbstractItemModelTester::FailureReportingMode::QtTest);
        recall.setReport(view);
        QCOMPARE(recall.rowCount(), 2);
        QCOMPARE(recall.data(recall.index(1, InductionRecallModel::Rank)).toInt(), 40);
        QCOMPARE(recall.data(recall.index(1, InductionRecallModel::Earlier)).toInt(), 1);
        QVERIFY(recall.data(recall.index(0, InductionRecallModel::Token), Qt::FontRole)
                    .value<QFont>()
                    .bold()); // ranked first: remembered
        QVERIFY(!recall.data(recall.index(1, InductionRecallModel::Token), Qt::FontRole).isValid());
        const QString rcsv = recall.toCsv();
        QCOMPARE(rcsv.count(QLatin1Char('\n')), 3);
        QVERIFY(rcsv.contains(QStringLiteral("5,\",\",2,1,0.9"))); // the comma token is quoted
        heads.setReport(nullptr);
        recall.setReport(nullptr);
        QCOMPARE(heads.rowCount(), 0);
        QCOMPARE(recall.rowCount(), 0);
    }

    // A long status in a narrow dock (the Attention panel's, the heat maps' readout): one line
    // elided to the width, the whole text in the tooltip, and a minimum of a few characters,
    // so that it neither widens the dock nor takes lines from the plot.
    void elidedLabelStaysOneLine() {
        using namespace kvscope::widgets;
        const QString text = QStringLiteral("layer 0 · head 0 (KV 0) · 14 × 14 · queries "
                                            "recorded live · 0 ms · grey = cannot see");
        ElidedLabel label;
        label.setFullText(text);
        label.show();
        label.resize(120, label.sizeHint().height());
        QCOMPARE(label.fullText(), text);
        QCOMPARE(label.toolTip(), text);
        QVERIFY2(label.text().endsWith(QChar(0x2026)), qPrintable(label.text()));
        QVERIFY(label.fontMetrics().horizontalAdvance(label.text()) <= 120);
        QVERIFY(!label.wordWrap());
        QVERIFY(label.minimumSizeHint().width() < 120);
        label.resize(label.fontMetrics().horizontalAdvance(text) + 20, label.height());
        QCOMPARE(label.text(), text); // room again: all of it
        label.setFullText(QStringLiteral("computing…"));
        QCOMPARE(label.text(), QStringLiteral("computing…"));
    }

    // A legend under its plot (Survival's frontier, Position's strips): as many entries a row
    // as asked where they fit, fewer in a narrow dock, one when even two would clip; every
    // entry whole inside the plot, and the same entries in the same order whatever the width.
    void legendUnderPlotWrapsToTheWidth() {
        using namespace kvscope::widgets;
        QCustomPlot plot;
        const QStringList names{QStringLiteral("tova head-adaptive"), QStringLiteral("h2o pyramid"),
                                QStringLiteral("quant-same-axis"), QStringLiteral("residual"),
                                QStringLiteral("streaming sinks")};
        for (const QString& name : names)
            plot.addGraph()->setName(name);
        plot.legend->setVisible(true);
        legendUnderPlot(&plot, 3, 4);
        plot.show();
        QVERIFY(QTest::qWaitForWindowExposed(&plot));
        int widest = 0;
        for (int i = 0; i < plot.legend->itemCount(); ++i)
            if (const QCPAbstractLegendItem* item = plot.legend->item(i))
                widest = std::max(widest, item->minimumOuterSizeHint().width());
        QVERIFY(widest > 40);
        auto layOut = [&](int width) {
            plot.resize(width, 300);
            QTest::qWait(20);
            plot.replot(QCustomPlot::rpImmediateRefresh);
            plot.replot(QCustomPlot::rpImmediateRefresh); // the second uses the new wrap
            QStringList order;
            for (int i = 0; i < plot.legend->elementCount(); ++i)
                if (auto* item = qobject_cast<QCPPlottableLegendItem*>(plot.legend->elementAt(i))) {
                    order << item->plottable()->name();
                    if (item->outerRect().right() > width || item->outerRect().left() < 0)
                        return QStringList{QStringLiteral("clipped at %1: %2")
                                               .arg(width)
                                               .arg(item->plottable()->name())};
                }
            return order;
        };
        QCOMPARE(layOut(3 * widest + 60), names);
        QCOMPARE(plot.legend->wrap(), 3);
        QCOMPARE(layOut(2 * widest + 20), names);
        QCOMPARE(plot.legend->wrap(), 2);
        QCOMPARE(layOut(widest + 10), names);
        QCOMPARE(plot.legend->wrap(), 1);
        QCOMPARE(layOut(3 * widest + 60), names); // and back
        QCOMPARE(plot.legend->wrap(), 3);
    }

    // A heatmap labels each cell with its token only while there is room for one a cell, also
    // after one resize that shrinks it a lot (a floating dock docked again kept its labels,
    // piled over each other, until something else replotted).
    void heatmapTokenLabelsFollowOneResize() {
        using namespace kvscope::widgets;
        HeatmapPlot plot(QStringLiteral("attention"));
        const int n = 14;
        std::vector<float> values(size_t(n * n), 0.5f);
        plot.setData(n, n, values);
        QStringList tokens;
        for (int i = 0; i < n; ++i)
            tokens << QStringLiteral("tok%1").arg(i);
        plot.setAxisTokens(Qt::Horizontal, tokens);
        plot.setAxisTokens(Qt::Vertical, tokens);
        plot.resize(900, 700);
        plot.show();
        QVERIFY(QTest::qWaitForWindowExposed(&plot));
        QTRY_VERIFY(plot.axisShowsTokens(Qt::Vertical));
        plot.resize(300, 230);
        QTRY_VERIFY(!plot.axisShowsTokens(Qt::Vertical));
        QTRY_VERIFY(!plot.axisShowsTokens(Qt::Horizontal));
        // What is on screen: numbers, not tokens.
        QTest::qWait(50);
        for (const QString& label : plot.plot()->yAxis->tickVectorLabels())
            QVERIFY2(!label.contains(QStringLiteral("tok")), qPrintable(label));
        plot.resize(900, 700); // and back
        QTRY_VERIFY(plot.axisShowsTokens(Qt::Vertical));
    }

    // "Export PNG…/CSV…" writes through core's output-path policy: a FIFO is refused with its
    // kind named and left a FIFO; a link's target is written; a PNG really is one.
    void exportsFollowTheOutputPolicy() {
        using namespace kvscope::widgets;
        QTemporaryDir dir;
        const QString fifo = dir.filePath("plot.png");
        QVERIFY(::mkfifo(QFile::encodeName(fifo).constData(), 0644) == 0);
        QImage image(8, 4, QImage::Format_RGB32);
        image.fill(Qt::red);
        const QByteArray png = pngBytes(image);
        QVERIFY(png.startsWith("\x89PNG"));
        const QString error = writeExportFile(fifo, png);
        QVERIFY2(error.contains("FIFO") && error.contains(fifo), qPrintable(error));
        QVERIFY(QFileInfo(fifo).exists() && !QFileInfo(fifo).isFile());
        QVERIFY(QFile::link("real.csv", dir.filePath("link.csv")));
        QCOMPARE(writeExportFile(dir.filePath("link.csv"), "a,b\n1,2\n"), QString());
        QVERIFY(QFileInfo(dir.filePath("link.csv")).isSymLink());
        QFile real(dir.filePath("real.csv"));
        QVERIFY(real.open(QIODevice::ReadOnly));
        QCOMPARE(real.readAll(), QByteArray("a,b\n1,2\n"));
    }

    // Save/export dialogs start in the folder of the last export, else the documents folder or
    // home — never the folder the program was started from (they opened in the source tree).
    void exportDialogsStartInTheLastFolder() {
        using namespace kvscope::widgets;
        QStandardPaths::setTestModeEnabled(true);
        QCoreApplication::setOrganizationName(QStringLiteral("kvscope-test"));
        QCoreApplication::setApplicationName(QStringLiteral("tst_widgets_exportfolder"));
        QSettings().remove(QStringLiteral("export/folder"));
        const QString start = exportFolder();
        QVERIFY2(QFileInfo(start).isDir() && start != QDir::currentPath(), qPrintable(start));
        QTemporaryDir dir;
        rememberExportFolder(dir.filePath(QStringLiteral("map.png")));
        QCOMPARE(exportFolder(), QFileInfo(dir.path()).absoluteFilePath());
        rememberExportFolder(dir.filePath(QStringLiteral("gone/x.csv"))); // a folder since removed
        QCOMPARE(exportFolder(), start);
        QSettings().remove(QStringLiteral("export/folder"));
    }

    // Issue 12: one display form of a token everywhere (the strip, drift, induction,
    // transplant): decoded text, whitespace made visible. The drift panel used to print raw
    // byte-level pieces ("Ġsay", shown as "Gsay") while the strip showed "·say".
    void tokenDisplayIsOneHelper() {
        QCOMPARE(displayToken(QStringLiteral(" say")), QStringLiteral("·say"));
        QCOMPARE(displayToken(QStringLiteral("\n")), QStringLiteral("⏎"));
        QCOMPARE(displayToken(QStringLiteral("a\tb")), QStringLiteral("a⇥b"));
        QCOMPARE(displayToken(QStringLiteral("\r")), QStringLiteral("␍"));
        QCOMPARE(displayToken(QString()), QStringLiteral("∅"));
        QCOMPARE(TokenModel::visibleText({.text = QStringLiteral(" say")}),
                 displayToken(QStringLiteral(" say")));
        // The adapter decodes the ids the drift reports as the strip decodes them: the demo
        // model's byte-level "Ġsay" prints as " say", shown "·say" by both panels.
        const auto demo = kvscope::findDemoModel();
        QVERIFY2(demo, "the bundled demo model was not found");
        auto tok = kvscope::tok::Tokenizer::fromFile(*demo + "/tokenizer.json");
        QVERIFY2(tok.isOk(), tok.message().c_str());
        const auto ids = tok.value()->encode("And I say unto you", {.addSpecialTokens = false});
        QVERIFY(ids.size() >= 3);
        const int32_t say = ids[2];
        QVERIFY2(QString::fromStdString(tok.value()->tokenText(say)).startsWith(QChar(0x120)),
                 tok.value()->tokenText(say).c_str()); // a byte-level piece: "Ġsay"
        const QString decoded = adapt::decodedText(tok.value().get(), ids[1], say);
        QCOMPARE(decoded, QStringLiteral(" say"));
        const auto strip = adapt::tokenInfos(ids, {}, {}, tok.value().get());
        QCOMPARE(TokenModel::visibleText(strip[2]), displayToken(decoded));
        QCOMPARE(displayToken(decoded), QStringLiteral("·say"));
    }

    // Issue 12: a lineage edge's parameters as words (the raw JSON in the tooltip), and
    // counts with their singular.
    void parametersAsText() {
        QCOMPARE(
            parametersText(QStringLiteral(R"({"at":12,"dropped_tokens":3,"logits":"recomputed"})")),
            QStringLiteral("at 12 · dropped 3 tokens · logits recomputed"));
        QCOMPARE(parametersText(QStringLiteral(R"({"dropped_tokens":1,"at":4})")),
                 QStringLiteral("at 4 · dropped 1 token"));
        QCOMPARE(parametersText(QStringLiteral(R"({"generated":1})")),
                 QStringLiteral("generated 1 token"));
        // A fork branch: the sampler last; "steps" as a stop reason is not repeated.
        QCOMPARE(parametersText(QStringLiteral(
                     R"({"branches":2,"generated":16,"seed":43,"seed_base":42,"steps":16,)"
                     R"("stop_reason":"steps","temperature":1.0,"top_k":0,"top_p":0.9})")),
                 QStringLiteral("2 branches · 16 steps · generated 16 tokens · seed 43 · seeds "
                                "from 42 · temperature 1 · top-p 0.9 · top-k 0"));
        QCOMPARE(parametersText(QStringLiteral(R"({"steps":4,"stop_reason":"eos"})")),
                 QStringLiteral("4 steps · stopped at the end-of-text token"));
        QCOMPARE(parametersText(QStringLiteral(
                     R"({"source_id":"0123456789abcdef","layer":2,"head":-1,"begin":0,"end":8})")),
                 QStringLiteral("range 0:8 · layer 2 · every head · from 01234567"));
        // A fault's own parameters, as recorded.
        QCOMPARE(parametersText(QStringLiteral(R"({"fault":"position-offset","offset":1})")),
                 QStringLiteral("position-offset · offset 1"));
        QCOMPARE(parametersText(QString()), QString());
        QCOMPARE(parametersText(QStringLiteral("{}")), QString());
        QCOMPARE(parametersText(QStringLiteral("not json")), QStringLiteral("not json"));
        QCOMPARE(stopReasonText(QStringLiteral("steps")), QString());
        QVERIFY(!stopReasonText(QStringLiteral("context_full")).isEmpty());

        // The snapshot tree shows them so, with the recorded JSON in the tooltip.
        auto ledger = std::make_shared<LedgerView>();
        SnapshotNode root;
        root.id = QStringLiteral("aaaaaaaa11111111");
        root.operation = QStringLiteral("capture");
        root.tokens = 1;
        SnapshotNode cut;
        cut.id = QStringLiteral("bbbbbbbb22222222");
        cut.parentId = root.id;
        cut.parent = 0;
        cut.operation = QStringLiteral("truncate");
        cut.parameters = QStringLiteral(R"({"at":12,"dropped_tokens":3,"logits":"recomputed"})");
        cut.tokens = 12;
        ledger->nodes = {root, cut};
        SnapshotTreeModel model;
        model.setLedger(ledger);
        const QModelIndex r = model.index(0, 0);
        const QModelIndex c = model.index(0, SnapshotTreeModel::ParametersColumn, r);
        QCOMPARE(c.data().toString(),
                 QStringLiteral("at 12 · dropped 3 tokens · logits recomputed"));
        QVERIFY2(c.data(Qt::ToolTipRole).toString().contains(cut.parameters),
                 qPrintable(c.data(Qt::ToolTipRole).toString()));
        QVERIFY2(model.index(0, 0)
                     .data(Qt::ToolTipRole)
                     .toString()
                     .contains(QStringLiteral("\n1 token,")),
                 qPrintable(model.index(0, 0).data(Qt::ToolTipRole).toString()));
        QVERIFY(model.toCsv().contains(QStringLiteral("dropped_tokens"))); // CSV keeps the JSON
        QCOMPARE(countOf(1, QStringLiteral("token"), QStringLiteral("tokens")),
                 QStringLiteral("1 token"));
    }

    // The restore dialog's question: the state by name (no title bar without a window
    // manager), the counts as the Validation panel gives them (it said "2 warnings or notes"
    // beside "0 warnings, 2 notes"), a long reason whole.
    void restoreQuestion() {
        using kvscope::state::Severity;
        auto violation = [](std::string id, Severity severity, std::string message) {
            kvscope::state::Violation x;
            x.id = std::move(id);
            x.severity = severity;
            x.message = std::move(message);
            return x;
        };
        ValidationView v;
        v.subject = QStringLiteral("import tim-dog.ggsq");
        const std::string longWhy = std::string(300, 'x') + " the end of the note";
        v.report.violations.push_back(violation("interop.note", Severity::Note, longWhy));
        v.report.violations.push_back(violation("interop.other", Severity::Note, "short"));
        QString q = kvscope::widgets::SnapshotPanel::restoreQuestion(v);
        QVERIFY2(q.contains(QStringLiteral("Restore <b>import tim-dog.ggsq</b>")), qPrintable(q));
        QVERIFY2(q.contains(QStringLiteral("No errors; 0 warnings, 2 notes")), qPrintable(q));
        QVERIFY2(q.contains(QStringLiteral("the end of the note")), qPrintable(q));
        auto offset = violation("positions.offset", Severity::Error, "offset by 1");
        offset.layer = 0;
        offset.position = 0;
        v.report.violations.push_back(offset);
        q = kvscope::widgets::SnapshotPanel::restoreQuestion(v);
        QVERIFY2(q.contains(QStringLiteral("Verification found 1 error")), qPrintable(q));
        // Where it is, apart from the message.
        QVERIFY2(q.contains(QStringLiteral("offset by 1 <i>(at layer 0, position 0)</i>")),
                 qPrintable(q));
    }

    // Issue 12: the token strip names its colours.
    void tokenLegendNamesTheSegments() {
        TokenModel model;
        TokenLegend legend;
        legend.setModel(&model);
        QVERIFY(legend.segments().isEmpty());
        // Its line is kept while it is empty: a panel at its minimum height does not grow
        // with the first token.
        const int emptyHeight = legend.minimumSizeHint().height();
        QVERIFY(emptyHeight > 0);
        model.setState(makeState(6)); // 3 prompt tokens, then 3 generated
        QCOMPARE(legend.segments(),
                 (QStringList{QStringLiteral("prompt"), QStringLiteral("generated")}));
        // It wraps rather than widening its dock.
        QCOMPARE(legend.minimumSizeHint().width(), 0);
        QCOMPARE(legend.minimumSizeHint().height(), emptyHeight);
        QVERIFY(legend.heightForWidth(10) > legend.heightForWidth(1000));
        model.setState(nullptr);
        QVERIFY(legend.segments().isEmpty());
    }

    // Issue 12: the model's own example prompt, from its card (core: ws::examplePrompt).
    void modelExamplePrompt() {
        const auto demo = kvscope::findDemoModel();
        QVERIFY2(demo, "the bundled demo model was not found");
        QCOMPARE(kvscope::ws::examplePrompt(*demo),
                 std::optional<std::string>("And it came to pass"));
        QCOMPARE(kvscope::ws::examplePrompt(*demo + "/model.safetensors"),
                 std::optional<std::string>("And it came to pass"));
        // A Hugging Face model card's widget example.
        QCOMPARE(kvscope::ws::examplePromptFromCard("---\nlicense: mit\nwidget:\n  - text: \"My "
                                                    "name is \\\"Ada\\\"\"\n    example_title: "
                                                    "x\n---\n# Card\n"),
                 std::optional<std::string>("My name is \"Ada\""));
        QCOMPARE(kvscope::ws::examplePromptFromCard("---\nwidget:\n- text: 'It''s late'\n---\n"),
                 std::optional<std::string>("It's late"));
        QCOMPARE(
            kvscope::ws::examplePromptFromCard("# A card\nwidget:\n - text: no front matter\n"),
            std::nullopt);
        QCOMPARE(kvscope::ws::examplePromptFromCard("---\ntags: [a]\n---\n"), std::nullopt);
        QTemporaryDir dir;
        QCOMPARE(kvscope::ws::examplePrompt(dir.path().toStdString()), std::nullopt);
        // A README that is not a regular file is not read (and never waited on).
        QVERIFY(::mkfifo(QFile::encodeName(dir.filePath("README.md")).constData(), 0644) == 0);
        QCOMPARE(kvscope::ws::examplePrompt(dir.path().toStdString()), std::nullopt);
    }
};

QTEST_MAIN(TestWidgets)
#include "tst_widgets.moc"
