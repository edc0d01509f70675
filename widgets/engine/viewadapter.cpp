#include "viewadapter.h"

#include "displaytext.h"

#include "engine/model.h"
#include "state/surgery/lineagetree.h"
#include "state/verify/positionalign.h"
#include "tokenizer/tokenizer.h"

#include <QObject>

#include <algorithm>
#include <map>

namespace kvscope::widgets::adapt {

namespace st = kvscope::state;

std::vector<QString> segmentLabels(const st::PromptMeta& meta, std::size_t tokens) {
    std::vector<QString> out(tokens, QStringLiteral("generated"));
    for (int64_t i = 0; i < std::min<int64_t>(meta.promptTokens, int64_t(tokens)); ++i)
        out[size_t(i)] = QStringLiteral("prompt");
    for (const auto& seg : meta.segments) {
        QString label = QString::fromStdString(seg.kind);
        if (seg.kind == "message")
            label = QString::fromStdString(seg.role);
        else if (seg.kind == "generation_prompt")
            label = QStringLiteral("generation prompt");
        for (int64_t i = std::max<int64_t>(0, seg.begin); i < seg.end && size_t(i) < out.size();
             ++i)
            out[size_t(i)] = label;
    }
    return out;
}

QString decodedText(const kvscope::tok::Tokenizer* tok, int32_t prev, int32_t id) {
    if (!tok || id < 0 || id >= tok->vocabSize())
        return QString::number(id);
    // Special tokens print as their piece ("<s>"), not as what a decoder emits.
    if (tok->isSpecial(id))
        return QString::fromStdString(tok->tokenText(id));
    return QString::fromUtf8(tok->decodeNext(prev, id));
}

std::vector<TokenInfo> tokenInfos(const std::vector<int32_t>& ids,
                                  const std::vector<int64_t>& positions,
                                  const std::vector<QString>& segments,
                                  const kvscope::tok::Tokenizer* tok,
                                  const std::vector<int64_t>& keptTokens) {
    // The slot holding each token: slot i holds token i, or token keptTokens[i] after a
    // recorded eviction (core's alignPositions reads it the same way).
    const st::PositionAlignment slotOf = st::alignPositions(
        int64_t(ids.size()), positions, positions.empty() ? 0 : positions.back() + 1, keptTokens);
    std::vector<TokenInfo> out;
    out.reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
        TokenInfo t;
        t.id = ids[i];
        t.position = i < slotOf.rows.size() ? slotOf.rows[i].stored : -1;
        t.segment = i < segments.size() ? segments[i] : QStringLiteral("generated");
        if (tok && ids[i] >= 0 && ids[i] < tok->vocabSize()) {
            t.piece = QString::fromStdString(tok->tokenText(ids[i]));
            t.special = tok->isSpecial(ids[i]);
            t.text = decodedText(tok, i ? ids[i - 1] : -1, ids[i]);
        } else {
            t.text = t.piece = QString::number(ids[i]);
        }
        out.push_back(std::move(t));
    }
    return out;
}

std::vector<TokenInfo> snapshotTokens(const st::Snapshot& s, const kvscope::tok::Tokenizer* tok) {
    return tokenInfos(s.tokens, s.positions, segmentLabels(s.prompt, s.tokens.size()), tok,
                      st::recordedKeptTokens(s));
}

QString describe(const st::Equivalence& e) {
    const auto& c = e.comparison;
    return QObject::tr("%1 under %2: KL %3, max |Δlogit| %4, top-1 %5, top-5 overlap %6/5")
        .arg(e.equivalent ? QObject::tr("equivalent") : QObject::tr("NOT equivalent"),
             QString::fromStdString(st::profileName(e.profile)))
        .arg(c.kl, 0, 'g', 3)
        .arg(c.maxAbs, 0, 'g', 3)
        .arg(c.top1Agree ? QObject::tr("agrees") : QObject::tr("differs"))
        .arg(c.topKOverlap);
}

