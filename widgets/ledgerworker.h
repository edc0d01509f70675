// LedgerWorker: the engine-thread half of LedgerController. Holds the snapshots (immutable,
// shared) and the lineage, and runs the core/state operations against the EngineWorker's
// live session. Only LedgerController posts to it.
#pragma once

#include "statedata.h"

#include "state/snapshot.h"

#include <QObject>

#include <atomic>
#include <map>

namespace kvscope::widgets {

class EngineWorker;

class LedgerWorker : public QObject {
    Q_OBJECT
public:
    LedgerWorker(EngineWorker* engine, const std::atomic<uint64_t>* validateSerial);

    void snapshot(const QString& operation, const nlohmann::json& parameters);
    void truncateAt(qint64 length);
    void previewRestore(const QString& id);
    void restore(const QString& id, bool force);
    void save(const QString& id, const QString& path);
    void exportSafetensors(const QString& id, const QString& path);
    void openFile(const QString& path);
    void validateLive(uint64_t serial);
    void drift(const QString& a, const QString& b, int steps, const QString& profile);
    void diff(const QString& a, const QString& b);
    // Surgery and the fault lab (core/state/surgery.h, faults.h, transplant.h): each adds
    // new nodes; the live session is not touched.
    void forkBranches(const QString& id, int branches, int steps, double temperature);
    // The full verify report of node `id` (validationReady()).
    void verifyNode(const QString& id);
    void patchFrom(const QString& target, const QString& source, int layer, int head);
    void injectFault(const QString& id, const QString& fault);
    void transplant(const QString& recipient, const QString& donor, int layer, bool allPositions,
                    int steps);
    // The induction probe on the loaded model (its own session; the live one is not touched).
    void probeInduction(const QString& text, int length, quint64 seed);

signals:
    void ledgerChanged(const kvscope::widgets::LedgerViewPtr& ledger);
    void validationReady(const kvscope::widgets::ValidationViewPtr& report);
    void restorePreview(const QString& id, const kvscope::widgets::ValidationViewPtr& report);
    void driftReady(const kvscope::widgets::DriftViewPtr& drift);
    void diffReady(const kvscope::widgets::DiffViewPtr& diff);
    void transplantReady(const kvscope::widgets::TransplantViewPtr& result);
    void inductionReady(const kvscope::widgets::InductionViewPtr& report);

private:
    struct Entry {
        std::shared_ptr<const kvscope::state::Snapshot> snapshot;
        SnapshotNode node;
    };
    const Entry* find(const QString& id) const;
    QString add(kvscope::state::Snapshot snapshot, const QString& file = {});
    void publishLedger();
    // Saves `s` to a temporary file and verifies it (verifyFile) against the loaded model.
    ValidationViewPtr verifyView(const kvscope::state::Snapshot& s, const QString& subject) const;
    std::vector<QString> segmentsOf(const kvscope::state::Snapshot& s) const;

    EngineWorker* m_engine;
    const std::atomic<uint64_t>* m_validateSerial;
    std::map<QString, Entry> m_entries;
    std::vector<QString> m_order;
    QString m_current;
};

} // namespace kvscope::widgets
