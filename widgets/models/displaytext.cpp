#include "displaytext.h"

#include "statedata.h"

#include <QCoreApplication>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QStringList>

#include <cmath>

namespace kvscope::widgets {

namespace {

QString tr(const char* text) {
    return QCoreApplication::translate("kvscope::widgets::DisplayText", text);
}

// The order a reader wants: what was done and where first, what it made next, the sampler last.
const char* const kOrder[] = {
    "fault",       "at",          "begin",     "end",         "layer",          "head",
    "source_id",   "source_file", "inserted",  "shift",       "dropped_tokens", "branches",
    "branch",      "steps",       "generated", "stop_reason", "seed",           "seed_base",
    "temperature", "top_p",       "top_k",     "forced",      "logits",
};

QString number(const QJsonValue& v) {
    const double d = v.toDouble();
    if (std::isfinite(d) && d == std::floor(d) && std::abs(d) < 1e15)
        return QString::number(qint64(d));
    return QString::number(d, 'g', 6);
}

// A string value as a reader wants it: a path by its file name, a long hash cut short (the
// tooltip holds the whole JSON).
QString shortString(const QString& s) {
    if (s.contains(QLatin1Char('/')))
        return QFileInfo(s).fileName();
    if (s.size() > 24)
        return s.left(12) + QStringLiteral("…");
    return s;
}

QString value(const QJsonValue& v) {
    switch (v.type()) {
    case QJsonValue::Double:
        return number(v);
    case QJsonValue::String:
        return shortString(v.toString());
    case QJsonValue::Bool:
        return v.toBool() ? tr("yes") : tr("no");
    case QJsonValue::Array:
        return QString::fromUtf8(QJsonDocument(v.toArray()).toJson(QJsonDocument::Compact));
    case QJsonValue::Object:
        return QString::fromUtf8(QJsonDocument(v.toObject()).toJson(QJsonDocument::Compact));
    default:
        return tr("none");
    }
}

int count(const QJsonValue& v) {
    return int(v.toDouble());
}

} // namespace

QString displayToken(const QString& text) {
    if (text.isEmpty())
        return QStringLiteral("∅");
    QString out;
    out.reserve(text.size());
    for (const QChar c : text) {
        switch (c.unicode()) {
        case ' ':
            out += QStringLiteral("·");
            break;
        case '\n':
            out += QStringLiteral("⏎");
            break;
        case '\t':
            out += QStringLiteral("⇥");
            break;
        default:
            if (c.unicode() < 0x20)
                out += QChar(0x2400 + c.unicode()); // the control picture: ␍, ␀, ...
            else if (c.unicode() == 0x7f)
                out += QChar(0x2421); // ␡
            else
                out += c;
        }
    }
    return out;
}

QString stopReasonText(const QString& reason) {
    if (reason.isEmpty() || reason == QLatin1String("steps"))
        return {};
    if (reason == QLatin1String("eos"))
        return tr("stopped at the end-of-text token");
    if (reason == QLatin1String("bos"))
        return tr("stopped at a new start-of-text token");
    if (reason == QLatin1String("context_full"))
        return tr("stopped: the context is full");
    if (reason == QLatin1String("cancelled"))
        return tr("cancelled");
    return reason;
}

QString parametersText(const QString& json) {
    if (json.trimmed().isEmpty())
        return {};
    const QJsonDocument doc = QJsonDocument::fromJson(json.toUtf8());
    if (!doc.isObject())
        return json;
    QJsonObject o = doc.object();
    QStringList parts;
    auto take = [&](const QString& key) {
        const QJsonValue v = o.value(key);
        o.remove(key);
        return v;
    };
    for (const char* k : kOrder) {
        const QString key = QString::fromLatin1(k);
        if (!o.contains(key))
            continue;
        if (key == QLatin1String("end"))
            continue; // read with "begin"
        if (key == QLatin1String("begin") && o.contains(QStringLiteral("end"))) {
            const QJsonValue b = take(key), e = take(QStringLiteral("end"));
            parts << tr("range %1:%2").arg(number(b), number(e));
            continue;
        }
        const QJsonValue v = take(key);
        if (key == QLatin1String("fault"))
            parts << value(v);
        else if (key == QLatin1String("head"))
            parts << (count(v) < 0 ? tr("every head") : tr("head %1").arg(number(v)));
        else if (key == QLatin1String("source_id"))
            parts << tr("from %1").arg(v.toString().left(8));
        else if (key == QLatin1String("source_file"))
            parts << tr("file %1").arg(value(v));
        else if (key == QLatin1String("inserted"))
            parts << tr("inserted %1").arg(countOf(count(v), tr("token"), tr("tokens")));
        else if (key == QLatin1String("shift"))
            parts << tr("shifted by %1").arg(number(v));
        else if (key == QLatin1String("dropped_tokens"))
            parts << tr("dropped %1").arg(countOf(count(v), tr("token"), tr("tokens")));
        else if (key == QLatin1String("generated"))
            parts << tr("generated %1").arg(countOf(count(v), tr("token"), tr("tokens")));
        else if (key == QLatin1String("branches"))
            parts << countOf(count(v), tr("branch"), tr("branches"));
        else if (key == QLatin1String("steps"))
            parts << countOf(count(v), tr("step"), tr("steps"));
        else if (key == QLatin1String("stop_reason")) {
            if (const QString s = stopReasonText(v.toString()); !s.isEmpty())
                parts << s;
        } else if (key == QLatin1String("seed_base"))
            parts << tr("seeds from %1").arg(number(v));
        else if (key == QLatin1String("top_p"))
            parts << tr("top-p %1").arg(number(v));
        else if (key == QLatin1String("top_k"))
            parts << tr("top-k %1").arg(number(v));
        else if (key == QLatin1String("forced")) {
            if (v.toBool())
                parts << tr("forced");
        } else if (key == QLatin1String("logits"))
            parts << tr("logits %1").arg(value(v));
        else // at, layer, branch, seed, temperature
            parts << QStringLiteral("%1 %2").arg(key, value(v));
    }
    // The rest, as recorded (a fault's own parameters: "offset 1", "other model x.bin").
    for (auto it = o.begin(); it != o.end(); ++it) {
        QString key = it.key();
        key.replace(QLatin1Char('_'), QLatin1Char(' '));
        parts << QStringLiteral("%1 %2").arg(key, value(it.value()));
    }
    return parts.join(QStringLiteral(" · "));
}

} // namespace kvscope::widgets
