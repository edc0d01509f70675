// A one-line label that elides its text to the width it is given, with the whole text in its
// tooltip: a long status line never widens a narrow dock, nor wraps into lines the plot
// below it needs.
#pragma once

#include <QLabel>
#include <QString>

namespace kvscope::widgets {

class ElidedLabel : public QLabel {
public:
    explicit ElidedLabel(const QString& text = {}, QWidget* parent = nullptr);
    // The text to show (elided to the label's width); QLabel::setText would not be re-elided.
    void setFullText(const QString& text);
    const QString& fullText() const { return m_full; }
    QSize minimumSizeHint() const override;

protected:
    void resizeEvent(QResizeEvent* event) override;

private:
    void elide();
    QString m_full;
};

} // namespace kvscope::widgets
