#include "lensmodel.h"

#include "colorscale.h"
#include "tokenmodel.h"

#include <QColor>
#include <QFont>
#include <algorithm>
#include <cmath>

namespace kvscope::widgets {

namespace st = kvscope::state;

void LensModel::setResult(LensViewPtr result) {
    beginResetModel();
    m_result = std::move(result);
    m_maxKl = 0;
    if (m_result) {
        for (const auto& c : m_result->result.cells)
            if (std::isfinite(c.klToFinal))
                m_maxKl = std::max(m_maxKl, c.klToFinal);
        for (const auto& c : m_result->result.restored)
            if (std::isfinite(c.klToFinal))
                m_maxKl = std::max(m_maxKl, c.klToFinal);
    }
    endResetModel();
}

void LensModel::setColour(Colour colour) {
    if (colour == m_colour)
        return;
    m_colour = colour;
    if (rowCount() > 0 && columnCount() > 0)
        emit dataChanged(index(0, 0), index(rowCount() - 1, columnCount() - 1),
                         {Qt::BackgroundRole, Qt::ForegroundRole});
}

int LensModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() || !m_result ? 0 : m_result->result.layers;
}

int LensModel::columnCount(const QModelIndex& parent) const {
    if (parent.isValid() || !m_result)
        return 0;
    const auto& r = m_result->result;
    return int(r.to - r.from) + (r.restored.empty() ? 0 : 1);
}

bool LensModel::isRestoredColumn(int column) const {
    return m_result && !m_result->result.restored.empty() &&
           column == int(m_result->result.to - m_result->result.from);
}

std::pair<int, int64_t> LensModel::cellAt(const QModelIndex& index) const {
    if (!m_result || !index.isValid())
        return {-1, -1};
    const auto& r = m_result->result;
    const int layer = r.layers - 1 - index.row();
    if (isRestoredColumn(index.column()))
        return {layer, r.tokens - 1};
    return {layer, r.from + index.column()};
}

QModelIndex LensModel::indexOf(int layer, int64_t position) const {
    if (!m_result)
        return {};
    const auto& r = m_result->result;
    if (layer < 0 || layer >= r.layers || position < r.from || position >= r.to)
        return {};
    return index(r.layers - 1 - layer, int(position - r.from));
}

const st::LensCell* LensModel::cell(const QModelIndex& index) const {
    if (!m_result || !index.isValid())
        return nullptr;
    const auto& r = m_result->result;
    const int layer = r.layers - 1 - index.row();
    if (isRestoredColumn(index.column()))
        return size_t(layer) < r.restored.size() ? &r.restored[size_t(layer)] : nullptr;
    const size_t i = size_t(layer) * size_t(r.to - r.from) + size_t(index.column());
    return i < r.cells.size() ? &r.cells[i] : nullptr;
}

bool LensModel::changedByCache(const QModelIndex& index) const {
    if (!isRestoredColumn(index.column()))
        return false;
    const auto& r = m_result->result;
    return r.changedByCache(r.layers - 1 - index.row()); // core's rule
}

QString LensModel::tokenText(int32_t id) const {
    const auto it = m_result->texts.find(id);
    return it == m_result->texts.end() ? QString::number(id) : it->second;
}

QVariant LensModel::data(const QModelIndex& index, int role) const {
    const st::LensCell* c = cell(index);
    if (!c)
        return {};
    const double p = c->top.empty() ? 0.0 : c->top.front().p;
    const double t = m_colour == Colour::Probability
                         ? p
                         : (m_maxKl > 0 ? std::clamp(c->klToFinal / m_maxKl, 0.0, 1.0) : 0.0);
    switch (role) {
    case Qt::DisplayRole: {
        const QString text = c->top.empty() ? QString() : tokenText(c->top.front().id);
        // A restored cell whose distribution left the fresh run's (core's tolerance) is marked.
        return changedByCache(index) ? QStringLiteral("≠ ") + text : text;
    }
    case Qt::FontRole:
        if (changedByCache(index)) {
            QFont f;
            f.setBold(true);
            return f;
        }
        return {};
    case Qt::BackgroundRole:
        return QColor::fromRgb(gradientColor(t));
    case Qt::ForegroundRole: {
        const QColor bg = QColor::fromRgb(gradientColor(t));
        return QColor(bg.lightnessF() > 0.55 ? Qt::black : Qt::white);
    }
    case Qt::ToolTipRole: {
        const auto [layer, position] = cellAt(index);
        QStringList top;
        for (const auto& tok : c->top)
            top << QStringLiteral("%1 %2").arg(tokenText(tok.id)).arg(tok.p, 0, 'f', 3);
        QString tip =
            isRestoredColumn(index.column())
                ? tr("layer %1 · last position %2 over the restored cache").arg(layer).arg(position)
                : tr("layer %1 · position %2 %3")
                      .arg(layer)
                      .arg(position)
                      .arg(TokenModel::visibleText(m_result->tokens[size_t(position)]));
        tip += QStringLiteral("\n") + tr("next: %1").arg(top.join(QStringLiteral(", ")));
        tip += QStringLiteral("\n") + tr("entropy %1 nats · KL to the final layer %2")
                                          .arg(c->entropy, 0, 'g', 3)
                                          .arg(c->klToFinal, 0, 'g', 3);
        if (isRestoredColumn(index.column()) && size_t(layer) < m_result->result.klToFresh.size())
            tip += QStringLiteral("\n") +
                   tr("KL to the fresh run's lens here %1")
                       .arg(m_result->result.klToFresh[size_t(layer)], 0, 'g', 3);
        return tip;
    }
    case Qt::TextAlignmentRole:
        return int(Qt::AlignCenter);
    default:
        return {};
    }
}

QVariant LensModel::headerData(int section, Qt::Orientation o, int role) const {
    if (!m_result || (role != Qt::DisplayRole && role != Qt::ToolTipRole))
        return {};
    const auto& r = m_result->result;
    if (o == Qt::Vertical)
        return tr("layer %1").arg(r.layers - 1 - section);
    if (isRestoredColumn(section))
        return role == Qt::DisplayRole
                   ? tr("restored %1").arg(r.tokens - 1)
                   : tr("The last token run again over the restored cache (recorded position "
                        "%1): what the state as restored predicts")
                         .arg(r.restoredPosition);
    const int64_t position = r.from + section;
    if (size_t(position) >= m_result->tokens.size())
        return {};
    return role == Qt::DisplayRole
               ? QStringLiteral("%1 %2").arg(position).arg(
                     TokenModel::visibleText(m_result->tokens[size_t(position)]))
               : tr("After token %1: the next-token prediction of each layer").arg(position);
}

} // namespace kvscope::widgets
