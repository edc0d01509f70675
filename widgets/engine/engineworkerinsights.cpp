// The insights lab's requests (req::RunInsight, req::StoreEvidence): Workspace::runInsight
// (core/insights/lab.h), handed to the Insights panel as core computed it, with the JSON
// `kvscope-cli insights run N --json` prints.
#include "engineworker.h"
#include "requests.h"

#include "insights/registry.h"

namespace kvscope::widgets {

QString req::RunInsight::busy(const Labeler&) const {
    return tr("Running the experiment of insight %1").arg(number);
}

void req::RunInsight::run(EngineWorker& w) const {
    const QString kind = QStringLiteral("insight");
    emit w.progress(0, 0, tr("Running the experiment of insight %1").arg(number));
    auto r = w.ws().runInsight(number);
    if (!r) {
        w.done(kind, false, QString::fromStdString(r.message()));
        return;
    }
    auto view = std::make_shared<InsightView>();
    view->number = number;
    view->result = std::move(r.value());
    view->json = insights::toJson(*insights::findInsight(number), &view->result);
    w.answer(view);
    w.done(kind, true,
           tr("Insight %1: %2")
               .arg(number)
               .arg(QString::fromStdString(insights::verdictName(view->result.verdict))));
}

QString req::StoreEvidence::busy(const Labeler&) const {
    return tr("Opening the evidence of insight %1").arg(insight ? insight->number : 0);
}

void req::StoreEvidence::run(EngineWorker& w) const {
    const QString kind = QStringLiteral("evidence");
    auto ids = w.ws().storeEvidence(insight->result);
    if (!ids) {
        w.done(kind, false, QString::fromStdString(ids.message()));
        return;
    }
    auto view = std::make_shared<EvidenceView>();
    view->insight = insight;
    for (const std::string& id : ids.value())
        view->ids << QString::fromStdString(id);
    w.publishLedger();
    if (restoreFirst) {
        // Forced: a state an experiment damaged on purpose is still shown (structural damage
        // is never forced, and says so).
        auto r = w.ws().restore(ids.value().front(), true);
        if (!r) {
            w.done(kind, false, QString::fromStdString(r.message()), view->ids.front());
            return;
        }
        view->restored = true;
        w.liveReplaced();
    }
    w.answer(view);
    w.done(kind, true,
           tr("Evidence of insight %1: %2 stored%3")
               .arg(insight->number)
               .arg(countOf(int(view->ids.size()), tr("state"), tr("states")))
               .arg(view->restored ? tr(", the first restored") : QString()),
           view->ids.front());
}

} // namespace kvscope::widgets
