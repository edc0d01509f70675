// EngineWorker's insights lab: Workspace::runInsight (core/insights/lab.h), handed to the
// Insights panel as core computed it, with the JSON `kvscope-cli insights run N --json` prints.
#include "engineworker.h"

#include "insights/registry.h"

namespace kvscope::widgets {

void EngineWorker::runInsight(int number) {
    const QString kind = QStringLiteral("insight");
    emit progress(0, 0, tr("Running the experiment of insight %1").arg(number));
    auto r = m_ws.runInsight(number);
    if (!r) {
        done(kind, false, QString::fromStdString(r.message()));
        return;
    }
    auto view = std::make_shared<InsightView>();
    view->number = number;
    view->result = std::move(r.value());
    view->json = insights::toJson(*insights::findInsight(number), &view->result);
    emit insightReady(view);
    done(kind, true,
         tr("Insight %1: %2")
             .arg(number)
             .arg(QString::fromStdString(insights::verdictName(view->result.verdict))));
}

void EngineWorker::storeEvidence(const InsightViewPtr& insight, bool restoreFirst) {
    const QString kind = QStringLiteral("evidence");
    auto ids = m_ws.storeEvidence(insight->result);
    if (!ids) {
        done(kind, false, QString::fromStdString(ids.message()));
        return;
    }
    auto view = std::make_shared<EvidenceView>();
    view->insight = insight;
    for (const std::string& id : ids.value())
        view->ids << QString::fromStdString(id);
    publishLedger();
    if (restoreFirst) {
        // Forced: a state an experiment damaged on purpose is still shown (structural damage
        // is never forced, and says so).
        auto r = m_ws.restore(ids.value().front(), true);
        if (!r) {
            done(kind, false, QString::fromStdString(r.message()), view->ids.front());
            return;
        }
        view->restored = true;
        liveReplaced();
    }
    emit evidenceReady(view);
    done(kind, true,
         tr("Evidence of insight %1: %2 stored%3")
             .arg(insight->number)
             .arg(countOf(int(view->ids.size()), tr("state"), tr("states")))
             .arg(view->restored ? tr(", the first restored") : QString()),
         view->ids.front());
}

} // namespace kvscope::widgets
