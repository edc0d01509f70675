// Documentation that must stay equal to the code's registries: LEDGER.md's check table
// (id, severity, forced restore) is state::allChecks(); LEDGER.md's and the README's fault
// tables (fault, the check that names it) are state::allFaults(). A check or fault added,
// renamed or re-graded without its documentation fails here.
#include "state/surgery/faults.h"
#include "state/verify/validate.h"

#include <QFile>
#include <QRegularExpression>
#include <QTest>

#include <map>

using namespace kvscope::state;

namespace {

QString readDoc(const QString& rel) {
    QFile f(QStringLiteral(KVSCOPE_TESTS_DIR "/../") + rel);
    if (!f.open(QIODevice::ReadOnly))
        qFatal("cannot read %s", qPrintable(f.fileName()));
    return QString::fromUtf8(f.readAll());
}

// Rows of the first markdown table whose header line starts with `header`: cells trimmed.
std::vector<QStringList> table(const QString& doc, const QString& header) {
    std::vector<QStringList> rows;
    const QStringList lines = doc.split(QLatin1Char('\n'));
    int i = 0;
    while (i < lines.size() && !lines[i].startsWith(header))
        ++i;
    for (i += 2; i < lines.size() && lines[i].startsWith(QLatin1Char('|')); ++i) {
        QStringList cells = lines[i].split(QLatin1Char('|'));
        cells = cells.mid(1, cells.size() - 2);
        for (QString& c : cells)
            c = c.trimmed();
        rows.push_back(cells);
    }
    return rows;
}

// The first `code` span of a cell.
QString code(const QString& cell) {
    const auto m = QRegularExpression(QStringLiteral("`([^`]+)`")).match(cell);
    return m.hasMatch() ? m.captured(1) : QString();
}

} // namespace

class TestDocs : public QObject {
    Q_OBJECT
private slots:
    void ledgerCheckTable() {
        const auto rows =
            table(readDoc(QStringLiteral("core/state/LEDGER.md")), QStringLiteral("| id |"));
        QCOMPARE(rows.size(), allChecks().size());
        for (std::size_t i = 0; i < rows.size(); ++i) {
            const CheckInfo& c = allChecks()[i];
            QCOMPARE(code(rows[i][0]).toStdString(), c.id);
            QCOMPARE(rows[i][1].toStdString(), severityName(c.severity));
            const QString forced = c.structural                    ? QStringLiteral("never")
                                   : c.severity == Severity::Error ? QStringLiteral("allowed")
                                                                   : QStringLiteral("—");
            QVERIFY2(rows[i][3] == forced, qPrintable(QString::fromStdString(c.id) + ": " +
                                                      rows[i][3] + " vs " + forced));
        }
    }

    void faultTables() {
        for (const auto& [doc, header] :
             {std::pair{QStringLiteral("core/state/LEDGER.md"), QStringLiteral("| fault |")},
              std::pair{QStringLiteral("README.md"), QStringLiteral("| fault |")}}) {
            const auto rows = table(readDoc(doc), header);
            QVERIFY2(rows.size() == allFaults().size(), qPrintable(doc));
            for (std::size_t i = 0; i < rows.size(); ++i) {
                QCOMPARE(code(rows[i][0]).toStdString(), allFaults()[i].name);
                QVERIFY2(code(rows[i][1]).toStdString() == allFaults()[i].check,
                         qPrintable(doc + ": " + rows[i][0]));
            }
        }
    }

    // Every file docs/ARCHITECTURE.md names in a code span exists: under the repository, or
    // under core/ (or core/state/, widgets/) where the text is about that tree;
    // "engineworker.{h,cpp}" names both.
    void architectureNamesOnlyFilesThatExist() {
        const QString doc = readDoc(QStringLiteral("docs/ARCHITECTURE.md"));
        const QRegularExpression span(
            QStringLiteral("`([A-Za-z0-9_./-]+/[A-Za-z0-9_.-]*(?:\\{[a-z,]+\\})?[A-Za-z0-9_.]*)`"));
        const QRegularExpression file(QStringLiteral("\\.(h|cpp|md|sh|py|txt|json)$|\\}$"));
        int named = 0;
        for (auto it = span.globalMatch(doc); it.hasNext();) {
            const QString path = it.next().captured(1);
            if (path.startsWith(QLatin1String("../")) || !file.match(path).hasMatch())
                continue;
            QStringList variants{path};
            if (const auto b = QRegularExpression(QStringLiteral("\\{([a-z,]+)\\}")).match(path);
                b.hasMatch()) {
                variants.clear();
                for (const QString& ext : b.captured(1).split(QLatin1Char(',')))
                    variants << QString(path).replace(b.captured(0), ext);
            }
            for (const QString& v : variants) {
                bool found = false;
                for (const QString root :
                     {QString(), QStringLiteral("core/"), QStringLiteral("core/state/"),
                      QStringLiteral("widgets/")})
                    found =
                        found || QFile::exists(QStringLiteral(KVSCOPE_TESTS_DIR "/../") + root + v);
                QVERIFY2(found,
                         qPrintable("docs/ARCHITECTURE.md names " + v + ", which is not there"));
                ++named;
            }
        }
        QVERIFY(named >= 20);
    }
};

QTEST_GUILESS_MAIN(TestDocs)
#include "tst_docs.moc"
