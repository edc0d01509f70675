// CsvWriter: RFC 4180 CSV text (quotes fields holding commas, quotes or newlines). Every
// panel's "Export CSV" writes through it.
#pragma once

#include <QString>
#include <QStringList>

namespace kvscope::widgets {

class CsvWriter {
public:
    explicit CsvWriter(const QStringList& header) { row(header); }
    void row(const QStringList& fields);
    const QString& text() const { return m_text; }
    static QString quote(const QString& field);

private:
    QString m_text;
};

} // namespace kvscope::widgets
