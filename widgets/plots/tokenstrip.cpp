#include "tokenstrip.h"

#include "tokenmodel.h"

#include <QPainter>

namespace kvscope::widgets {

namespace {
constexpr int kPad = 4;
}

QSize TokenChipDelegate::sizeHint(const QStyleOptionViewItem& option,
                                  const QModelIndex& index) const {
    const QString text = index.siblingAtColumn(TokenModel::TextColumn).data().toString();
    const QString sub = QStringLiteral("%1 · %2")
                            .arg(index.data(TokenModel::TokenIdRole).toInt())
                            .arg(index.data(TokenModel::PositionRole).toLongLong());
    QFont small = option.font;
    small.setPointSizeF(small.pointSizeF() * 0.8);
    const int w = std::max(option.fontMetrics.horizontalAdvance(text),
                           QFontMetrics(small).horizontalAdvance(sub));
    return {w + 3 * kPad, option.fontMetrics.height() + QFontMetrics(small).height() + 3 * kPad};
}

void TokenChipDelegate::paint(QPainter* painter, const QStyleOptionViewItem& option,
                              const QModelIndex& index) const {
    painter->save();
    painter->setRenderHint(QPainter::Antialiasing);
    const QRect r = option.rect.adjusted(1, 1, -1, -1);
    QColor fill = index.data(TokenModel::SegmentColorRole).value<QColor>();
    const bool selected = option.state & QStyle::State_Selected;
    painter->setPen(selected ? QPen(Qt::red, 2) : QPen(fill.darker(130), 1));
    painter->setBrush(fill.lighter(selected ? 150 : 175));
    painter->drawRoundedRect(r, 4, 4);
    const QString text = index.siblingAtColumn(TokenModel::TextColumn).data().toString();
    QFont big = option.font;
    if (index.data(TokenModel::SpecialRole).toBool())
        big.setItalic(true);
    painter->setFont(big);
    painter->setPen(Qt::black);
    const int h = option.fontMetrics.height();
    painter->drawText(QRect(r.left() + kPad, r.top() + kPad / 2, r.width() - kPad, h),
                      Qt::AlignLeft | Qt::AlignVCenter, text);
    QFont small = option.font;
    small.setPointSizeF(small.pointSizeF() * 0.8);
    painter->setFont(small);
    painter->setPen(QColor(60, 60, 60));
    const QString sub = QStringLiteral("%1 · %2")
                            .arg(index.data(TokenModel::TokenIdRole).toInt())
                            .arg(index.data(TokenModel::PositionRole).toLongLong());
    painter->drawText(
        QRect(r.left() + kPad, r.top() + kPad / 2 + h, r.width() - kPad, r.height() - h - kPad / 2),
        Qt::AlignLeft | Qt::AlignTop, sub);
    painter->restore();
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
    setItemDelegate(new TokenChipDelegate(this));
    setMouseTracking(true);
    connect(this, &QListView::clicked, this,
            [this](const QModelIndex& index) { emit tokenClicked(index.row()); });
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
