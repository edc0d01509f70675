// The state-ledger requests (requests.h) on the engine thread: each run() is a Workspace or core
// call (core/workspace, core/state) whose result is adapted for display (viewadapter.h), sent
// as an Answer and announced by a typed operationDone().
#include "engineworker.h"
#include "requests.h"

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

QString req::tr(const char* text, const char* disambiguation, int n) {
    return EngineWorker::tr(text, disambiguation, n);
}

QString EngineWorker::label(const QString& id) const {
    if (id.isEmpty())
        return tr("live session");
    if (const ws::StoredSnapshot* e = m_ws.find(str(id)))
        return adapt::snapshotName(e->snapshot->lineage);
    return id.left(8);
}

void EngineWorker::publishLedger() {
    answer(adapt::ledger(m_ws, m_tokenizers));
}

QString req::Snapshot::busy(const Labeler&) const {
    return tr("Taking a snapshot");
}

void req::Snapshot::run(EngineWorker& w) const {
    const QString kind = QStringLiteral("snapshot");
    auto id = w.ws().capture();
    if (!id) {
        w.done(kind, false, qstr(id.message()));
        return;
    }
    w.publishLedger();
    const QString node = qstr(id.value());
    w.done(kind, true, tr("Snapshot %1").arg(w.label(node)), node);
}

QString req::Truncate::busy(const Labeler&) const {
    return tr("Truncating");
}

void req::Truncate::run(EngineWorker& w) const {
    const QString kind = QStringLiteral("truncate");
    auto id = w.ws().truncateLive(length);
    if (!id) {
        w.done(kind, false, qstr(id.message()));
        return;
    }
    w.liveReplaced();
    const QString node = qstr(id.value());
    w.done(kind, true,
           tr("Truncated to %1 → %2")
               .arg(countOf(int(length), tr("token"), tr("tokens")))
               .arg(node.left(8)),
           node);
}

void req::PreviewRestore::run(EngineWorker& w) const {
    auto verdict = w.ws().verify(str(id));
    if (!verdict) {
        w.done(QStringLiteral("restore"), false, qstr(verdict.message()), id);
        return;
    }
    // The same verdict on the Validation panel (the whole list) and in the restore dialog.
    const auto view = adapt::validation(verdict.value(), w.label(id));
    w.answer(view);
    w.answer(std::make_shared<RestorePreview>(RestorePreview{id, view}));
}

QString req::Restore::busy(const Labeler&) const {
    return tr("Restoring");
}

void req::Restore::run(EngineWorker& w) const {
    const QString kind = QStringLiteral("restore");
    auto r = w.ws().restore(str(id), force);
    if (!r) {
        w.done(kind, false, qstr(r.message()), id);
        return;
    }
    w.liveReplaced();
    w.done(kind, true,
           tr("Restored %1 (%2)%3")
               .arg(w.label(id))
               .arg(countOf(int(w.ws().live()->tokens().size()), tr("token"), tr("tokens")))
               .arg(r.value().forced ? tr(", forced despite errors") : QString()),
           id);
}

QString req::Save::busy(const Labeler&) const {
    return tr("Saving snapshot");
}

void req::Save::run(EngineWorker& w) const {
    const QString kind = QStringLiteral("save");
    emit w.progress(0, 0, tr("Saving"));
    if (auto s = w.ws().save(str(id), str(path)); !s) {
        w.done(kind, false, qstr(s.message()), id);
        return;
    }
    w.publishLedger();
    w.done(kind, true,
           tr("Saved %1").arg(QDir::toNativeSeparators(QFileInfo(path).absoluteFilePath())), id);
}

QString req::ExportSafetensors::busy(const Labeler&) const {
    return tr("Exporting");
}

void req::ExportSafetensors::run(EngineWorker& w) const {
    const auto s = w.ws().exportSafetensors(str(id), str(path));
    w.done(QStringLiteral("export"), s.isOk(),
           s ? tr("Exported %1").arg(QDir::toNativeSeparators(QFileInfo(path).absoluteFilePath()))
             : qstr(s.message()),
           id);
}

QString req::OpenFile::busy(const Labeler&) const {
    return tr("Opening snapshot");
}

