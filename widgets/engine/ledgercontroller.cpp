#include "ledgercontroller.h"

#include "enginecontroller.h"
#include "engineworker.h"

namespace kvscope::widgets {

LedgerController::LedgerController(EngineController* engine, QObject* parent)
    : QObject(parent), m_engine(engine), m_worker(engine->worker()) {
    qRegisterMetaType<Answer>();
    connect(m_worker, &EngineWorker::answered, this, [this](const Answer& a) {
        if (auto l = a.as<LedgerView>()) {
            m_ledger = l;
        } else if (auto v = a.as<ValidationView>(); v && v->subject == tr("live session")) {
            if (v->revision != m_engine->tags().validation.load())
                return; // a newer check is queued
            m_live = v;
        }
        emit answered(a);
    });

    // The live session is re-validated when it changed and has settled (not while tokens
    // stream in, and not after operations that leave it alone — a fault's or a snapshot's
    // verdict stays on the Validation panel then).
    connect(engine, &EngineController::stateChanged, this, [this] {
        m_liveChanged = true;
        if (!m_engine->isBusy())
            validateLive();
    });
    connect(engine, &EngineController::busyChanged, this, [this](bool busy) {
        if (!busy && m_liveChanged)
            validateLive();
    });
}

LedgerController::~LedgerController() = default;

QString LedgerController::label(const QString& id) const {
    if (id.isEmpty())
        return tr("live session");
    if (m_ledger)
        for (const auto& n : m_ledger->nodes)
            if (n.id == id)
                return n.name;
    return id.left(8);
}

void LedgerController::validateLive() {
    m_liveChanged = false;
    const uint64_t serial = ++m_engine->tags().validation;
    request(req::ValidateLive{serial});
}

} // namespace kvscope::widgets
