// TokenStrip: the session's tokens as wrapped chips (text on top, id and position below, the
// chip coloured by segment), over a TokenModel. Clicking a chip selects its position; the
// current selection's position is highlighted.
#pragma once

#include <QListView>
#include <QStyledItemDelegate>

namespace kvscope::widgets {

class TokenChipDelegate : public QStyledItemDelegate {
    Q_OBJECT
public:
    using QStyledItemDelegate::QStyledItemDelegate;
    void paint(QPainter* painter, const QStyleOptionViewItem& option,
               const QModelIndex& index) const override;
    QSize sizeHint(const QStyleOptionViewItem& option, const QModelIndex& index) const override;
};

class TokenStrip : public QListView {
    Q_OBJECT
public:
    explicit TokenStrip(QWidget* parent = nullptr);
    // Highlights the chip of token `row` (-1: none) without emitting tokenClicked.
    void setCurrentToken(int row);

signals:
    void tokenClicked(int row);
};

} // namespace kvscope::widgets