ValidationViewPtr validation(const st::VerifyResult& verdict, const QString& subject,
                             uint64_t revision) {
    auto view = std::make_shared<ValidationView>();
    view->revision = revision;
    view->subject = subject;
    view->report = verdict.report;
    view->equivalence = verdict.equivalence;
    if (verdict.equivalence)
        view->equivalenceText = describe(*verdict.equivalence);
    view->json = verdict.toJson();
    return view;
}

std::shared_ptr<DiffView> diff(st::DiffReport report, const st::Snapshot& a, const st::Snapshot& b,
                               const QString& labelA, const QString& labelB,
                               const kvscope::tok::Tokenizer* tokA,
                               const kvscope::tok::Tokenizer* tokB) {
    auto view = std::make_shared<DiffView>();
    view->labelA = labelA;
    view->labelB = labelB;
    view->tokensA = snapshotTokens(a, tokA);
    view->tokensB = snapshotTokens(b, tokB);
    view->keptA = st::recordedKeptTokens(a);
    view->layers = int(report.layers.size());
    view->kvHeads = report.layers.empty() ? 0 : int(report.layers.front().heads.size());
    view->layerHead.assign(size_t(view->layers) * size_t(view->kvHeads), 0.0f);
    for (const auto& l : report.layers)
        for (const auto& h : l.heads)
            view->layerHead[size_t(l.layer) * size_t(view->kvHeads) + size_t(h.head)] =
                float(std::isnan(h.key.maxAbs) || std::isnan(h.value.maxAbs)
                          ? NAN
                          : std::max(h.key.maxAbs, h.value.maxAbs));
    view->report = std::move(report);
    return view;
}

std::shared_ptr<LensView> lens(st::LensResult result, const st::Snapshot& s, const QString& label,
                               const kvscope::tok::Tokenizer* tok) {
    auto view = std::make_shared<LensView>();
    view->label = label;
    view->tokens = snapshotTokens(s, tok);
    auto name = [&](int32_t id) {
        if (view->texts.count(id))
            return;
        const QString text = decodedText(tok, -1, id);
        view->texts[id] = text.isEmpty() ? QString::number(id) : displayToken(text);
    };
    for (const auto* cells : {&result.cells, &result.restored})
        for (const auto& c : *cells)
            for (const auto& t : c.top)
                name(t.id);
    view->result = std::move(result);
    return view;
}

std::shared_ptr<AttributionView> attribution(st::AttributionResult slotResult,
                                             st::HeadAttribution headResult, const st::Snapshot& s,
                                             const QString& label,
                                             const kvscope::tok::Tokenizer* tok) {
    auto view = std::make_shared<AttributionView>();
    view->label = label;
    view->tokens = snapshotTokens(s, tok);
    const int32_t id = headResult.parts.token;
    const QString text = decodedText(tok, -1, id);
    view->headToken = text.isEmpty() ? QString::number(id) : displayToken(text);
    view->slotResult = std::move(slotResult);
    view->headResult = std::move(headResult);
    return view;
}

std::shared_ptr<BranchesView> branches(st::BranchComparison result, const st::Snapshot& a,
                                       const st::Snapshot& b, const QString& labelA,
                                       const QString& labelB, const kvscope::tok::Tokenizer* tok) {
    auto view = std::make_shared<BranchesView>();
    view->labelA = labelA;
    view->labelB = labelB;
    view->tokensA = snapshotTokens(a, tok);
    view->tokensB = snapshotTokens(b, tok);
    view->result = std::move(result);
    return view;
}

std::shared_ptr<LocalizeView> localize(st::LocalizeResult result, const st::Snapshot& a,
                                       const QString& labelA, const QString& labelB,
                                       const kvscope::tok::Tokenizer* tok) {
    auto view = std::make_shared<LocalizeView>();
    view->labelA = labelA;
    view->labelB = labelB;
    view->tokens = snapshotTokens(a, tok);
    view->result = std::move(result);
    return view;
}

