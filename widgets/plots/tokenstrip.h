// TokenStrip: the session's tokens as wrapped chips (text on top, id and position below, the
// chip coloured by segment), over a TokenModel. Clicking a chip selects its position; the
// current selection's position is highlighted. TokenLegend names the segment colours.
#pragma once

#include <QListView>
#include <QStringList>
#include <QHash>
#include <QStyledItemDelegate>

#include <array>
#include <vector>

namespace kvscope::widgets {

class TokenChipDelegate : public QStyledItemDelegate {
    Q_OBJECT
public:
    using QStyledItemDelegate::QStyledItemDelegate;
    void paint(QPainter* painter, const QStyleOptionViewItem& option,
               const QModelIndex& index) const override;
    QSize sizeHint(const QStyleOptionViewItem& option, const QModelIndex& index) const override;
    // Drops the sizes kept per row (the model was reset: row r may be another token now).
    void forgetRows() const { m_metrics.rows.clear(); }

private:
    // Measurements in one font, kept while the view's font stays: a strip of thousands of chips
    // is laid out again on every new token, and shaping each text each time (or even building
    // a font key per chip) stalled the window (kvscope-bench-gui).
    struct Metrics {
        QFont font; // the view's font these were measured in
        QFont small;
        int height = 0;
        int smallHeight = 0;
        QHash<QString, int> widths;      // chip text -> advance in `font`
        std::array<int, 40> subWidths{}; // "id · position" by digit count, in `small` (0: not yet)
        // Each row's chip size, and the token it was measured for: a new token makes the
        // view lay out every chip again (QListView relayouts all rows on an insert), and
        // asking the model for each chip's text each time was most of that.
        struct Row {
            int id = -1;
            qint64 position = -1;
            QSize size;
        };
        std::vector<Row> rows;
    };
    Metrics& metrics(const QFont& font) const;
    mutable Metrics m_metrics;
    mutable bool m_measured = false;
};

// TokenLegend: one swatch per segment the strip shows ("prompt", "generated", "system"...), in
// the order they first occur, in the strip's colours (TokenModel::segmentColor). Follows the
// model it is given.
class TokenLegend : public QWidget {
    Q_OBJECT
public:
    explicit TokenLegend(QWidget* parent = nullptr);
    void setModel(QAbstractItemModel* model);
    // The segments shown, in order.
    QStringList segments() const { return m_segments; }

    bool hasHeightForWidth() const override { return true; }
    int heightForWidth(int width) const override;
    QSize sizeHint() const override;
    QSize minimumSizeHint() const override;

protected:
    void paintEvent(QPaintEvent* event) override;

private:
    void refresh();
    void added(int first, int last); // rows first..last were appended
    // Where each entry goes at `width` (wrapping to further lines as needed).
    std::vector<QRect> layoutEntries(int width) const;

    QAbstractItemModel* m_model = nullptr;
    QStringList m_segments;
};

class TokenStrip : public QListView {
    Q_OBJECT
public:
    explicit TokenStrip(QWidget* parent = nullptr);
    void setModel(QAbstractItemModel* model) override;
    // Highlights the chip of token `row` (-1: none) without emitting tokenClicked.
    void setCurrentToken(int row);

signals:
    void tokenClicked(int row);

private:
    TokenChipDelegate* m_delegate = nullptr;
};

} // namespace kvscope::widgets
