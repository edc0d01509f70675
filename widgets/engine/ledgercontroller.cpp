#include "ledgercontroller.h"

#include "enginecontroller.h"
#include "engineworker.h"

namespace kvscope::widgets {

LedgerController::LedgerController(EngineController* engine, QObject* parent)
    : QObject(parent), m_engine(engine), m_worker(engine->worker()) {
    qRegisterMetaType<ValidationViewPtr>();
    qRegisterMetaType<InsightViewPtr>();
    qRegisterMetaType<EvidenceViewPtr>();
    qRegisterMetaType<LedgerViewPtr>();
    qRegisterMetaType<DriftViewPtr>();
    qRegisterMetaType<DiffViewPtr>();
    qRegisterMetaType<LocalizeViewPtr>();
    qRegisterMetaType<LensViewPtr>();
    qRegisterMetaType<BranchesViewPtr>();
    qRegisterMetaType<AttributionViewPtr>();
    qRegisterMetaType<TransplantViewPtr>();
    qRegisterMetaType<InductionViewPtr>();
    qRegisterMetaType<SurvivalViewPtr>();
    qRegisterMetaType<SurvivalSweepViewPtr>();

    connect(m_worker, &EngineWorker::ledgerChanged, this, [this](const LedgerViewPtr& l) {
        m_ledger = l;
        emit ledgerChanged(l);
    });
    connect(m_worker, &EngineWorker::validationReady, this, [this](const ValidationViewPtr& v) {
        if (v->subject == tr("live session")) {
            if (v->revision != m_engine->tags().validation.load())
                return; // a newer check is queued
            m_live = v;
        }
        emit validationReady(v);
    });
    connect(m_worker, &EngineWorker::restorePreview, this, &LedgerController::restorePreview);
    connect(m_worker, &EngineWorker::driftReady, this, &LedgerController::driftReady);
    connect(m_worker, &EngineWorker::diffReady, this, &LedgerController::diffReady);
    connect(m_worker, &EngineWorker::localizeReady, this, &LedgerController::localizeReady);
    connect(m_worker, &EngineWorker::lensReady, this, &LedgerController::lensReady);
    connect(m_worker, &EngineWorker::branchesReady, this, &LedgerController::branchesReady);
    connect(m_worker, &EngineWorker::attributionReady, this, &LedgerController::attributionReady);
    connect(m_worker, &EngineWorker::transplantReady, this, &LedgerController::transplantReady);
    connect(m_worker, &EngineWorker::inductionReady, this, &LedgerController::inductionReady);
    connect(m_worker, &EngineWorker::insightReady, this, &LedgerController::insightReady);
    connect(m_worker, &EngineWorker::evidenceReady, this, &LedgerController::evidenceReady);
    connect(m_worker, &EngineWorker::survivalReady, this, &LedgerController::survivalReady);
    connect(m_worker, &EngineWorker::survivalSweepReady, this,
            &LedgerController::survivalSweepReady);

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

void LedgerController::snapshot() {
    m_engine->beginOperation(tr("Taking a snapshot"));
    m_engine->post([w = m_worker] { w->snapshot(); });
}

void LedgerController::truncateAt(qint64 length) {
    m_engine->beginOperation(tr("Truncating"));
    m_engine->post([w = m_worker, length] { w->truncateAt(length); });
}

void LedgerController::previewRestore(const QString& id) {
    m_engine->post([w = m_worker, id] { w->previewRestore(id); });
}

void LedgerController::restore(const QString& id, bool force) {
    m_engine->beginOperation(tr("Restoring"));
    m_engine->post([w = m_worker, id, force] { w->restore(id, force); });
}

void LedgerController::save(const QString& id, const QString& path) {
    m_engine->beginOperation(tr("Saving snapshot"));
    m_engine->post([w = m_worker, id, path] { w->save(id, path); });
}

void LedgerController::exportSafetensors(const QString& id, const QString& path) {
    m_engine->beginOperation(tr("Exporting"));
    m_engine->post([w = m_worker, id, path] { w->exportSafetensors(id, path); });
}

void LedgerController::openFile(const QString& path) {
    m_engine->beginOperation(tr("Opening snapshot"));
    m_engine->post([w = m_worker, path] { w->openFile(path); });
}

void LedgerController::openWorkspace(const QString& folder) {
    m_engine->beginOperation(tr("Opening workspace"));
    m_engine->post([w = m_worker, folder] { w->openWorkspace(folder); });
}

void LedgerController::validateLive() {
    m_liveChanged = false;
    const uint64_t serial = ++m_engine->tags().validation;
    m_engine->post([w = m_worker, serial] { w->validateLive(serial); });
}

void LedgerController::drift(const QString& a, const QString& b, int steps,
                             const QString& profile) {
    m_engine->beginOperation(tr("Measuring drift"));
    m_engine->post([w = m_worker, a, b, steps, profile] { w->drift(a, b, steps, profile); });
}

void LedgerController::diff(const QString& a, const QString& b) {
    m_engine->beginOperation(tr("Comparing snapshots"));
    m_engine->post([w = m_worker, a, b] { w->diff(a, b); });
}

void LedgerController::localize(const QString& a, const QString& b) {
    m_engine->beginOperation(tr("Localizing what matters"));
    m_engine->post([w = m_worker, a, b] { w->localize(a, b); });
}

void LedgerController::lens(const QString& id, bool force) {
    m_engine->beginOperation(tr("Reading the logit lens"));
    m_engine->post([w = m_worker, id, force] { w->lens(id, force); });
}

void LedgerController::branches(const QString& a, const QString& b) {
    m_engine->beginOperation(tr("Aligning the branches"));
    m_engine->post([w = m_worker, a, b] { w->branches(a, b); });
}

void LedgerController::attribute(const QString& id, bool force) {
    m_engine->beginOperation(tr("Attributing the next token"));
    m_engine->post([w = m_worker, id, force] { w->attribute(id, force); });
}

void LedgerController::forkBranches(const QString& id, int branches, int steps,
                                    double temperature) {
    m_engine->beginOperation(tr("Forking %1 ways").arg(branches));
    m_engine->post([w = m_worker, id, branches, steps, temperature] {
        w->forkBranches(id, branches, steps, temperature);
    });
}

void LedgerController::patchFrom(const QString& target, const QString& source, int layer,
                                 int head) {
    m_engine->beginOperation(tr("Patching layer %1").arg(layer));
    m_engine->post(
        [w = m_worker, target, source, layer, head] { w->patchFrom(target, source, layer, head); });
}

void LedgerController::injectFault(const QString& id, const QString& fault) {
    m_engine->beginOperation(tr("Injecting %1").arg(fault));
    m_engine->post([w = m_worker, id, fault] { w->injectFault(id, fault); });
}

void LedgerController::verifyNode(const QString& id) {
    m_engine->post([w = m_worker, id] { w->verifyNode(id); });
}

void LedgerController::transplant(const QString& recipient, const QString& donor, int layer,
                                  bool allPositions, int steps) {
    m_engine->beginOperation(tr("Transplanting the residual stream at layer %1").arg(layer));
    m_engine->post([w = m_worker, recipient, donor, layer, allPositions, steps] {
        w->transplant(recipient, donor, layer, allPositions, steps);
    });
}

void LedgerController::probeInduction(const QString& text, int length, quint64 seed) {
    m_engine->beginOperation(tr("Probing induction heads"));
    m_engine->post([w = m_worker, text, length, seed] { w->probeInduction(text, length, seed); });
}

void LedgerController::runInsight(int number) {
    m_engine->beginOperation(tr("Running the experiment of insight %1").arg(number));
    m_engine->post([w = m_worker, number] { w->runInsight(number); });
}

void LedgerController::storeEvidence(const InsightViewPtr& insight, bool restoreFirst) {
    if (!insight)
        return;
    m_engine->beginOperation(tr("Opening the evidence of insight %1").arg(insight->number));
    m_engine->post(
        [w = m_worker, insight, restoreFirst] { w->storeEvidence(insight, restoreFirst); });
}

void LedgerController::survive(const QString& id, const kvscope::state::SurviveOptions& options) {
    m_engine->beginOperation(
        tr("Compressing %1 (%2)").arg(label(id), QString::fromStdString(options.policy)));
    m_engine->post([w = m_worker, id, options] { w->survive(id, options); });
}

void LedgerController::survivalSweep(const QString& id, int steps) {
    m_engine->beginOperation(tr("Sweeping every survival policy over %1").arg(label(id)));
    const uint64_t epoch = m_engine->cancelEpoch();
    m_engine->post([w = m_worker, id, steps, epoch] { w->survivalSweep(id, steps, epoch); });
}

} // namespace kvscope::widgets
