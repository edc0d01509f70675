// Values the state-ledger operations hand to the GUI (validation reports, the snapshot tree,
// drift and diff results). Plain Qt/std data, filled on the engine thread from core/state
// results, shared as std::shared_ptr<const T>. They do not depend on core/state themselves,
// so the panels and item models build and are tested on their own.
#pragma once

#include "viewdata.h"

#include <QMetaType>
#include <QString>
#include <QStringList>

#include <memory>
#include <vector>

namespace kvscope::widgets {

enum class SeverityRank { None = -1, Note = 0, Warning = 1, Error = 2 };

struct ViolationInfo {
    QString id;
    SeverityRank severity = SeverityRank::Error;
    QString item;
    QString message;
    QString explanation;
    int layer = -1;
    int head = -1;
    qint64 position = -1;
};

QString severityText(SeverityRank s);

struct ValidationView {
    uint64_t revision = 0;
    QString subject; // "live session", a snapshot label, or a file
    std::vector<ViolationInfo> violations;
    // Equivalence verdict when one was computed (restore/verify): empty otherwise.
    QString equivalence;
    SeverityRank worst() const;
};
using ValidationViewPtr = std::shared_ptr<const ValidationView>;

struct SnapshotNode {
    QString id;
    QString parentId;
    QString operation;  // capture | fork | truncate | restore | load ...
    QString parameters; // compact JSON of the operation's parameters
    QString createdAt;
    QString file; // where it was saved or loaded from; empty when only in memory
    qint64 tokens = 0;
    qint64 cacheLength = 0;
    QString preview; // the last few tokens as text
};

struct LedgerView {
    std::vector<SnapshotNode> nodes; // in creation order
    QString currentId;               // the node the live session descends from
};
using LedgerViewPtr = std::shared_ptr<const LedgerView>;

struct DriftPoint {
    int step = 0;
    double kl = 0;
    double maxAbs = 0;
    int topKOverlap = 0;
    int topK = 5;
    bool top1Agree = true;
    QString tokenA;    // A's token text (fed to both)
    QString ownTokenB; // what B would have sampled
};

struct DriftView {
    QString labelA, labelB;
    std::vector<DriftPoint> points;
    int firstDivergingStep = -1;
    double tolKl = 0; // tolerance band of the profile
    double tolAbs = 0;
    QString profile;
    QString stopReason;
};
using DriftViewPtr = std::shared_ptr<const DriftView>;

struct DiffView {
    QString labelA, labelB;
    std::vector<TokenInfo> tokensA, tokensB;
    qint64 firstTokenDivergence = -1; // -1: one buffer is a prefix of the other
    int layers = 0;
    int kvHeads = 0;
    qint64 length = 0;                // compared positions (the shorter cache)
    std::vector<float> layerHead;     // [layers, kvHeads] max |ΔK|,|ΔV| over positions
    std::vector<float> layerPosition; // [layers, length] max over heads
    int firstDivergingLayer = -1;
    qint64 firstDivergingPosition = -1;
    double threshold = 0;
    QString mismatch; // non-empty: shapes differ, no delta
};
using DiffViewPtr = std::shared_ptr<const DiffView>;

// The residual-stream transplant (core/state/transplant.h) as the GUI shows it.
struct TransplantRow {
    QString intervention; // residual-only | token-only | residual+kv
    int step = 0;
    QString token; // the intervened run's greedy token
    double klDonor = 0, klOriginal = 0;
    bool matchesDonor = false, matchesOriginal = false;
};

struct TransplantView {
    int layer = 0;
    QString positions; // all | last
    double klVsDonor = 0, klVsOriginal = 0, klDonorVsOriginal = 0;
    bool top1MatchesDonor = false;
    QString donorContinuation, originalContinuation;
    QStringList skipped; // interventions without steps, with the reason
    std::vector<TransplantRow> rows;
};
using TransplantViewPtr = std::shared_ptr<const TransplantView>;

} // namespace kvscope::widgets

Q_DECLARE_METATYPE(kvscope::widgets::TransplantViewPtr)
Q_DECLARE_METATYPE(kvscope::widgets::ValidationViewPtr)
Q_DECLARE_METATYPE(kvscope::widgets::LedgerViewPtr)
Q_DECLARE_METATYPE(kvscope::widgets::DriftViewPtr)
Q_DECLARE_METATYPE(kvscope::widgets::DiffViewPtr)