void req::OpenFile::run(EngineWorker& w) const {
    const QString kind = QStringLiteral("open");
    const QString name = QFileInfo(path).fileName();
    emit w.progress(0, 0, tr("Verifying %1").arg(name));
    auto opened = w.ws().open(str(path));
    w.answer(adapt::validation(opened.verdict, name));
    if (opened.id.empty()) {
        // What stopped it, in core's words (the violations Validation lists), not a generic line.
        const std::string why = st::describeErrors(opened.verdict.report);
        w.done(kind, false,
               why.empty() ? tr("%1: could not read a complete snapshot (see Validation)").arg(name)
                           : tr("%1: not opened: %2").arg(name, qstr(why)));
        return;
    }
    w.publishLedger();
    const QString node = qstr(opened.id);
    // The verdict's counts by severity, as the Validation panel heads them (a note is no fault).
    w.done(kind, true,
           tr("Opened %1 as %2: %3").arg(name, node.left(8), severityCounts(opened.verdict.report)),
           node);
}

QString req::OpenWorkspace::busy(const Labeler&) const {
    return tr("Opening workspace");
}

void req::OpenWorkspace::run(EngineWorker& w) const {
    const QString kind = QStringLiteral("workspace");
    emit w.progress(0, 0, tr("Opening workspace %1").arg(folder));
    auto opened = w.ws().openFolder(str(folder));
    w.publishLedger();
    if (!opened) {
        w.done(kind, false, qstr(opened.message()));
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
    w.done(kind, o.problems.empty(), message);
}

void req::ValidateLive::run(EngineWorker& w) const {
    if (serial != w.tags().validation.load() || !w.ws().live())
        return; // a newer request is queued
    auto verdict = w.ws().verify({});
    if (verdict)
        w.answer(adapt::validation(verdict.value(), tr("live session"), serial));
}

void req::VerifyNode::run(EngineWorker& w) const {
    auto verdict = w.ws().verify(str(id));
    if (verdict)
        w.answer(adapt::validation(verdict.value(), w.label(id)));
}

QString req::Drift::busy(const Labeler&) const {
    return tr("Measuring drift");
}

void req::Drift::run(EngineWorker& w) const {
    const QString kind = QStringLiteral("drift");
    const auto p = st::parseProfile(str(profile));
    if (!p) {
        w.done(kind, false, tr("Unknown tolerance profile %1").arg(profile));
        return;
    }
    emit w.progress(0, steps, tr("Drift"));
    auto r = w.ws().drift(str(a), str(b), steps, *p);
    if (!r) {
        w.done(kind, false, qstr(r.message()));
        return;
    }
    const auto tok = w.ws().model()->tokenizer();
    auto view = adapt::drift(r.value(), w.label(a), w.label(b), tok.get());
    view->idA = a;
    view->idB = b;
    w.answer(view);
    w.done(kind, true,
           tr("Drift of %1 vs %2 over %3: max KL %4, max |Δlogit| %5") // A, B as the panel
               .arg(w.label(a), w.label(b))
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

QString req::Diff::busy(const Labeler&) const {
    return tr("Comparing snapshots");
}

void req::Diff::run(EngineWorker& w) const {
    const QString kind = QStringLiteral("diff");
    emit w.progress(0, 0, tr("Diff"));
    // Workspace::diff: the function tst_workspace holds to `kvscope-cli diff`.
    auto r = w.ws().diff(str(a), str(b));
    if (!r) {
        w.done(kind, false, qstr(r.message()));
        return;
    }
    ws::DiffOutcome& d = r.value();
    // Each state's tokens with its own tokenizer (another model's when it was made with one).
    const auto tokA = w.tokenizers().find(*d.a, w.ws().model().get());
    const auto tokB = w.tokenizers().find(*d.b, w.ws().model().get());
    auto view = adapt::diff(std::move(d.report), *d.a, *d.b, w.label(a), w.label(b), tokA.get(),
                            tokB.get());
    view->idA = a;
    view->idB = b;
    w.answer(view);
    w.done(kind, true, tr("Diff %1 vs %2").arg(w.label(a), w.label(b)));
}

QString req::Localize::busy(const Labeler&) const {
    return tr("Localizing what matters");
}

void req::Localize::run(EngineWorker& w) const {
    const QString kind = QStringLiteral("localize");
    const auto pair = w.statePair(kind, a, b, tr("Load a model first: localizing runs it"));
    if (!pair)
        return;
    const auto& [sa, sb] = *pair;
    emit w.progress(0, 0, tr("Localizing what matters"));
    const bool replay = a == b;
    auto r = st::localize(*sa, replay ? nullptr : sb.get(), w.ws().model());
    if (!r) {
        w.done(kind, false,
               replay ? tr("What matters in %1: %2").arg(w.label(a), qstr(r.message()))
                      : tr("What matters in %1 vs %2: %3")
                            .arg(w.label(a), w.label(b), qstr(r.message())));
        return;
    }
    const auto tok = w.ws().model()->tokenizer();
    auto view = adapt::localize(std::move(r.value()), *sa, w.label(a),
                                replay ? tr("%1 replayed").arg(w.label(a)) : w.label(b), tok.get());
    view->idA = a;
    view->idB = b;
    w.answer(view);
    w.done(kind, true, tr("What matters in %1: %2").arg(w.label(a), qstr(view->result.summary)));
}

QString req::Lens::busy(const Labeler&) const {
    return tr("Reading the logit lens");
}

void req::Lens::run(EngineWorker& w) const {
    const QString kind = QStringLiteral("lens");
    if (!w.ws().model()) {
        w.done(kind, false, tr("Load a model first: the lens runs it"));
        return;
    }
    auto s = w.ws().stateFor(str(id));
    if (!s) {
        w.done(kind, false, qstr(s.message()));
        return;
    }
    emit w.progress(0, 0, tr("Reading the logit lens"));
    st::RestoreOptions o;
    o.force = force;
    auto restored = st::restore(*s.value(), w.ws().model(), o);
    if (!restored) {
        w.done(kind, false, tr("Logit lens of %1: %2").arg(w.label(id), qstr(restored.message())));
        return;
    }
    auto r = st::logitLens(restored.value().session);
    if (!r) {
        w.done(kind, false, tr("Logit lens of %1: %2").arg(w.label(id), qstr(r.message())));
        return;
    }
    const auto tok = w.ws().model()->tokenizer();
    auto view = adapt::lens(std::move(r.value()), *s.value(), w.label(id), tok.get());
    view->id = id;
    view->forced = force;
    w.answer(view);
    const auto& res = view->result;
    w.done(kind, true,
           res.firstChangedLayer < 0
               ? tr("Logit lens of %1: %2 layers × %3 positions; the restored cache changes no "
                    "layer's prediction")
                     .arg(w.label(id))
                     .arg(res.layers)
                     .arg(res.to - res.from)
               : tr("Logit lens of %1: the restored cache changes what layer %2 predicts and above")
                     .arg(w.label(id))
                     .arg(res.firstChangedLayer));
}

QString req::Attribute::busy(const Labeler&) const {
    return tr("Attributing the next token");
}

void req::Attribute::run(EngineWorker& w) const {
    const QString kind = QStringLiteral("attribute");
    if (!w.ws().model()) {
        w.done(kind, false, tr("Load a model first: attribution runs it"));
        return;
    }
    auto s = w.ws().stateFor(str(id));
    if (!s) {
        w.done(kind, false, qstr(s.message()));
        return;
    }
    emit w.progress(0, 0, tr("Attributing the next token"));
    // The two calls `kvscope-cli attribute` makes (cmdattribute.cpp, cmdlens.cpp's
    // runHeadAttribution), with its options: the slots ranked --top 10 (the CLI's default),
    // the heads split over a state restored {.force} for the top-1 token.
    auto slotResult = st::attribute(*s.value(), w.ws().model(), {.top = 10}, force);
    if (!slotResult) {
        w.done(kind, false,
               tr("Attribution of %1: %2").arg(w.label(id), qstr(slotResult.message())));
        return;
    }
    auto restored = st::restore(*s.value(), w.ws().model(), {.force = force});
    if (!restored) {
        w.done(kind, false, tr("Attribution of %1: %2").arg(w.label(id), qstr(restored.message())));
        return;
    }
    auto headResult = st::attributeHeads(restored.value().session);
    if (!headResult) {
        w.done(kind, false,
               tr("Attribution of %1: %2").arg(w.label(id), qstr(headResult.message())));
        return;
    }
    const auto tok = w.ws().model()->tokenizer();
    auto view = adapt::attribution(std::move(slotResult.value()), std::move(headResult.value()),
                                   *s.value(), w.label(id), tok.get());
    view->id = id;
    view->forced = force;
    view->queryHeads = int(w.ws().model()->config().nHeads);
    view->kvHeads = int(w.ws().model()->config().nKvHeads);
    w.answer(view);
    w.done(kind, true,
           tr("Attribution of %1: next token “%2” over %3 slots, %4 ablated")
               .arg(w.label(id), view->headToken)
               .arg(view->slotResult.bySlot.size())
               .arg(view->slotResult.ablated));
}

QString req::Branches::busy(const Labeler&) const {
    return tr("Aligning the branches");
}

void req::Branches::run(EngineWorker& w) const {
    const QString kind = QStringLiteral("branches");
    const auto pair = w.statePair(kind, a, b, tr("Load a model first: aligning branches runs it"));
    if (!pair)
        return;
    const auto& [sa, sb] = *pair;
    emit w.progress(0, 0, tr("Aligning the branches"));
    auto r = st::compareBranches(*sa, *sb, w.ws().model());
    if (!r) {
        w.done(kind, false,
               tr("Branches %1 vs %2: %3").arg(w.label(a), w.label(b), qstr(r.message())));
        return;
    }
    const auto tok = w.ws().model()->tokenizer();
    auto view = adapt::branches(std::move(r.value()), *sa, *sb, w.label(a), w.label(b), tok.get());
    view->idA = a;
    view->idB = b;
    w.answer(view);
    const auto& c = view->result;
    w.done(kind, true,
           tr("Branches %1 vs %2: %3 shared tokens; max KL %4 on their own tokens, %5 on A's")
               .arg(w.label(a), w.label(b))
               .arg(c.prefix)
               .arg(c.maxKlOwn, 0, 'g', 3)
               .arg(c.maxKlForced, 0, 'g', 3));
}

QString req::Fork::busy(const Labeler&) const {
    return tr("Forking %1 ways").arg(branches);
}

void req::Fork::run(EngineWorker& w) const {
    const QString kind = QStringLiteral("fork");
    st::ForkOptions o;
    o.branches = branches;
    o.steps = steps;
    if (temperature >= 0)
        o.temperature = float(temperature);
    if (steps > 0)
        emit w.progress(0, 0, tr("Forking %1 ways, %2 tokens each").arg(branches).arg(steps));
    auto r = w.ws().fork(str(id), o);
    if (!r) {
        w.done(kind, false, qstr(r.message()), id);
        return;
    }
    QStringList made;
    for (const auto& b : r.value())
        made << qstr(b).left(8);
    w.publishLedger();
    w.done(kind, true, tr("Forked %1 into %2").arg(id.left(8), made.join(QStringLiteral(", "))),
           r.value().empty() ? QString() : qstr(r.value().front()));
}

QString req::Patch::busy(const Labeler&) const {
    return tr("Patching layer %1").arg(layer);
}

void req::Patch::run(EngineWorker& w) const {
    const QString kind = QStringLiteral("patch");
    st::PatchOptions o;
    o.layer = layer;
    o.head = head;
    auto r = w.ws().patch(str(target), str(source), o);
    if (!r) {
        w.done(kind, false, qstr(r.message()));
        return;
    }
    const auto& [made, rep] = r.value();
    QString change;
    if (rep.logitChange)
        change = tr(": next-token KL %1 vs before").arg(rep.logitChange->kl, 0, 'g', 3);
    w.publishLedger();
    w.done(kind, true,
           tr("Patched layer %1%2 of %3 from %4 → %5%6")
               .arg(layer)
               .arg(head >= 0 ? tr(" head %1").arg(head) : QString())
               .arg(target.left(8), source.left(8), qstr(made).left(8), change),
           qstr(made));
}

QString req::InjectFault::busy(const Labeler&) const {
    return tr("Injecting %1").arg(fault);
}

void req::InjectFault::run(EngineWorker& w) const {
    const QString kind = QStringLiteral("fault");
    auto r = w.ws().injectFault(str(id), str(fault));
    if (!r) {
        w.done(kind, false, qstr(r.message()), id);
        return;
    }
    const QString made = qstr(r.value());
    QString summary;
    if (auto verdict = w.ws().verify(r.value())) {
        QStringList ids;
        for (const std::string& found : verdict.value().report.findings())
            ids << qstr(found);
        summary = ids.isEmpty() ? tr("verify finds nothing") : tr("verify: %1").arg(ids.join(", "));
        w.answer(adapt::validation(verdict.value(), tr("fault %1 on %2").arg(fault, id.left(8))));
    }
    w.publishLedger();
    w.done(kind, true,
           tr("Injected %1 into %2 → %3; %4").arg(fault, id.left(8), made.left(8), summary), made);
}

QString req::Transplant::busy(const Labeler&) const {
    return tr("Transplanting the residual stream at layer %1").arg(layer);
}

void req::Transplant::run(EngineWorker& w) const {
    const QString kind = QStringLiteral("transplant");
    const auto& model = w.ws().model();
    auto tok = model ? model->tokenizer() : nullptr;
    if (!tok) {
        w.done(kind, false, tr("Load a model with a tokenizer first"));
        return;
    }
    st::TransplantOptions o;
    o.layer = layer;
    o.positions = allPositions ? st::TransplantPositions::All : st::TransplantPositions::Last;
    o.steps = steps;
    auto r = st::transplant(model, tok->encode(str(recipient)), tok->encode(str(donor)), o);
    if (!r) {
        w.done(kind, false, qstr(r.message()));
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
    w.answer(view);
    w.done(kind, true,
           tr("Transplant at layer %1 (%2 positions): KL to the donor %3")
               .arg(layer)
               .arg(qstr(st::transplantPositionsName(t.positions)))
               .arg(t.vsDonor.kl, 0, 'g', 3));
}

QString req::Induction::busy(const Labeler&) const {
    return tr("Probing induction heads");
}

void req::Induction::run(EngineWorker& w) const {
    const QString kind = QStringLiteral("induction");
    const auto& model = w.ws().model();
    auto tok = model ? model->tokenizer() : nullptr;
    if (!tok) {
        w.done(kind, false, tr("Load a model with a tokenizer first"));
        return;
    }
    st::InductionOptions o;
    o.length = length;
    o.seed = seed;
    o.text = str(text);
    emit w.progress(0, 0, tr("Probing induction heads"));
    auto r = st::probeInduction(model, *tok, o);
    if (!r) {
        w.done(kind, false, qstr(r.message()));
        return;
    }
    auto view = std::make_shared<InductionView>();
    view->report = std::move(r.value());
    const st::InductionReport& rep = view->report;
    view->text = text;
    view->seed = rep.segmentLength > 0 ? seed : 0;
    view->layers = int(model->config().nLayers);
    view->queryHeads = int(model->config().nHeads);
    for (const auto& t : rep.recalled) {
        // Core decodes it as streamed after its predecessor (a leading space survives); a
        // byte fragment of a longer character shows as its vocabulary piece.
        QString piece = qstr(t.text);
        if (piece.contains(QChar::ReplacementCharacter))
            piece = qstr(tok->tokenText(t.id));
        view->recalledTexts << piece;
    }
    const st::HeadScore best = rep.strongest();

    QString summary;
    if (rep.segmentLength > 0)
        summary = tr("Random segment of %1 tokens, fed twice: second copy loss %2 nats, top-1 "
                     "%3% · first copy %4 nats, top-1 %5%")
                      .arg(rep.segmentLength)
                      .arg(rep.secondCopyLoss, 0, 'f', 2)
                      .arg(rep.secondCopyTop1 * 100, 0, 'f', 0)
                      .arg(rep.firstCopyLoss, 0, 'f', 2)
                      .arg(rep.firstCopyTop1 * 100, 0, 'f', 0);
    else if (rep.recalled.empty())
        summary = tr("%1 tokens; none occurred earlier in the text, so there is nothing to "
                     "recall (repeat a name or a phrase)")
                      .arg(rep.tokens.size());
    else
        summary = tr("%1 tokens; %2 occurred earlier: mean rank %3, ranked first %4% (tokens "
                     "seen for the first time: mean rank %5)")
                      .arg(rep.tokens.size())
                      .arg(rep.recalled.size())
                      .arg(rep.recalledMeanRank, 0, 'f', 1)
                      .arg(rep.recalledTop1 * 100, 0, 'f', 0)
                      .arg(rep.otherMeanRank, 0, 'f', 1);
    if (best.layer >= 0 && best.induction > 0)
        summary += tr(" · strongest induction head: layer %1 head %2 (%3)")
                       .arg(best.layer)
                       .arg(best.head)
                       .arg(best.induction, 0, 'f', 2);
    view->summary = summary;
    w.answer(view);
    w.done(kind, true, tr("Induction probe: %1").arg(summary));
}

} // namespace kvscope::widgets
