#include "selection.h"

#include <algorithm>

namespace kvscope::widgets {

Selection::Selection(QObject* parent) : QObject(parent) {}

void Selection::set(int layer, int head, qint64 position) {
    if (layer < 0)
        layer = m_layer;
    if (head < 0)
        head = m_head;
    layer = std::clamp(layer, 0, std::max(0, m_layers - 1));
    head = std::clamp(head, 0, std::max(0, m_heads - 1));
    position = m_length > 0 ? std::clamp<qint64>(position, -1, m_length - 1) : -1;
    if (layer == m_layer && head == m_head && position == m_position)
        return;
    m_layer = layer;
    m_head = head;
    m_position = position;
    emit changed();
}

void Selection::setBounds(int layers, int heads, qint64 length) {
    // A cache that only grew or shrank (a run streams a state every 120 ms) says nothing new to
    // the panels unless the selection had to move: they redraw from the state itself.
    const bool geometryMoved = layers != m_layers || heads != m_heads;
    m_layers = layers;
    m_heads = heads;
    m_length = length;
    const int layer = std::clamp(m_layer, 0, std::max(0, m_layers - 1));
    const int head = std::clamp(m_head, 0, std::max(0, m_heads - 1));
    const qint64 position = m_length > 0 ? std::clamp<qint64>(m_position, -1, m_length - 1) : -1;
    const bool moved = layer != m_layer || head != m_head || position != m_position;
    m_layer = layer;
    m_head = head;
    m_position = position;
    if (geometryMoved || moved)
        emit changed();
}

} // namespace kvscope::widgets
