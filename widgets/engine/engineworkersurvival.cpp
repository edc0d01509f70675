// The survival lab's requests (req::Survive, req::SurvivalSweep): Workspace::survive and
// Workspace::survivalSweep (core/state/probes/survive.h), adapted for the Survival panel. Numbers
// are core's SurviveResult as is; this only decodes tokens and names things.
#include "engineworker.h"
#include "requests.h"

#include "viewadapter.h"

#include "engine/model.h"
#include "tokenizer/tokenizer.h"

namespace kvscope::widgets {

namespace st = kvscope::state;

namespace {

// Each token of a continuation as it prints after the one before it (`prev`: the token the
// continuation follows).
QStringList decodeSteps(const kvscope::tok::Tokenizer* tok, int32_t prev,
                        const std::vector<int32_t>& ids) {
    QStringList out;
    for (const int32_t id : ids) {
        out << adapt::decodedText(tok, prev, id);
        prev = id;
    }
    return out;
}

QString policyText(const st::SurviveOptions& o) {
    QString what = QString::fromStdString(o.policy);
    if (st::isEvictionPolicy(o.policy))
        what += o.budget > 1 ? QStringLiteral(" %1 slots").arg(o.budget)
                             : QStringLiteral(" %1 %").arg(o.budget * 100);
    return what;
}

} // namespace

QString req::Survive::busy(const Labeler& label) const {
    return tr("Compressing %1 (%2)").arg(label(id), QString::fromStdString(options.policy));
}

void req::Survive::run(EngineWorker& w) const {
    const QString kind = QStringLiteral("survive");
    if (!w.ws().model()) {
        w.done(kind, false, tr("Load a model first"));
        return;
    }
    const QString source = w.label(id);
    emit w.progress(0, 0, tr("Compressing %1: %2").arg(source, policyText(options)));
    auto r = w.ws().survive(id.toStdString(), options);
    if (!r) {
        w.done(kind, false,
               tr("Survival of %1 refused: %2").arg(source, QString::fromStdString(r.message())),
               id);
        return;
    }
    ws::SurviveOutcome& out = r.value();
    const auto tok = w.ws().model()->tokenizer();
    auto view = std::make_shared<SurvivalView>();
    view->sourceId = QString::fromStdString(out.sourceId);
    view->sourceLabel = w.label(view->sourceId);
    view->id = QString::fromStdString(out.id);
    if (const ws::StoredSnapshot* e = w.ws().find(out.sourceId)) {
        const st::Snapshot& s = *e->snapshot;
        view->tokens = adapt::tokenInfos(
            s.tokens, s.positions, adapt::segmentLabels(s.prompt, s.tokens.size()), tok.get());
        view->kept.assign(s.tokens.size(), 0);
        for (const int64_t t : out.result.keptTokens)
            if (t >= 0 && size_t(t) < view->kept.size())
                view->kept[size_t(t)] = 1;
        const int32_t last = s.tokens.empty() ? -1 : s.tokens.back();
        view->reference = decodeSteps(tok.get(), last, out.result.reference);
        view->own = decodeSteps(tok.get(), last, out.result.ownTokens);
    }
    view->json = out.result.toJson();
    view->result = std::move(out.result);
    w.publishLedger();
    w.answer(view);
    const auto& res = view->result;
    w.done(kind, true,
           tr("Survival of %1 (%2): %3 % of the bytes kept, KL mean %4 → %5")
               .arg(source, policyText(options))
               .arg(view->json.value("bytes_ratio", 0.0) * 100, 0, 'f', 1)
               .arg(res.kl.mean, 0, 'g', 3)
               .arg(view->id.left(8)),
           view->id);
}

QString req::SurvivalSweep::busy(const Labeler& label) const {
    return tr("Sweeping every survival policy over %1").arg(label(id));
}

void req::SurvivalSweep::run(EngineWorker& w) const {
    const QString kind = QStringLiteral("survival-sweep");
    if (!w.ws().model()) {
        w.done(kind, false, tr("Load a model first"));
        return;
    }
    const QString source = w.label(id);
    st::SweepOptions o;
    o.steps = steps;
    o.progress = [&w, epoch = epoch](int doneRuns, int total, const std::string& what) {
        w.throttledProgress(doneRuns, total, tr("Sweep: %1").arg(QString::fromStdString(what)));
        return !w.cancelled(epoch);
    };
    w.restartProgressClock();
    emit w.progress(0, 0, tr("Sweeping %1").arg(source));
    auto r = w.ws().survivalSweep(id.toStdString(), o);
    if (!r) {
        w.done(kind, false,
               w.cancelled(epoch)
                   ? tr("Sweep of %1 stopped").arg(source)
                   : tr("Sweep of %1 refused: %2").arg(source, QString::fromStdString(r.message())),
               id);
        return;
    }
    auto view = std::make_shared<SurvivalSweepView>();
    view->sourceId = id;
    view->sourceLabel = source;
    view->json = st::sweepToJson(r.value());
    view->results = std::move(r.value());
    w.answer(view);
    w.done(kind, true,
           tr("Sweep of %1: %2")
               .arg(source)
               .arg(countOf(int(view->results.size()), tr("run"), tr("runs"))),
           id);
}

} // namespace kvscope::widgets
