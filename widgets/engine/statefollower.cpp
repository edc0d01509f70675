#include "statefollower.h"

#include "enginecontroller.h"

namespace kvscope::widgets {

StateFollower::StateFollower(EngineController* engine, QObject* parent, Apply apply)
    : QObject(parent), m_engine(engine), m_apply(std::move(apply)) {
    connect(engine, &EngineController::stateChanged, this, &StateFollower::onState);
}

void StateFollower::onState(const CacheViewPtr& state) {
    m_latest = state;
    m_waiting = true;
    if (m_engine->isBusy())
        m_engine->followerWaiting(this);
    else
        flush();
}

void StateFollower::flush() {
    if (!m_waiting)
        return;
    m_waiting = false;
    const CacheViewPtr state = m_latest; // apply() may deliver another state (nested loops)
    m_apply(state);
}

} // namespace kvscope::widgets
