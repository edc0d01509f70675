// StateFollower: hands a panel each new state of the live session, in a way the event loop can
// afford during a run.
//
// While the engine is busy (a prompt or generation streaming states in), a new state is applied
// in a later pass of the event loop, and states that arrive before that pass give one update
// with the latest. Each panel's update is then its own short event instead of one long chain
// of every panel's work in the delivery of stateChanged, so input, timers and painting get in
// between (kvscope-bench-gui's event-loop latency during generation). Outside a run the state
// is applied at once, and the controller announces a run's end (operationFinished,
// busyChanged) only after every follower has applied the last state: what the window shows
// after an operation is never behind it.
#pragma once

#include "viewdata.h"

#include <QObject>

#include <functional>

namespace kvscope::widgets {

class EngineController;

class StateFollower : public QObject {
public:
    using Apply = std::function<void(const CacheViewPtr&)>;
    // Follows engine's stateChanged for `parent` (which owns the follower).
    StateFollower(EngineController* engine, QObject* parent, Apply apply);

    // Applies the state waiting for its pass now (nothing when none waits).
    void flush();
    bool isWaiting() const { return m_waiting; }

private:
    void onState(const CacheViewPtr& state);

    EngineController* m_engine;
    Apply m_apply;
    CacheViewPtr m_latest;
    bool m_waiting = false; // m_latest has not been applied
};

} // namespace kvscope::widgets
