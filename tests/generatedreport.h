// Generated reports (docs/SURVIVAL.md, docs/INSIGHTS.md): each block starts with a marker
// comment `<!-- KIND key="value" key=value ... -->` naming what produced it and ends at
// `<!-- end -->`; between them is the Markdown table a kvscope-cli command printed. A test
// regenerates every block and compares it cell by cell (its own rule for which cells may
// differ); KVSCOPE_WRITE_REPORT=1 rewrites the tables instead.
#pragma once

#include "testdata.h"

#include <QFile>
#include <QMap>
#include <QRegularExpression>
#include <QString>
#include <QStringList>

#include <functional>
#include <vector>

namespace report {

struct Block {
    QMap<QString, QString> attributes;
    qsizetype tableBegin = 0, tableEnd = 0; // character range of the table in the document
};

inline std::vector<Block> blocks(const QString& doc, const QString& kind) {
    const QRegularExpression marker("<!-- " + QRegularExpression::escape(kind) +
                                    R"re(((?: \w+=(?:"[^"]*"|\S+))*) -->\n)re");
    static const QRegularExpression attribute(R"re((\w+)=(?:"([^"]*)"|(\S+)))re");
    std::vector<Block> out;
    auto it = marker.globalMatch(doc);
    while (it.hasNext()) {
        const auto m = it.next();
        Block b;
        auto a = attribute.globalMatch(m.captured(1));
        while (a.hasNext()) {
            const auto x = a.next();
            b.attributes[x.captured(1)] = x.captured(2).isNull() ? x.captured(3) : x.captured(2);
        }
        b.tableBegin = m.capturedEnd();
        b.tableEnd = doc.indexOf("<!-- end -->", b.tableBegin);
        out.push_back(b);
    }
    return out;
}

// The cells of a Markdown table's body rows (the header and the rule skipped). An escaped
// pipe (\|) is part of its cell ("max \|Δp\| = ..."), not a cell boundary.
inline std::vector<QStringList> tableRows(const QString& table) {
    std::vector<QStringList> rows;
    const auto lines = table.split('\n', Qt::SkipEmptyParts);
    for (qsizetype i = 2; i < lines.size(); ++i) {
        QStringList cells(QString{});
        const QString& line = lines[i];
        for (qsizetype c = 0; c < line.size(); ++c) {
            if (line[c] == '\\' && c + 1 < line.size() && line[c + 1] == '|') {
                cells.back() += QStringLiteral("\\|");
                ++c;
            } else if (line[c] == '|') {
                cells.push_back(QString{});
            } else {
                cells.back() += line[c];
            }
        }
        cells = cells.mid(1, cells.size() - 2);
        for (auto& c : cells)
            c = c.trimmed();
        rows.push_back(cells);
    }
    return rows;
}

// A marker's model: "$KVSCOPE_TEST_DATA/..." under the shared data, otherwise a path under
// the repository. Empty when the shared data is missing (the caller requires it).
inline QString modelPath(const QString& model) {
    const QString shared = "$KVSCOPE_TEST_DATA/";
    if (model.startsWith(shared))
        return testdata::exists(model.mid(shared.size()))
                   ? QString::fromStdString(testdata::path(model.mid(shared.size())))
                   : QString();
    return KVSCOPE_TESTS_DIR "/../" + model;
}

// Regenerates every `kind` block of the document at `path` (regenerate returns the table, or
// sets *error) and compares it with the committed one by `same(row, column, committed, now)`
// (`row`: the regenerated row's cells);
// with KVSCOPE_WRITE_REPORT=1 rewrites the file. Returns what is stale (empty: current) or the
// first error, prefixed "error: ".
inline QString
check(const QString& path, const QString& kind, int expectedBlocks,
      const std::function<QString(const Block&, QString* error)>& regenerate,
      const std::function<bool(const QStringList&, int, const QString&, const QString&)>& same) {
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly))
        return "error: cannot read " + path;
    QString doc = QString::fromUtf8(f.readAll());
    f.close();
    auto found = blocks(doc, kind);
    if (int(found.size()) != expectedBlocks)
        return QString("error: %1 holds %2 '%3' blocks, expected %4")
            .arg(path)
            .arg(found.size())
            .arg(kind)
            .arg(expectedBlocks);
    const bool write = qEnvironmentVariableIntValue("KVSCOPE_WRITE_REPORT") != 0;
    QString stale;
    for (auto b = found.rbegin(); b != found.rend(); ++b) { // from the end: offsets hold
        QString error;
        const QString now = regenerate(*b, &error);
        if (!error.isEmpty())
            return "error: " + error;
        if (write) {
            doc.replace(b->tableBegin, b->tableEnd - b->tableBegin, now);
            continue;
        }
        const QString name = b->attributes.value("model");
        const auto want = tableRows(now);
        const auto have = tableRows(doc.mid(b->tableBegin, b->tableEnd - b->tableBegin));
        if (want.size() != have.size())
            stale += QString("%1: %2 rows committed, %3 now\n")
                         .arg(name)
                         .arg(have.size())
                         .arg(want.size());
        for (size_t r = 0; r < std::min(want.size(), have.size()); ++r)
            for (int c = 0; c < int(std::min(want[r].size(), have[r].size())); ++c)
                if (!same(want[r], c, have[r][c], want[r][c]))
                    stale += QString("%1, row %2 (%3 %4), column %5: committed %6, now %7\n")
                                 .arg(name)
                                 .arg(r + 1)
                                 .arg(want[r][0], want[r].value(1).left(40))
                                 .arg(c + 1)
                                 .arg(have[r][c], want[r][c]);
    }
    if (write) {
        if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate))
            return "error: cannot write " + path;
        f.write(doc.toUtf8());
        qInfo("rewrote %s", qPrintable(path));
    }
    return stale;
}

} // namespace report
