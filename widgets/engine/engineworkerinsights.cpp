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

} // namespace kvscope::widgets
