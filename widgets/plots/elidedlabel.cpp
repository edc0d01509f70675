#include "elidedlabel.h"

#include <QResizeEvent>

#include <algorithm>

namespace kvscope::widgets {

ElidedLabel::ElidedLabel(const QString& text, QWidget* parent) : QLabel(parent) {
    setTextInteractionFlags(Qt::TextSelectableByMouse);
    setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred); // takes what the row leaves
    setFullText(text);
}

void ElidedLabel::setFullText(const QString& text) {
    m_full = text;
    setToolTip(text);
    elide();
}

QSize ElidedLabel::minimumSizeHint() const {
    return {fontMetrics().averageCharWidth() * 8, QLabel::minimumSizeHint().height()};
}

void ElidedLabel::resizeEvent(QResizeEvent* event) {
    QLabel::resizeEvent(event);
    elide();
}

void ElidedLabel::elide() {
    const int room = std::max(contentsRect().width(), fontMetrics().averageCharWidth() * 4);
    setText(fontMetrics().elidedText(m_full, Qt::ElideRight, room));
}

} // namespace kvscope::widgets