std::shared_ptr<DriftView> drift(const ws::DriftOutcome& outcome, const QString& labelA,
                                 const QString& labelB, const kvscope::tok::Tokenizer* tok) {
    auto view = std::make_shared<DriftView>();
    view->labelA = labelA;
    view->labelB = labelB;
    view->outcome = outcome;
    view->profile = QString::fromStdString(st::profileName(outcome.profile));
    // Decoded as the token strip decodes them (after the token A fed before), not as raw
    // vocabulary pieces ("Ġsay"): the panels show them with displayToken().
    int32_t prev = -1;
    auto text = [&](int32_t id) { return id < 0 ? QString() : decodedText(tok, prev, id); };
    for (const auto& s : outcome.result.steps) {
        view->tokenA << text(s.tokenA);
        view->ownTokenB << text(s.ownTokenB);
        prev = s.tokenA;
    }
    view->json = outcome.toJson();
    return view;
}

QString snapshotName(const kvscope::state::Lineage& l) {
    const QString id = QString::fromStdString(l.id).left(8);
    const auto& p = l.parameters;
    if (p.is_object() && p.contains("role") && p["role"].is_string() && p.contains("insight") &&
        p["insight"].is_number_integer())
        return QStringLiteral("#%1 %2 · %3")
            .arg(p["insight"].get<int>())
            .arg(QString::fromStdString(p["role"].get<std::string>()), id);
    return QStringLiteral("%1 %2").arg(QString::fromStdString(l.operation), id);
}

LedgerViewPtr ledger(const ws::Workspace& w, ws::TokenizerFinder& tokenizers) {
    auto view = std::make_shared<LedgerView>();
    const st::LineageTree tree = w.lineage();
    std::map<std::string, int> indexOf;
    for (const std::string& id : w.order())
        indexOf.emplace(id, int(indexOf.size()));
    std::map<std::string, std::string> linkedParent; // as the tree links it
    for (const auto& n : tree.nodes)
        for (std::size_t c : n.children)
            linkedParent[tree.nodes[c].id] = n.id;
    for (const std::string& id : w.order()) {
        const ws::StoredSnapshot& e = *w.find(id);
        const auto& s = *e.snapshot;
        const auto& l = s.lineage;
        SnapshotNode node;
        node.id = QString::fromStdString(id);
        node.parentId = QString::fromStdString(l.parentId);
        const auto p = linkedParent.find(id);
        node.parent = p == linkedParent.end() ? -1 : indexOf.at(p->second);
        node.operation = QString::fromStdString(l.operation);
        node.parameters =
            l.parameters.empty() ? QString() : QString::fromStdString(l.parameters.dump());
        node.name = snapshotName(l);
        node.createdAt = QString::fromStdString(l.createdAt);
        node.file = QString::fromStdString(e.file);
        node.tokens = qint64(s.tokens.size());
        node.cacheLength = s.cacheLength;
        node.modelName = QString::fromStdString(st::modelName(s));
        node.otherModel = w.model() && !ws::madeWith(s, w.model().get());
        // The last tokens as text — with the snapshot's own tokenizer only (another model's
        // would print nonsense); as ids otherwise.
        const size_t n = s.tokens.size(), from = n > 8 ? n - 8 : 0;
        const std::vector<int32_t> tail(s.tokens.begin() + long(from), s.tokens.end());
        if (const auto tok = tokenizers.find(s, w.model().get())) {
            node.preview = QString::fromStdString(tok->decode(tail, true));
        } else {
            node.ownTokenizerFound = false;
            QStringList ids;
            for (int32_t t : tail)
                ids << QString::number(t);
            node.preview =
                QObject::tr("ids %1 (another model's tokenizer)").arg(ids.join(QLatin1Char(' ')));
        }
        view->nodes.push_back(std::move(node));
    }
    view->currentId = QString::fromStdString(w.parentId());
    return view;
}

void attention(AttentionView& view, kvscope::AttentionPattern pattern) {
    const int64_t Q = pattern.queries, K = pattern.keys;
    LargeVector<uint8_t> masked = pattern.hiddenCells();
    view.kvHead = pattern.kvHead;
    view.queries = Q;
    view.keys = K;
    view.heatmap = HeatmapData::build(int(K), int(Q), std::move(pattern.probs), std::move(masked));
    pattern.probs.clear();
    view.pattern = std::move(pattern);
}

} // namespace kvscope::widgets::adapt
