// LedgerController: the GUI's one path to the operations on stored states and the lab. A
// panel posts a request (requests.h: snapshot, restore, verify, drift, diff, the probes, the
// survival and insights labs, ...) with request(); it runs on the EngineController's worker,
// one at a time and in order, and its result comes back as an Answer (answer.h) of a view type
// of statedata.h, which a view takes with onAnswer<View>(). Every operation ends with the
// engine's typed operationFinished().
//
// It also keeps what the window shows about the store between operations: the snapshot tree
// (the latest LedgerView) and the live session's verdict, re-validated when the live session
// changed and has settled (only the latest such check answers).
#pragma once

#include "answer.h"
#include "enginecontroller.h"
#include "requests.h"
#include "statedata.h"

#include <QObject>

#include <functional>
#include <type_traits>

namespace kvscope::widgets {

class EngineWorker;

class LedgerController : public QObject {
    Q_OBJECT
public:
    explicit LedgerController(EngineController* engine, QObject* parent = nullptr);
    ~LedgerController() override;

    // Posts `r` to the engine thread; the window is busy with r.busy() until it is done (a
    // request without busy() is no operation of its own: a verdict, a preview).
    template <class Request> void request(Request r) {
        if constexpr (requires { r.epoch; })
            r.epoch = m_engine->cancelEpoch();
        if constexpr (requires { r.busy(Labeler()); })
            m_engine->beginOperation(r.busy([this](const QString& id) { return label(id); }));
        m_engine->post([w = m_worker, r = std::move(r)] { r.run(*w); });
    }

    // Calls `fn` (a callable, or a member function of `receiver`) with every answer of type
    // View, on the GUI thread, as long as `receiver` lives.
    template <class View, class Fn> QMetaObject::Connection onAnswer(QObject* receiver, Fn fn) {
        return connect(
            this, &LedgerController::answered, receiver, [receiver, fn](const Answer& a) {
                if (auto v = a.as<View>()) {
                    if constexpr (std::is_member_function_pointer_v<Fn>)
                        std::invoke(fn, static_cast<typename MemberOf<Fn>::Class*>(receiver), v);
                    else
                        fn(v);
                }
            });
    }

    // Validates the live session (coalesced: only the latest request runs and answers).
    void validateLive();

    LedgerViewPtr ledger() const { return m_ledger; }
    ValidationViewPtr liveValidation() const { return m_live; }
    QString label(const QString& id) const;

signals:
    // Every answer of the requests, in the order the engine gave them (a live-session verdict
    // that a newer check superseded is dropped).
    void answered(const kvscope::widgets::Answer& answer);

private:
    template <class F> struct MemberOf;
    template <class R, class C, class... A> struct MemberOf<R (C::*)(A...)> { using Class = C; };
    template <class R, class C, class... A> struct MemberOf<R (C::*)(A...) const> {
        using Class = C;
    };

    EngineController* m_engine;
    EngineWorker* m_worker;     // lives on the engine thread
    bool m_liveChanged = false; // the live session changed since its last validation
    LedgerViewPtr m_ledger;
    ValidationViewPtr m_live;
};

} // namespace kvscope::widgets
