#include "tokenstrip.h"

#include "tokenmodel.h"

#include <QPainter>

#include <limits>

namespace kvscope::widgets {

namespace {
constexpr int kPad = 4;
}

TokenChipDelegate::Metrics& TokenChipDelegate::metrics(const QFont& font) const {
    if (!m_measured || font != m_metrics.font) {
        m_metrics = {};
        m_metrics.font = font;
        m_metrics.small = font;
        m_metrics.small.setPointSizeF(font.pointSizeF() * 0.8);
        m_metrics.height = QFontMetrics(font).height();
        m_metrics.smallHeight = QFontMetrics(m_metrics.small).height();
        m_measured = true;
    }
    return m_metrics;
}

namespace {
int digitsOf(int64_t v) {
    int n = v < 0 ? 2 : 1;
    for (v = v < 0 ? -(v / 10) : v / 10; v > 0; v /= 10)
        ++n;
    return n;
}
} // namespace

QSize TokenChipDelegate::sizeHint(const QStyleOptionViewItem& option,
                                  const QModelIndex& index) const {
    Metrics& m = metrics(option.font);
    const int id = index.data(TokenModel::TokenIdRole).toInt();
    const qint64 position = index.data(TokenModel::PositionRole).toLongLong();
    const size_t row = size_t(index.row());
    if (row < m.rows.size() && m.rows[row].id == id && m.rows[row].position == position)
        return m.rows[row].size;
    const QString text = index.siblingAtColumn(TokenModel::TextColumn).data().toString();
    auto it = m.widths.constFind(text);
    if (it == m.widths.constEnd()) {
        if (m.widths.size() > 100000)
            m.widths.clear();
        it = m.widths.insert(text, QFontMetrics(m.font).horizontalAdvance(text));
    }
    // "id · position": measured by its digit count (digits share one advance in UI fonts), so
    // thousands of distinct labels cost a handful of measurements.
    const int digits =
        std::min<int>(int(m.subWidths.size()) - 1, digitsOf(id) + digitsOf(position));
    int& sub = m.subWidths[size_t(digits)];
    if (sub == 0)
        sub = QFontMetrics(m.small).horizontalAdvance(QString(digits, QLatin1Char('8')) +
                                                      QStringLiteral(" · "));
    const QSize size(std::max(*it, sub) + 3 * kPad, m.height + m.smallHeight + 3 * kPad);
    if (row < (size_t(1) << 24)) {
        if (row >= m.rows.size())
            m.rows.resize(row + 1);
        m.rows[row] = {id, position, size};
    }
    return size;
}

void TokenChipDelegate::paint(QPainter* painter, const QStyleOptionViewItem& option,
                              const QModelIndex& index) const {
    // The fonts come measured from metrics(): building a scaled font per chip (and resolving
    // it) was most of a repaint of a strip of a hundred visible chips.
    const Metrics& m = metrics(option.font);
    painter->save();
    painter->setRenderHint(QPainter::Antialiasing);
    const QRect r = option.rect.adjusted(1, 1, -1, -1);
    QColor fill = index.data(TokenModel::SegmentColorRole).value<QColor>();
    const bool selected = option.state & QStyle::State_Selected;
    painter->setPen(selected ? QPen(Qt::red, 2) : QPen(fill.darker(130), 1));
    painter->setBrush(fill.lighter(selected ? 150 : 175));
    painter->drawRoundedRect(r, 4, 4);
    const QString text = index.siblingAtColumn(TokenModel::TextColumn).data().toString();
    if (index.data(TokenModel::SpecialRole).toBool()) {
        QFont italic = m.font;
        italic.setItalic(true);
        painter->setFont(italic);
    } else {
        painter->setFont(m.font);
    }
    // A dimmed chip (an evicted slot) is faded and struck through.
    const bool dimmed = index.data(TokenModel::DimmedRole).toBool();
    if (dimmed) {
        QFont struck = painter->font();
        struck.setStrikeOut(true);
        painter->setFont(struck);
    }
    painter->setPen(dimmed ? QColor(110, 110, 110) : QColor(Qt::black));
    const int h = m.height;
    const int flags = Qt::TextSingleLine | Qt::AlignLeft;
    painter->drawText(QRect(r.left() + kPad, r.top() + kPad / 2, r.width() - kPad, h),
                      flags | Qt::AlignVCenter, text);
    painter->setFont(m.small);
    painter->setPen(QColor(60, 60, 60));
    const QString sub = QString::number(index.data(TokenModel::TokenIdRole).toInt()) +
                        QStringLiteral(" · ") +
                        QString::number(index.data(TokenModel::PositionRole).toLongLong());
    painter->drawText(
        QRect(r.left() + kPad, r.top() + kPad / 2 + h, r.width() - kPad, r.height() - h - kPad / 2),
        flags | Qt::AlignTop, sub);
    painter->restore();
}

TokenLegend::TokenLegend(QWidget* parent) : QWidget(parent) {
    QSizePolicy policy(QSizePolicy::Preferred, QSizePolicy::Preferred);
    policy.setHeightForWidth(true); // wraps to a second line in a narrow dock
    setSizePolicy(policy);
    setToolTip(tr("Token colours: which part of the input each token came from"));
}

void TokenLegend::setModel(QAbstractItemModel* model) {
    if (m_model)
        disconnect(m_model, nullptr, this, nullptr);
    m_model = model;
    if (m_model) {
        connect(m_model, &QAbstractItemModel::modelReset, this, &TokenLegend::refresh);
        connect(m_model, &QAbstractItemModel::rowsInserted, this,
                [this](const QModelIndex& parent, int first, int last) {
                    if (!parent.isValid())
                        added(first, last);
                });
        connect(m_model, &QAbstractItemModel::rowsRemoved, this, &TokenLegend::refresh);
        connect(m_model, &QAbstractItemModel::dataChanged, this, &TokenLegend::refresh);
    }
    refresh();
}

void TokenLegend::refresh() {
    m_segments.clear();
    updateGeometry();
    if (m_model)
        added(0, m_model->rowCount() - 1);
    QWidget::update();
}

// Rows first..last can only add segments (a run's new token does not rescan the thousands
// before it; refresh() starts over with every row).
void TokenLegend::added(int first, int last) {
    QStringList segments = m_segments;
    for (int r = first; r <= last; ++r) {
        const QString s = m_model->index(r, TokenModel::SegmentColumn).data().toString();
        if (!s.isEmpty() && !segments.contains(s))
            segments << s;
    }
    if (segments != m_segments) {
        m_segments = segments;
        updateGeometry();
        QWidget::update();
    }
}

std::vector<QRect> TokenLegend::layoutEntries(int width) const {
    const QFontMetrics fm = fontMetrics();
    const int h = fm.height(), swatch = h - 2, gap = fm.horizontalAdvance(QLatin1Char(' ')) * 3;
    std::vector<QRect> out;
    int x = 0, y = 0;
    for (const QString& s : m_segments) {
        const int w = swatch + kPad + fm.horizontalAdvance(s);
        if (x > 0 && x + w > width) { // wrap
            x = 0;
            y += h + kPad;
        }
        out.emplace_back(x, y, w, h);
        x += w + gap;
    }
    return out;
}

// One line even while there is nothing to show: a panel at its minimum height (the session
// panel in the tour's dock on a 1366x768 screen) would otherwise grow by that line with the
// first token and move what lies below it.
int TokenLegend::heightForWidth(int width) const {
    const auto entries = layoutEntries(width);
    return entries.empty() ? fontMetrics().height() : entries.back().bottom() + 1;
}

QSize TokenLegend::sizeHint() const {
    const auto entries = layoutEntries(std::numeric_limits<int>::max() / 2);
    return QSize(entries.empty() ? 0 : entries.back().right() + 1, fontMetrics().height());
}

QSize TokenLegend::minimumSizeHint() const {
    // Never widens the dock: it wraps instead.
    return QSize(0, fontMetrics().height());
}

void TokenLegend::paintEvent(QPaintEvent*) {
    QPainter p(this);
    p.setRenderHint(QPainter::Antialiasing);
    const auto entries = layoutEntries(width());
    const int swatch = fontMetrics().height() - 2;
    for (size_t i = 0; i < entries.size(); ++i) {
        const QRect& e = entries[i];
        const QColor fill = TokenModel::segmentColor(m_segments[int(i)]);
        // The chip's own colours (TokenChipDelegate::paint).
        p.setPen(QPen(fill.darker(130), 1));
        p.setBrush(fill.lighter(175));
        p.drawRoundedRect(QRectF(e.left() + 0.5, e.top() + 1.5, swatch - 1, swatch - 1), 3, 3);
        p.setPen(palette().color(QPalette::WindowText));
        p.drawText(QRect(e.left() + swatch + kPad, e.top(), e.width() - swatch - kPad, e.height()),
                   Qt::AlignLeft | Qt::AlignVCenter, m_segments[int(i)]);
    }
}

TokenStrip::TokenStrip(QWidget* parent) : QListView(parent) {
    setFlow(QListView::LeftToRight);
    setWrapping(true);
    setResizeMode(QListView::Adjust);
    setSpacing(1);
    setUniformItemSizes(false);
    setSelectionMode(QAbstractItemView::SingleSelection);
    setEditTriggers(QAbstractItemView::NoEditTriggers);
    setModelColumn(TokenModel::IndexColumn);
    m_delegate = new TokenChipDelegate(this);
    setItemDelegate(m_delegate);
    setMouseTracking(true);
    connect(this, &QListView::clicked, this,
            [this](const QModelIndex& index) { emit tokenClicked(index.row()); });
}

void TokenStrip::setModel(QAbstractItemModel* model) {
    if (QAbstractItemModel* old = this->model())
        disconnect(old, &QAbstractItemModel::modelReset, this, nullptr);
    m_delegate->forgetRows();
    QListView::setModel(model);
    if (model)
        connect(model, &QAbstractItemModel::modelReset, this, [this] { m_delegate->forgetRows(); });
}

void TokenStrip::setCurrentToken(int row) {
    if (!model() || !selectionModel())
        return;
    const QSignalBlocker block(this);
    if (row < 0 || row >= model()->rowCount()) {
        selectionModel()->clearSelection();
        return;
    }
    const QModelIndex index = model()->index(row, TokenModel::IndexColumn);
    selectionModel()->setCurrentIndex(index, QItemSelectionModel::ClearAndSelect);
    scrollTo(index);
}

} // namespace kvscope::widgets
