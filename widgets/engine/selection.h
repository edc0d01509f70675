// Selection: the one current selection (layer, head, position) that drives every panel.
//
// Panels never call each other: a panel that wants to select something sets it here, and
// every panel listens to changed(). Values are clamped to the bounds of the current cache
// (setBounds), so a stale selection never indexes past a shrunken cache. GUI thread only.
#pragma once

#include <QObject>

namespace kvscope::widgets {

class Selection : public QObject {
    Q_OBJECT
public:
    explicit Selection(QObject* parent = nullptr);

    int layer() const { return m_layer; }
    int head() const { return m_head; }            // KV head (heatmaps) / query head (attention)
    qint64 position() const { return m_position; } // cache slot; -1 = none
    int layers() const { return m_layers; }
    int heads() const { return m_heads; }
    qint64 length() const { return m_length; }

    void setLayer(int layer) { set(layer, m_head, m_position); }
    void setHead(int head) { set(m_layer, head, m_position); }
    void setPosition(qint64 position) { set(m_layer, m_head, position); }
    // Any field < 0 (except position) keeps its current value.
    void set(int layer, int head, qint64 position);
    // New cache geometry; clamps the current selection and emits changed() when it moved or the
    // number of layers/heads changed (not for a length alone: a run grows it every state).
    void setBounds(int layers, int heads, qint64 length);

signals:
    void changed();

private:
    int m_layer = 0;
    int m_head = 0;
    qint64 m_position = -1;
    int m_layers = 0;
    int m_heads = 0;
    qint64 m_length = 0;
};

} // namespace kvscope::widgets
