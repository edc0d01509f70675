#include "csv.h"

namespace kvscope::widgets {

QString CsvWriter::quote(const QString& field) {
    if (!field.contains(QLatin1Char(',')) && !field.contains(QLatin1Char('"')) &&
        !field.contains(QLatin1Char('\n')) && !field.contains(QLatin1Char('\r')))
        return field;
    QString q = field;
    q.replace(QLatin1String("\""), QLatin1String("\"\""));
    return QLatin1Char('"') + q + QLatin1Char('"');
}

void CsvWriter::row(const QStringList& fields) {
    for (int i = 0; i < fields.size(); ++i) {
        if (i)
            m_text += QLatin1Char(',');
        m_text += quote(fields[i]);
    }
    m_text += QLatin1Char('\n');
}

} // namespace kvscope::widgets
