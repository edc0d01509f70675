#include "statefollower.h"

#include "enginecontroller.h"

namespace kvscope::widgets {

StateFollower::StateFollower(EngineController* engine, QObject* parent, Apply apply)
    : QObject(parent), m_engine(engine), m_apply(std::move(apply)) {
    connect(engine, &EngineController::stateChanged, this, &StateFollower::onState);
    connect(engine, &EngineController::operationFinished, this, &StateFollower::flush);
    connect(engine, &EngineController::busyChanged, this, [this](bool busy) {
        if (!busy)
            flush();
    });
}

void StateFollower::onState(const CacheViewPtr& state) {
    m_latest = state;
    m_waiting = true;
    if (!m_engine->isBusy()) {
        flush();
        return;
    }
    if (!m_queued) {
        m_queued = true;
        QMetaObject::invokeMethod(
            this,
            [this] {
                m_queued = false;
                flush();
            },
            Qt::QueuedConnection);
    }
}

void StateFollower::flush() {
    if (!m_waiting)
        return;
    m_waiting = false;
    const CacheViewPtr state = m_latest; // apply() may deliver another state (nested loops)
    m_apply(state);
}

} // namespace kvscope::widgets
