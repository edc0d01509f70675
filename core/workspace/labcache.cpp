// The insights lab's cache (labcache.h).
#include "workspace/labcache.h"

#include "insights/registry.h"

namespace kvscope::ws {

void LabCache::setModel(std::shared_ptr<const Model> model) {
    m_model = std::move(model);
    m_context.reset();
}

Result<insights::ExperimentResult> LabCache::run(int number) {
    using Out = Result<insights::ExperimentResult>;
    if (!m_model)
        return Out::error("insights: load a model first");
    const insights::Insight* insight = insights::findInsight(number);
    if (!insight)
        return Out::error("insights: there is no insight " + std::to_string(number));
    if (!insights::hasExperiment(number))
        return Out::error("insights: #" + std::to_string(number) + " is " +
                          insights::className(insight->cls) + ": it has no experiment");
    if (!m_context) {
        auto ctx = insights::makeLabContext(m_model);
        if (!ctx)
            return Out::error("insights: " + ctx.message());
        m_context = std::move(ctx.value());
    }
    return insights::runExperiment(number, *m_context);
}

} // namespace kvscope::ws
