// TokenModel: the session's tokens as a list/table (index, id, text, position, segment), fed
// one CacheView at a time (setState: rows inserted when the tokens grew, a model reset
// otherwise). Backs the token strip.
#pragma once

#include "viewdata.h"

#include <QAbstractTableModel>
#include <QColor>

namespace kvscope::widgets {

class TokenModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { IndexColumn, IdColumn, TextColumn, PositionColumn, SegmentColumn, ColumnCount };
    // DimmedRole: the chip is drawn struck through and faded (e.g. an evicted slot); false here.
    enum Role {
        SegmentColorRole = Qt::UserRole + 1,
        TokenIdRole,
        PositionRole,
        SpecialRole,
        DimmedRole
    };

    explicit TokenModel(QObject* parent = nullptr);
    void setState(const CacheViewPtr& state);
    const CacheViewPtr& state() const { return m_state; }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation,
                        int role = Qt::DisplayRole) const override;

    // A stable colour per segment label ("prompt", "generated", "system", "user", ...).
    static QColor segmentColor(const QString& segment);
    // What a token looks like in the strip (and every other panel): displayToken() of its
    // decoded text (its piece when it decodes to nothing).
    static QString visibleText(const TokenInfo& token);
    QString toCsv() const;

private:
    CacheViewPtr m_state;
};

} // namespace kvscope::widgets
