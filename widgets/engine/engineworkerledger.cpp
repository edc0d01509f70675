// EngineWorker's state-ledger operations: each one is a Workspace call (core/workspace) whose
// result is adapted for display (viewadapter.h) and announced by a typed operationDone().
#include "engineworker.h"

#include "viewadapter.h"

#include "engine/model.h"
#include "state/probes/attribution.h"
#include "state/probes/branches.h"
#include "state/probes/induction.h"
#include "state/probes/lens.h"
#include "state/probes/localize.h"
#include "state/probes/transplant.h"
#include "tokenizer/tokenizer.h"

#include <QDir>
#include <QFileInfo>

namespace kvscope::widgets {

namespace st = kvscope::state;

namespace {
std::string str(const QString& s) {
    return s.toStdString();
}
QString qstr(const std::string& s) {
    return QString::fromStdString(s);
}
} // namespace

QString EngineWorker::label(const QString& id) const {
    if (id.isEmpty())
        return tr("live session");
    if (const ws::StoredSnapshot* e = m_ws.find(str(id)))
        return adapt::snapshotName(e->snapshot->lineage);
    return id.left(8);
}

void EngineWorker::publishLedger() {
    emit ledgerChanged(adapt::ledger(m_ws, m_tokenizers));
}

void EngineWorker::snapshot() {
    const QString kind = QStringLiteral("snapshot");
    auto id = m_ws.capture();
    if (!id) {
        done(kind, false, qstr(id.message()));
        return;
    }
    publishLedger();
    const QString node = qstr(id.value());
    done(kind, true, tr("Snapshot %1").arg(label(node)), node);
}

void EngineWorker::truncateAt(qint64 length) {
    const QString kind = QStringLiteral("truncate");
    auto id = m_ws.truncateLive(length);
    if (!id) {
        done(kind, false, qstr(id.message()));
        return;
    }
    liveReplaced();
    const QString node = qstr(id.value());
    done(kind, true,
         tr("Truncated to %1 → %2")
             .arg(countOf(int(length), tr("token"), tr("tokens")))
             .arg(node.left(8)),
         node);
}

void EngineWorker::previewRestore(const QString& id) {
    auto verdict = m_ws.verify(str(id));
    if (!verdict) {
        done(QStringLiteral("restore"), false, qstr(verdict.message()), id);
        return;
    }
    // The same verdict on the Validation panel (the whole list) and in the restore dialog.
    const auto view = adapt::validation(verdict.value(), label(id));
    emit validationReady(view);
    emit restorePreview(id, view);
}

void EngineWorker::restore(const QString& id, bool force) {
    const QString kind = QStringLiteral("restore");
    auto r = m_ws.restore(str(id), force);
    if (!r) {
        done(kind, false, qstr(r.message()), id);
        return;
    }
    liveReplaced();
    done(kind, true,
         tr("Restored %1 (%2)%3")
             .arg(label(id))
             .arg(countOf(int(m_ws.live()->tokens().size()), tr("token"), tr("tokens")))
             .arg(r.value().forced ? tr(", forced despite errors") : QString()),
         id);
}

void EngineWorker::save(const QString& id, const QString& path) {
    const QString kind = QStringLiteral("save");
    emit progress(0, 0, tr("Saving"));
    if (auto s = m_ws.save(str(id), str(path)); !s) {
        done(kind, false, qstr(s.message()), id);
        return;
    }
    publishLedger();
    done(kind, true,
         tr("Saved %1").arg(QDir::toNativeSeparators(QFileInfo(path).absoluteFilePath())), id);
}

void EngineWorker::exportSafetensors(const QString& id, const QString& path) {
    const auto s = m_ws.exportSafetensors(str(id), str(path));
    done(QStringLiteral("export"), s.isOk(),
         s ? tr("Exported %1").arg(QDir::toNativeSeparators(QFileInfo(path).absoluteFilePath()))
           : qstr(s.message()),
         id);
}

void EngineWorker::openFile(const QString& path) {
    const QString kind = QStringLiteral("open");
    const QString name = QFileInfo(path).fileName();
    emit progress(0, 0, tr("Verifying %1").arg(name));
    auto opened = m_ws.open(str(path));
    emit validationReady(adapt::validation(opened.verdict, name));
    if (opened.id.empty()) {
        // What stopped it, in core's words (the violations Validation lists), not a generic line.
        const std::string why = st::describeErrors(opened.verdict.report);
        done(kind, false,
             why.empty() ? tr("%1: could not read a complete snapshot (see Validation)").arg(name)
                         : tr("%1: not opened: %2").arg(name, qstr(why)));
        return;
    }
    publishLedger();
    const QString node = qstr(opened.id);
    // The verdict's counts by severity, as the Validation panel heads them (a note is no fault).
    int counts[3] = {0, 0, 0};
    for (const auto& v : opened.verdict.report.violations)
        ++counts[static_cast<int>(v.severity)];
    done(
        kind, true,
        tr("Opened %1 as %2: %3, %4, %5")
            .arg(name, node.left(8),
                 countOf(counts[static_cast<int>(state::Severity::Error)], tr("error"),
                         tr("errors")),
                 countOf(counts[static_cast<int>(state::Severity::Warning)], tr("warning"),
                         tr("warnings")),
                 countOf(counts[static_cast<int>(state::Severity::Note)], tr("note"), tr("notes"))),
        node);
}

void EngineWorker::openWorkspace(const QString& folder) {
    const QString kind = QStringLiteral("workspace");
    emit progress(0, 0, tr("Opening workspace %1").arg(folder));
    auto opened = m_ws.openFolder(str(folder));
    publishLedger();
    if (!opened) {
        done(kind, false, qstr(opened.message()));
        return;
    }
    const auto& o = opened.value();
    QString message =
        tr("Workspace %1: %2").arg(folder, countOf(int(o.ids.size()), tr("state"), tr("states")));
    if (!o.problems.empty()) {
        message += tr("; not opened: %1").arg(qstr(o.problems.front()));
        if (o.problems.size() > 1)
            message += tr(" (and %1 more)").arg(o.problems.size() - 1);
    }
    done(kind, o.problems.empty(), message);
}

void EngineWorker::validateLive(uint64_t serial) {
    if (serial != m_tags->validation.load() || !m_ws.live())
        return; // a newer request is queued
    auto verdict = m_ws.verify({});
    if (verdict)
        emit validationReady(adapt::validation(verdict.value(), tr("live session"), serial));
}

void EngineWorker::verifyNode(const QString& id) {
    auto verdict = m_ws.verify(str(id));
    if (verdict)
        emit validationReady(adapt::validation(verdict.value(), label(id)));
}

void EngineWorker::drift(const QString& a, const QString& b, int steps, const QString& profile) {
    const QString kind = QStringLiteral("drift");
    const auto p = st::parseProfile(str(profile));
    if (!p) {
        done(kind, false, tr("Unknown tolerance profile %1").arg(profile));
        return;
    }
    emit progress(0, steps, tr("Drift"));
    auto r = m_ws.drift(str(a), str(b), steps, *p);
    if (!r) {
        done(kind, false, qstr(r.message()));
        return;
    }
    const auto tok = m_ws.model()->tokenizer();
    auto view = adapt::drift(r.value(), label(a), label(b), tok.get());
    view->idA = a;
    view->idB = b;
    emit driftReady(view);
    done(kind, true,
         tr("Drift of %1 vs %2 over %3: max KL %4, max |Δlogit| %5") // A, B as the panel
             .arg(label(a), label(b))
             .arg(countOf(int(r.value().result.steps.size()), tr("step"), tr("steps")))
             .arg(r.value().result.maxKl, 0, 'g', 3)
             .arg(r.value().result.maxAbs, 0, 'g', 3));
}

std::optional<EngineWorker::StatePair> EngineWorker::statePair(const QString& kind,
                                                               const QString& a, const QString& b,
                                                               const QString& needsModel) {
    if (!needsModel.isEmpty() && !m_ws.model()) {
        done(kind, false, needsModel);
        return std::nullopt;
    }
    auto sa = m_ws.stateFor(str(a));
    auto sb = m_ws.stateFor(str(b));
    if (!sa || !sb) {
        done(kind, false, qstr(!sa ? sa.message() : sb.message()));
        return std::nullopt;
    }
    return StatePair{sa.value(), sb.value()};
}

void EngineWorker::diff(const QString& a, const QString& b) {
    const QString kind = QStringLiteral("diff");
    const auto pair = statePair(kind, a, b);
    if (!pair)
        return;
    const auto& [sa, sb] = *pair;
    emit progress(0, 0, tr("Diff"));
    // st::diff of the states Workspace::stateFor gave (what Workspace::diff does; calling it
    // would capture a live session a second time).
    st::DiffReport report = st::diff(*sa, *sb);
    // Each state's tokens with its own tokenizer (another model's when it was made with one).
    const auto tokA = m_tokenizers.find(*sa, m_ws.model().get());
    const auto tokB = m_tokenizers.find(*sb, m_ws.model().get());
    auto view =
        adapt::diff(std::move(report), *sa, *sb, label(a), label(b), tokA.get(), tokB.get());
    view->idA = a;
    view->idB = b;
    emit diffReady(view);
    done(kind, true, tr("Diff %1 vs %2").arg(label(a), label(b)));
}

void EngineWorker::localize(const QString& a, const QString& b) {
    const QString kind = QStringLiteral("localize");
    const auto pair = statePair(kind, a, b, tr("Load a model first: localizing runs it"));
    if (!pair)
        return;
    const auto& [sa, sb] = *pair;
    emit progress(0, 0, tr("Localizing what matters"));
    const bool replay = a == b;
    auto r = st::localize(*sa, replay ? nullptr : sb.get(), m_ws.model());
    if (!r) {
        done(kind, false,
             replay
                 ? tr("What matters in %1: %2").arg(label(a), qstr(r.message()))
                 : tr("What matters in %1 vs %2: %3").arg(label(a), label(b), qstr(r.message())));
        return;
    }
    const auto tok = m_ws.model()->tokenizer();
    auto view = adapt::localize(std::move(r.value()), *sa, label(a),
                                replay ? tr("%1 replayed").arg(label(a)) : label(b), tok.get());
    view->idA = a;
    view->idB = b;
    emit localizeReady(view);
    done(kind, true, tr("What matters in %1: %2").arg(label(a), qstr(view->result.summary)));
}

void EngineWorker::lens(const QString& id, bool force) {
    const QString kind = QStringLiteral("lens");
    if (!m_ws.model()) {
        done(kind, false, tr("Load a model first: the lens runs it"));
        return;
    }
    auto s = m_ws.stateFor(str(id));
    if (!s) {
        done(kind, false, qstr(s.message()));
        return;
    }
    emit progress(0, 0, tr("Reading the logit lens"));
    st::RestoreOptions o;
    o.force = force;
    auto restored = st::restore(*s.value(), m_ws.model(), o);
    if (!restored) {
        done(kind, false, tr("Logit lens of %1: %2").arg(label(id), qstr(restored.message())));
        return;
    }
    auto r = st::logitLens(restored.value().session);
    if (!r) {
        done(kind, false, tr("Logit lens of %1: %2").arg(label(id), qstr(r.message())));
        return;
    }
    const auto tok = m_ws.model()->tokenizer();
    auto view = adapt::lens(std::move(r.value()), *s.value(), label(id), tok.get());
    view->id = id;
    view->forced = force;
    emit lensReady(view);
    const auto& res = view->result;
    done(kind, true,
         res.firstChangedLayer < 0
             ? tr("Logit lens of %1: %2 layers × %3 positions; the restored cache changes no "
                  "layer's prediction")
                   .arg(label(id))
                   .arg(res.layers)
                   .arg(res.to - res.from)
             : tr("Logit lens of %1: the restored cache changes what layer %2 predicts and above")
                   .arg(label(id))
                   .arg(res.firstChangedLayer));
}

void EngineWorker::attribute(const QString& id, bool force) {
    const QString kind = QStringLiteral("attribute");
    if (!m_ws.model()) {
        done(kind, false, tr("Load a model first: attribution runs it"));
        return;
    }
    auto s = m_ws.stateFor(str(id));
    if (!s) {
        done(kind, false, qstr(s.message()));
        return;
    }
    emit progress(0, 0, tr("Attributing the next token"));
    // The two calls `kvscope-cli attribute` makes (cmdattribute.cpp, cmdlens.cpp's
    // runHeadAttribution), with its options: the slots ranked --top 10 (the CLI's default),
    // the heads split over a state restored {.force} for the top-1 token.
    auto slotResult = st::attribute(*s.value(), m_ws.model(), {.top = 10}, force);
    if (!slotResult) {
        done(kind, false, tr("Attribution of %1: %2").arg(label(id), qstr(slotResult.message())));
        return;
    }
    auto restored = st::restore(*s.value(), m_ws.model(), {.force = force});
    if (!restored) {
        done(kind, false, tr("Attribution of %1: %2").arg(label(id), qstr(restored.message())));
        return;
    }
    auto headResult = st::attributeHeads(restored.value().session);
    if (!headResult) {
        done(kind, false, tr("Attribution of %1: %2").arg(label(id), qstr(headResult.message())));
        return;
    }
    const auto tok = m_ws.model()->tokenizer();
    auto view = adapt::attribution(std::move(slotResult.value()), std::move(headResult.value()),
                                   *s.value(), label(id), tok.get());
    view->id = id;
    view->forced = force;
    view->queryHeads = int(m_ws.model()->config().nHeads);
    view->kvHeads = int(m_ws.model()->config().nKvHeads);
    emit attributionReady(view);
    done(kind, true,
         tr("Attribution of %1: next token “%2” over %3 slots, %4 ablated")
             .arg(label(id), view->headToken)
             .arg(view->slotResult.bySlot.size())
             .arg(view->slotResult.ablated));
}

void EngineWorker::branches(const QString& a, const QString& b) {
    const QString kind = QStringLiteral("branches");
    const auto pair = statePair(kind, a, b, tr("Load a model first: aligning branches runs it"));
    if (!pair)
        return;
    const auto& [sa, sb] = *pair;
    emit progress(0, 0, tr("Aligning the branches"));
    auto r = st::compareBranches(*sa, *sb, m_ws.model());
    if (!r) {
        done(kind, false, tr("Branches %1 vs %2: %3").arg(label(a), label(b), qstr(r.message())));
        return;
    }
    const auto tok = m_ws.model()->tokenizer();
    auto view = adapt::branches(std::move(r.value()), *sa, *sb, label(a), label(b), tok.get());
    view->idA = a;
    view->idB = b;
    emit branchesReady(view);
    const auto& c = view->result;
    done(kind, true,
         tr("Branches %1 vs %2: %3 shared tokens; max KL %4 on their own tokens, %5 on A's")
             .arg(label(a), label(b))
             .arg(c.prefix)
             .arg(c.maxKlOwn, 0, 'g', 3)
             .arg(c.maxKlForced, 0, 'g', 3));
}

void EngineWorker::forkBranches(const QString& id, int branches, int steps, double temperature) {
    const QString kind = QStringLiteral("fork");
    st::ForkOptions o;
    o.branches = branches;
    o.steps = steps;
    if (temperature >= 0)
        o.temperature = float(temperature);
    if (steps > 0)
        emit progress(0, 0, tr("Forking %1 ways, %2 tokens each").arg(branches).arg(steps));
    auto r = m_ws.fork(str(id), o);
    if (!r) {
        done(kind, false, qstr(r.message()), id);
        return;
    }
    QStringList made;
    for (const auto& b : r.value())
        made << qstr(b).left(8);
    publishLedger();
    done(kind, true, tr("Forked %1 into %2").arg(id.left(8), made.join(QStringLiteral(", "))),
         r.value().empty() ? QString() : qstr(r.value().front()));
}

void EngineWorker::patchFrom(const QString& target, const QString& source, int layer, int head) {
    const QString kind = QStringLiteral("patch");
    st::PatchOptions o;
    o.layer = layer;
    o.head = head;
    auto r = m_ws.patch(str(target), str(source), o);
    if (!r) {
        done(kind, false, qstr(r.message()));
        return;
    }
    const auto& [made, rep] = r.value();
    QString change;
    if (rep.logitChange)
        change = tr(": next-token KL %1 vs before").arg(rep.logitChange->kl, 0, 'g', 3);
    publishLedger();
    done(kind, true,
         tr("Patched layer %1%2 of %3 from %4 → %5%6")
             .arg(layer)
             .arg(head >= 0 ? tr(" head %1").arg(head) : QString())
             .arg(target.left(8), source.left(8), qstr(made).left(8), change),
         qstr(made));
}

void EngineWorker::injectFault(const QString& id, const QString& fault) {
    const QString kind = QStringLiteral("fault");
    auto r = m_ws.injectFault(str(id), str(fault));
    if (!r) {
        done(kind, false, qstr(r.message()), id);
        return;
    }
    const QString made = qstr(r.value());
    QString summary;
    if (auto verdict = m_ws.verify(r.value())) {
        QStringList ids;
        for (const auto& v : verdict.value().report.violations)
            if (v.severity != st::Severity::Note)
                ids << qstr(v.id);
        summary = ids.isEmpty() ? tr("verify finds nothing") : tr("verify: %1").arg(ids.join(", "));
        emit validationReady(
            adapt::validation(verdict.value(), tr("fault %1 on %2").arg(fault, id.left(8))));
    }
    publishLedger();
    done(kind, true,
         tr("Injected %1 into %2 → %3; %4").arg(fault, id.left(8), made.left(8), summary), made);
}

void EngineWorker::transplant(const QString& recipient, const QString& donor, int layer,
                              bool allPositions, int steps) {
    const QString kind = QStringLiteral("transplant");
    const auto& model = m_ws.model();
    auto tok = model ? model->tokenizer() : nullptr;
    if (!tok) {
        done(kind, false, tr("Load a model with a tokenizer first"));
        return;
    }
    st::TransplantOptions o;
    o.layer = layer;
    o.positions = allPositions ? st::TransplantPositions::All : st::TransplantPositions::Last;
    o.steps = steps;
    auto r = st::transplant(model, tok->encode(str(recipient)), tok->encode(str(donor)), o);
    if (!r) {
        done(kind, false, qstr(r.message()));
        return;
    }
    auto view = std::make_shared<TransplantView>();
    view->result = std::move(r.value());
    const st::TransplantResult& t = view->result;
    view->donorContinuation = qstr(tok->decode(t.donorTokensGenerated));
    view->originalContinuation = qstr(tok->decode(t.originalTokensGenerated));
    for (const auto& p : t.persistence) {
        QStringList texts;
        for (const auto& s : p.steps) {
            const int32_t one[1] = {s.token};
            texts << qstr(tok->decode(one));
        }
        view->stepTokens.push_back(texts);
    }
    emit transplantReady(view);
    done(kind, true,
         tr("Transplant at layer %1 (%2 positions): KL to the donor %3")
             .arg(layer)
             .arg(qstr(st::transplantPositionsName(t.positions)))
             .arg(t.vsDonor.kl, 0, 'g', 3));
}

void EngineWorker::probeInduction(const QString& text, int length, quint64 seed) {
    const QString kind = QStringLiteral("induction");
    const auto& model = m_ws.model();
    auto tok = model ? model->tokenizer() : nullptr;
    if (!tok) {
        done(kind, false, tr("Load a model with a tokenizer first"));
        return;
    }
    st::InductionOptions o;
    o.length = length;
    o.seed = seed;
    o.text = str(text);
    emit progress(0, 0, tr("Probing induction heads"));
    auto r = st::probeInduction(model, *tok, o);
    if (!r) {
        done(kind, false, qstr(r.message()));
        return;
    }
    const st::InductionReport& rep = r.value();
    auto view = std::make_shared<InductionView>();
    view->text = text;
    view->segmentLength = rep.segmentLength;
    view->seed = rep.segmentLength > 0 ? seed : 0;
    view->tokens = qint64(rep.tokens.size());
    view->layers = int(model->config().nLayers);
    view->queryHeads = int(model->config().nHeads);
    view->firstCopyLoss = rep.firstCopyLoss;
    view->secondCopyLoss = rep.secondCopyLoss;
    view->firstCopyTop1 = rep.firstCopyTop1;
    view->secondCopyTop1 = rep.secondCopyTop1;
    for (const auto& h : rep.heads)
        view->heads.push_back({h.layer, h.head, h.induction, h.previousToken});
    for (const auto& t : rep.recalled) {
        // Core decodes it as streamed after its predecessor (a leading space survives); a
        // byte fragment of a longer character shows as its vocabulary piece.
        QString piece = qstr(t.text);
        if (piece.contains(QChar::ReplacementCharacter))
            piece = qstr(tok->tokenText(t.id));
        view->recalled.push_back({t.position, piece, t.earlierPosition, t.rank, t.probability});
    }
    view->recalledMeanRank = rep.recalledMeanRank;
    view->recalledTop1 = rep.recalledTop1;
    view->otherMeanRank = rep.otherMeanRank;
    if (!rep.heads.empty()) {
        const st::HeadScore b = rep.strongest();
        view->best = {b.layer, b.head, b.induction, b.previousToken};
    }

    QString summary;
    if (view->segmentLength > 0)
        summary = tr("Random segment of %1 tokens, fed twice: second copy loss %2 nats, top-1 "
                     "%3% · first copy %4 nats, top-1 %5%")
                      .arg(view->segmentLength)
                      .arg(view->secondCopyLoss, 0, 'f', 2)
                      .arg(view->secondCopyTop1 * 100, 0, 'f', 0)
                      .arg(view->firstCopyLoss, 0, 'f', 2)
                      .arg(view->firstCopyTop1 * 100, 0, 'f', 0);
    else if (view->recalled.empty())
        summary = tr("%1 tokens; none occurred earlier in the text, so there is nothing to "
                     "recall (repeat a name or a phrase)")
                      .arg(view->tokens);
    else
        summary = tr("%1 tokens; %2 occurred earlier: mean rank %3, ranked first %4% (tokens "
                     "seen for the first time: mean rank %5)")
                      .arg(view->tokens)
                      .arg(view->recalled.size())
                      .arg(view->recalledMeanRank, 0, 'f', 1)
                      .arg(view->recalledTop1 * 100, 0, 'f', 0)
                      .arg(view->otherMeanRank, 0, 'f', 1);
    if (view->best.layer >= 0 && view->best.induction > 0)
        summary += tr(" · strongest induction head: layer %1 head %2 (%3)")
                       .arg(view->best.layer)
                       .arg(view->best.head)
                       .arg(view->best.induction, 0, 'f', 2);
    view->summary = summary;
    emit inductionReady(view);
    done(kind, true, tr("Induction probe: %1").arg(summary));
}

} // namespace kvscope::widgets
