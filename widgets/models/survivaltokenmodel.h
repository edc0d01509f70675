// SurvivalTokenModel: a compressed state's source tokens for the Survival panel's token strip —
// TokenModel's rows, with the tokens whose cache slots an eviction dropped marked: segment
// "evicted" (grey), DimmedRole true (the strip strikes them through) and a tooltip with the
// token's largest K/V damage over the layers. Fed one SurvivalView at a time (model reset).
#pragma once

#include "statedata.h"
#include "tokenmodel.h"

namespace kvscope::widgets {

class SurvivalTokenModel : public TokenModel {
    Q_OBJECT
public:
    using TokenModel::TokenModel;
    void setResult(const SurvivalViewPtr& result);
    const SurvivalViewPtr& result() const { return m_result; }
    bool isKept(int row) const;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    // index, token, id, kept, max damage over the layers.
    QString toCsv() const;

private:
    float maxDamage(int row) const;
    SurvivalViewPtr m_result;
};

} // namespace kvscope::widgets
