// Tests for core/insights: the registry of the compendium's 80 insights is complete, ordered
// and consistent, every class carries what it promises (an experiment, a reason, a pointer to
// code), and every source path a note cites exists in this source tree.
#include "insights/registry.h"

#include <QFileInfo>
#include <QRegularExpression>
#include <QTest>

#include <set>

using namespace kvscope::insights;

namespace {

QString str(const std::string& s) {
    return QString::fromStdString(s);
}

// Source paths a note or experiment cites ("core/engine/kvcache.h").
QStringList citedPaths(const std::string& text) {
    static const QRegularExpression rx(
        QStringLiteral(R"(\b(?:core|widgets|app|tests|docs)/[A-Za-z0-9_/.-]*[A-Za-z0-9_])"));
    QStringList paths;
    for (auto it = rx.globalMatch(str(text)); it.hasNext();)
        paths << it.next().captured(0);
    return paths;
}

} // namespace

class TestInsights : public QObject {
    Q_OBJECT
private slots:
    void eightyInOrder() {
        const auto& all = registry();
        QCOMPARE(all.size(), std::size_t(80));
        for (std::size_t i = 0; i < all.size(); ++i)
            QCOMPARE(all[i].number, int(i) + 1);
        for (int n = 1; n <= 80; ++n) {
            const Insight* in = findInsight(n);
            QVERIFY(in);
            QCOMPARE(in->number, n);
        }
        QVERIFY(!findInsight(0));
        QVERIFY(!findInsight(81));
    }

    void tiersAreConsistent() {
        const auto names = tierNames();
        QCOMPARE(names.size(), std::size_t(8));
        QCOMPARE(std::set<std::string>(names.begin(), names.end()).size(), names.size());
        std::vector<int> perTier(8, 0);
        int lastTier = 1;
        for (const Insight& in : registry()) {
            QVERIFY2(in.tier >= 1 && in.tier <= 8, qPrintable(QString::number(in.number)));
            QCOMPARE(in.tierName, names[std::size_t(in.tier - 1)]);
            // The compendium's tiers are contiguous runs of numbers.
            QVERIFY2(in.tier >= lastTier, qPrintable(QString::number(in.number)));
            lastTier = in.tier;
            ++perTier[std::size_t(in.tier - 1)];
        }
        for (std::size_t t = 0; t < perTier.size(); ++t) {
            QVERIFY2(!names[t].empty(), qPrintable(QString::number(t + 1)));
            QVERIFY2(perTier[t] > 0, qPrintable(str(names[t])));
        }
    }

    void claimsAreOneShortLine() {
        std::set<std::string> seen;
        for (const Insight& in : registry()) {
            const QString where = QStringLiteral("#%1: ").arg(in.number) + str(in.claim);
            QVERIFY2(!in.claim.empty(), qPrintable(where));
            QVERIFY2(in.claim.find('\n') == std::string::npos, qPrintable(where));
            QVERIFY2(in.claim.size() < 200, qPrintable(where));
            QVERIFY2(seen.insert(in.claim).second, qPrintable(where));
        }
    }

    void everyClassCarriesItsParts() {
        int measurable = 0;
        for (const Insight& in : registry()) {
            const QString where =
                QStringLiteral("#%1 (%2)").arg(in.number).arg(str(className(in.cls)));
            QVERIFY2(in.note.find('\n') == std::string::npos, qPrintable(where));
            QVERIFY2(in.experiment.find('\n') == std::string::npos, qPrintable(where));
            switch (in.cls) {
            case InsightClass::Measurable:
                ++measurable;
                QVERIFY2(!in.experiment.empty(), qPrintable(where));
                break;
            case InsightClass::Definitional:
                // Why it holds by construction, and where the code or view shows it.
                QVERIFY2(!in.note.empty(), qPrintable(where));
                QVERIFY2(!citedPaths(in.note).isEmpty(), qPrintable(where));
                QVERIFY2(in.experiment.empty(), qPrintable(where));
                break;
            case InsightClass::NotTestable:
                QVERIFY2(!in.note.empty(), qPrintable(where));
                QVERIFY2(in.experiment.empty(), qPrintable(where));
                break;
            }
        }
        QVERIFY2(measurable >= 45, qPrintable(QString::number(measurable)));
    }

    void classNames() {
        QCOMPARE(className(InsightClass::Measurable), std::string("measurable"));
        QCOMPARE(className(InsightClass::Definitional), std::string("definitional"));
        QCOMPARE(className(InsightClass::NotTestable), std::string("not-testable"));
    }

    // A renamed or removed file must not leave a note pointing nowhere.
    void citedPathsExist() {
        int cited = 0;
        for (const Insight& in : registry())
            for (const QString& p : citedPaths(in.note + " " + in.experiment)) {
                ++cited;
                const QString abs = QStringLiteral(KVSCOPE_TESTS_DIR "/../") + p;
                QVERIFY2(QFileInfo::exists(abs),
                         qPrintable(QStringLiteral("#%1 cites %2").arg(in.number).arg(p)));
            }
        QVERIFY(cited > 0);
    }
};

QTEST_GUILESS_MAIN(TestInsights)
#include "tst_insights.moc"
