#include "ledgerworker.h"

#include "engineworker.h"

#include "engine/model.h"
#include "engine/session.h"
#include "state/compare.h"
#include "state/export.h"
#include "state/faults.h"
#include "state/induction.h"
#include "state/restore.h"
#include "state/snapshotio.h"
#include "state/surgery.h"
#include "state/transplant.h"
#include "state/validate.h"
#include "state/verifyfile.h"
#include "tokenizer/tokenizer.h"

#include <QDir>
#include <QFileInfo>
#include <QTemporaryDir>

#include <algorithm>
#include <cmath>

namespace kvscope::widgets {

namespace st = kvscope::state;

namespace {

ViolationInfo toInfo(const st::Violation& v) {
    ViolationInfo i;
    i.id = QString::fromStdString(v.id);
    i.severity = SeverityRank(int(v.severity));
    i.item = QString::fromStdString(v.item);
    i.message = QString::fromStdString(v.message);
    i.explanation = QString::fromStdString(v.explanation);
    i.layer = v.layer;
    i.head = v.head;
    i.position = v.position;
    return i;
}

std::shared_ptr<ValidationView> toView(const st::Report& report, const QString& subject) {
    auto view = std::make_shared<ValidationView>();
    view->subject = subject;
    for (const auto& v : report.violations)
        view->violations.push_back(toInfo(v));
    return view;
}

QString describe(const st::Equivalence& e) {
    const auto& c = e.comparison;
    return QObject::tr("%1 under %2: KL %3, max |Δlogit| %4, top-1 %5, top-5 overlap %6/5")
        .arg(e.equivalent ? QObject::tr("equivalent") : QObject::tr("NOT equivalent"),
             QString::fromStdString(st::profileName(e.profile)))
        .arg(c.kl, 0, 'g', 3)
        .arg(c.maxAbs, 0, 'g', 3)
        .arg(c.top1Agree ? QObject::tr("agrees") : QObject::tr("differs"))
        .arg(c.topKOverlap);
}

} // namespace

LedgerWorker::LedgerWorker(EngineWorker* engine, const std::atomic<uint64_t>* validateSerial)
    : m_engine(engine), m_validateSerial(validateSerial) {}

const LedgerWorker::Entry* LedgerWorker::find(const QString& id) const {
    auto it = m_entries.find(id);
    return it == m_entries.end() ? nullptr : &it->second;
}

QString LedgerWorker::add(st::Snapshot snapshot, const QString& file) {
    Entry e;
    const auto& l = snapshot.lineage;
    e.node.id = QString::fromStdString(l.id);
    e.node.parentId = QString::fromStdString(l.parentId);
    e.node.operation = QString::fromStdString(l.operation);
    e.node.parameters =
        l.parameters.empty() ? QString() : QString::fromStdString(l.parameters.dump());
    e.node.createdAt = QString::fromStdString(l.createdAt);
    e.node.file = file;
    e.node.tokens = qint64(snapshot.tokens.size());
    e.node.cacheLength = snapshot.cacheLength;
    if (auto tok = m_engine->model() ? m_engine->model()->tokenizer() : nullptr) {
        const size_t n = snapshot.tokens.size(), from = n > 8 ? n - 8 : 0;
        e.node.preview = QString::fromStdString(
            tok->decode(std::span<const int32_t>(snapshot.tokens.data() + from, n - from), true));
    }
    e.snapshot = std::make_shared<const st::Snapshot>(std::move(snapshot));
    const QString id = e.node.id;
    if (!m_entries.count(id))
        m_order.push_back(id);
    m_entries[id] = std::move(e);
    return id;
}

void LedgerWorker::publishLedger() {
    auto view = std::make_shared<LedgerView>();
    for (const QString& id : m_order)
        view->nodes.push_back(m_entries.at(id).node);
    view->currentId = m_current;
    emit ledgerChanged(view);
}

std::vector<QString> LedgerWorker::segmentsOf(const st::Snapshot& s) const {
    std::vector<QString> out(s.tokens.size(), QStringLiteral("prompt"));
    for (const auto& seg : s.prompt.segments) {
        QString label = QString::fromStdString(seg.kind);
        if (seg.kind == "message")
            label = QString::fromStdString(seg.role);
        else if (seg.kind == "generation_prompt")
            label = QStringLiteral("generation prompt");
        for (int64_t i = std::max<int64_t>(0, seg.begin); i < seg.end && size_t(i) < out.size();
             ++i)
            out[size_t(i)] = label;
    }
    return out;
}

void LedgerWorker::snapshot(const QString& operation, const nlohmann::json& parameters) {
    const QString op = QStringLiteral("snapshot");
    kvscope::Session* session = m_engine->session();
    if (!session) {
        m_engine->finishOperation(op, false, tr("No model loaded"));
        return;
    }
    st::CaptureOptions o;
    o.sampler = m_engine->sampler();
    const auto& tokens = session->tokens();
    const int64_t promptLength =
        std::min<int64_t>(m_engine->promptLength(), int64_t(tokens.size()));
    o.prompt =
        st::plainPromptMeta(std::vector<int32_t>(tokens.begin(), tokens.begin() + promptLength),
                            int32_t(session->model()->config().bosId));
    // Segment runs of the prompt (chat roles) replace the single "prompt" range.
    const auto& segs = m_engine->segments();
    if (promptLength > 0 && size_t(promptLength) <= segs.size()) {
        o.prompt.segments.clear();
        int64_t begin = 0;
        for (int64_t i = 1; i <= promptLength; ++i) {
            if (i < promptLength && segs[size_t(i)] == segs[size_t(begin)])
                continue;
            const std::string label = segs[size_t(begin)].toStdString();
            const bool role = label == "system" || label == "user" || label == "assistant";
            o.prompt.segments.push_back({begin, i, role ? label : (label == "prompt" ? "user" : ""),
                                         role ? "message" : label, -1});
            begin = i;
        }
    }
    o.parentId = m_current.toStdString();
    o.operation = operation.toStdString();
    o.parameters = parameters;
    auto r = st::capture(*session, o);
    if (!r) {
        m_engine->finishOperation(op, false, QString::fromStdString(r.message()));
        return;
    }
    r.value().lineage =
        st::newLineage(session->model()->device(), o.parentId, o.operation, parameters);
    m_current = add(std::move(r.value()));
    publishLedger();
    m_engine->finishOperation(op, true, tr("Snapshot %1 (%2)").arg(m_current.left(8), operation));
}

void LedgerWorker::truncateAt(qint64 length) {
    kvscope::Session* session = m_engine->session();
    if (!session) {
        m_engine->finishOperation(QStringLiteral("snapshot"), false, tr("No model loaded"));
        return;
    }
    const qint64 before = qint64(session->tokens().size());
    m_engine->truncate(length);
    snapshot(QStringLiteral("truncate"), {{"at", length}, {"from", before}});
}

void LedgerWorker::previewRestore(const QString& id) {
    const Entry* e = find(id);
    if (!e || !m_engine->model())
        return;
    const st::Report report = st::validate(*e->snapshot, m_engine->model().get());
    auto view = toView(report, tr("restore %1 %2").arg(e->node.operation, id.left(8)));
    if (!report.hasErrors() && !e->snapshot->tokens.empty()) {
        auto restored = st::restore(*e->snapshot, m_engine->model());
        if (restored) {
            auto eq = st::checkEquivalence(restored.value().session, e->snapshot->lastLogits);
            view->equivalence = eq ? describe(eq.value()) : QString::fromStdString(eq.message());
        } else {
            view->equivalence = QString::fromStdString(restored.message());
        }
    }
    emit restorePreview(id, view);
}

void LedgerWorker::restore(const QString& id, bool force) {
    const QString op = QStringLiteral("restore");
    const Entry* e = find(id);
    if (!e || !m_engine->model()) {
        m_engine->finishOperation(op, false, tr("No such snapshot or no model"));
        return;
    }
    st::RestoreOptions options;
    options.force = force;
    auto r = st::restore(*e->snapshot, m_engine->model(), options);
    if (!r) {
        m_engine->finishOperation(op, false, QString::fromStdString(r.message()));
        return;
    }
    std::unique_ptr<kvscope::Sampler> sampler;
    if (e->snapshot->hasSampler)
        sampler = std::make_unique<kvscope::Sampler>(r.value().sampler);
    m_engine->adoptSession(r.value().session, segmentsOf(*e->snapshot), std::move(sampler));
    m_current = id;
    publishLedger();
    auto view = toView(r.value().report, tr("restored %1").arg(id.left(8)));
    emit validationReady(view);
    m_engine->finishOperation(
        op, true,
        tr("Restored %1 (%2 tokens)%3")
            .arg(id.left(8))
            .arg(e->node.tokens)
            .arg(force && r.value().report.hasErrors() ? tr(", forced") : QString()));
}

void LedgerWorker::save(const QString& id, const QString& path) {
    const QString op = QStringLiteral("save");
    auto it = m_entries.find(id);
    if (it == m_entries.end()) {
        m_engine->finishOperation(op, false, tr("No such snapshot"));
        return;
    }
    m_engine->reportProgress(0, 0, tr("Saving"));
    if (auto s = st::save(*it->second.snapshot, path.toStdString()); !s) {
        m_engine->finishOperation(op, false, QString::fromStdString(s.message()));
        return;
    }
    it->second.node.file = path;
    publishLedger();
    m_engine->finishOperation(op, true, tr("Saved %1").arg(QFileInfo(path).fileName()));
}

void LedgerWorker::exportSafetensors(const QString& id, const QString& path) {
    const QString op = QStringLiteral("export");
    const Entry* e = find(id);
    if (!e) {
        m_engine->finishOperation(op, false, tr("No such snapshot"));
        return;
    }
    const auto s = st::exportSafetensors(*e->snapshot, path.toStdString());
    m_engine->finishOperation(op, s.isOk(),
                              s ? tr("Exported %1").arg(QFileInfo(path).fileName())
                                : QString::fromStdString(s.message()));
}

void LedgerWorker::openFile(const QString& path) {
    const QString op = QStringLiteral("open");
    m_engine->reportProgress(0, 0, tr("Verifying %1").arg(QFileInfo(path).fileName()));
    st::VerifyResult result = st::verifyFile(path.toStdString(), m_engine->model());
    auto view = toView(result.report, QFileInfo(path).fileName());
    if (result.equivalence)
        view->equivalence = describe(*result.equivalence);
    emit validationReady(view);
    if (!result.snapshot ||
        result.snapshot->layers.size() != size_t(result.snapshot->config.nLayers)) {
        m_engine->finishOperation(op, false,
                                  tr("%1: could not read a complete snapshot (see Validation)")
                                      .arg(QFileInfo(path).fileName()));
        return;
    }
    const QString id = add(std::move(*result.snapshot), path);
    publishLedger();
    m_engine->finishOperation(op, true,
                              tr("Opened %1 as %2: %3 violations")
                                  .arg(QFileInfo(path).fileName(), id.left(8))
                                  .arg(view->violations.size()));
}

void LedgerWorker::validateLive(uint64_t serial) {
    if (serial != m_validateSerial->load() || !m_engine->session())
        return;
    st::CaptureOptions o;
    o.sampler = m_engine->sampler(); // the live sampler state is part of the ledger too
    auto snap = st::capture(*m_engine->session(), o);
    if (!snap)
        return;
    const auto report = st::validate(snap.value(), m_engine->model().get());
    auto view = toView(report, tr("live session"));
    view->revision = serial;
    emit validationReady(view);
}

void LedgerWorker::drift(const QString& a, const QString& b, int steps, const QString& profile) {
    const QString op = QStringLiteral("drift");
    auto model = m_engine->model();
    if (!model || !m_engine->session()) {
        m_engine->finishOperation(op, false, tr("No model loaded"));
        return;
    }
    // A session for an id: the live one (copied, without the GUI's observer) or a restore.
    auto sessionFor = [&](const QString& id, QString* label) -> std::optional<kvscope::Session> {
        if (id.isEmpty()) {
            kvscope::Session s = *m_engine->session();
            s.setObserver(nullptr);
            *label = tr("live session");
            return s;
        }
        const Entry* e = find(id);
        if (!e)
            return std::nullopt;
        st::RestoreOptions o;
        o.force = true; // drift is a diagnostic: it must run on broken states too
        auto r = st::restore(*e->snapshot, model, o);
        if (!r)
            return std::nullopt;
        *label = tr("%1 %2").arg(e->node.operation, id.left(8));
        return r.value().session;
    };
    auto view = std::make_shared<DriftView>();
    auto sa = sessionFor(a, &view->labelA);
    auto sb = sessionFor(b, &view->labelB);
    if (!sa || !sb || sa->lastLogits().empty() || sb->lastLogits().empty()) {
        m_engine->finishOperation(op, false, tr("Drift needs two states with at least one token"));
        return;
    }
    kvscope::Sampler sampler;
    if (const Entry* e = find(a); e && e->snapshot->hasSampler) {
        sampler = kvscope::Sampler(e->snapshot->sampler);
        sampler.setRngState(e->snapshot->rngState);
    } else if (m_engine->sampler()) {
        sampler = *m_engine->sampler();
    }
    m_engine->reportProgress(0, steps, tr("Drift"));
    auto r = st::drift(*sa, *sb, steps, sampler, 5);
    if (!r) {
        m_engine->finishOperation(op, false, QString::fromStdString(r.message()));
        return;
    }
    const auto p =
        st::parseProfile(profile.toStdString()).value_or(st::ToleranceProfile::SameDevice);
    double scale = 0;
    for (float v : sa->lastLogits())
        scale = std::max(scale, double(std::abs(v)));
    const st::Tolerance tol =
        st::toleranceFor(p, sa->cache().empty() ? "f32" : sa->cache().dtype(), scale);
    view->tolKl = tol.maxKl;
    view->tolAbs = tol.maxAbsLogit;
    view->profile = QString::fromStdString(st::profileName(p));
    view->firstDivergingStep = r.value().firstDivergingStep;
    view->stopReason = QString::fromStdString(r.value().stopReason);
    auto tok = model->tokenizer();
    auto text = [&](int32_t id) {
        return id < 0 ? QString()
               : tok  ? QString::fromStdString(tok->tokenText(id))
                      : QString::number(id);
    };
    for (const auto& s : r.value().steps) {
        DriftPoint d;
        d.step = s.step;
        d.kl = s.logits.kl;
        d.maxAbs = s.logits.maxAbs;
        d.topKOverlap = s.logits.topKOverlap;
        d.topK = s.logits.topK;
        d.top1Agree = s.logits.top1Agree;
        d.tokenA = text(s.tokenA);
        d.ownTokenB = text(s.ownTokenB);
        view->points.push_back(d);
    }
    emit driftReady(view);
    m_engine->finishOperation(op, true,
                              tr("Drift over %1 steps: max KL %2, max |Δlogit| %3")
                                  .arg(view->points.size())
                                  .arg(r.value().maxKl, 0, 'g', 3)
                                  .arg(r.value().maxAbs, 0, 'g', 3));
}

void LedgerWorker::diff(const QString& a, const QString& b) {
    const QString op = QStringLiteral("diff");
    auto model = m_engine->model();
    if (!model || !m_engine->session()) {
        m_engine->finishOperation(op, false, tr("No model loaded"));
        return;
    }
    auto view = std::make_shared<DiffView>();
    auto snapshotFor = [&](const QString& id,
                           QString* label) -> std::shared_ptr<const st::Snapshot> {
        if (id.isEmpty()) {
            auto r = st::capture(*m_engine->session());
            *label = tr("live session");
            return r ? std::make_shared<const st::Snapshot>(std::move(r.value())) : nullptr;
        }
        const Entry* e = find(id);
        *label = e ? tr("%1 %2").arg(e->node.operation, id.left(8)) : QString();
        return e ? e->snapshot : nullptr;
    };
    auto sa = snapshotFor(a, &view->labelA);
    auto sb = snapshotFor(b, &view->labelB);
    if (!sa || !sb) {
        m_engine->finishOperation(op, false, tr("Choose two snapshots to compare"));
        return;
    }
    auto tok = model->tokenizer();
    auto tokens = [&](const st::Snapshot& s) {
        std::vector<TokenInfo> out;
        for (size_t i = 0; i < s.tokens.size(); ++i) {
            TokenInfo t;
            t.id = s.tokens[i];
            t.piece = tok ? QString::fromStdString(tok->tokenText(t.id)) : QString::number(t.id);
            t.special = tok && tok->isSpecial(t.id);
            t.text = t.special || !tok
                         ? t.piece
                         : QString::fromUtf8(tok->decodeNext(i ? s.tokens[i - 1] : -1, t.id));
            t.position = i < s.positions.size() ? s.positions[i] : -1;
            t.segment = segmentsOf(s)[i];
            out.push_back(t);
        }
        return out;
    };
    view->tokensA = tokens(*sa);
    view->tokensB = tokens(*sb);
    const size_t common = std::min(sa->tokens.size(), sb->tokens.size());
    for (size_t i = 0; i < common && view->firstTokenDivergence < 0; ++i)
        if (sa->tokens[i] != sb->tokens[i])
            view->firstTokenDivergence = qint64(i);
    if (view->firstTokenDivergence < 0 && sa->tokens.size() != sb->tokens.size())
        view->firstTokenDivergence = qint64(common);

    auto ca = st::cacheFromSnapshot(*sa, "cpu");
    auto cb = st::cacheFromSnapshot(*sb, "cpu");
    if (!ca || !cb) {
        view->mismatch = QString::fromStdString(!ca ? ca.message() : cb.message());
    } else if (ca.value().layers() != cb.value().layers() ||
               ca.value().kvHeads() != cb.value().kvHeads() ||
               ca.value().headDim() != cb.value().headDim()) {
        view->mismatch =
            tr("cache shapes differ: %1×%2×%3 vs %4×%5×%6 (layers × KV heads × head dim)")
                .arg(ca.value().layers())
                .arg(ca.value().kvHeads())
                .arg(ca.value().headDim())
                .arg(cb.value().layers())
                .arg(cb.value().kvHeads())
                .arg(cb.value().headDim());
    } else {
        const auto& A = ca.value();
        const auto& B = cb.value();
        const int L = int(A.layers()), H = int(A.kvHeads()), D = int(A.headDim());
        const int64_t n = std::min(A.length(), B.length());
        view->layers = L;
        view->kvHeads = H;
        view->length = n;
        view->threshold = sa->cacheDtype == "f32" ? 1e-3 : sa->cacheDtype == "f16" ? 2e-2 : 1e-1;
        view->layerHead.assign(size_t(L * H), 0.0f);
        view->layerPosition.assign(size_t(L * n), 0.0f);
        for (int l = 0; l < L; ++l) {
            m_engine->reportProgress(l, L, tr("Diff"));
            const kvscope::HostTensor t[4] = {A.key(l), B.key(l), A.value(l), B.value(l)};
            const int64_t lenA = A.length(), lenB = B.length();
            for (int h = 0; h < H; ++h)
                for (int64_t p = 0; p < n; ++p) {
                    float m = 0;
                    for (int kv = 0; kv < 2; ++kv) {
                        const float* x = t[2 * kv].data.data() + (h * lenA + p) * D;
                        const float* y = t[2 * kv + 1].data.data() + (h * lenB + p) * D;
                        for (int d = 0; d < D; ++d) {
                            const float delta = std::abs(x[d] - y[d]);
                            m = std::isnan(delta) ? delta : std::max(m, delta);
                            if (std::isnan(m))
                                break;
                        }
                    }
                    auto& lh = view->layerHead[size_t(l * H + h)];
                    auto& lp = view->layerPosition[size_t(l * n + p)];
                    lh = std::isnan(m) || std::isnan(lh) ? NAN : std::max(lh, m);
                    lp = std::isnan(m) || std::isnan(lp) ? NAN : std::max(lp, m);
                    if (!(m <= view->threshold)) {
                        if (view->firstDivergingLayer < 0)
                            view->firstDivergingLayer = l;
                        if (view->firstDivergingPosition < 0 || p < view->firstDivergingPosition)
                            view->firstDivergingPosition = p;
                    }
                }
        }
    }
    emit diffReady(view);
    m_engine->finishOperation(op, true, tr("Diff %1 vs %2").arg(view->labelA, view->labelB));
}

ValidationViewPtr LedgerWorker::verifyView(const st::Snapshot& s, const QString& subject) const {
    // The report `kvscope-cli verify` would print: through a real file, so file-level and
    // equivalence checks take part exactly as they do for a user's snapshot.
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("verify.kvsnap"));
    if (!dir.isValid() || !st::save(s, path.toStdString()))
        return nullptr;
    st::VerifyResult v = st::verifyFile(path.toStdString(), m_engine->model());
    auto view = toView(v.report, subject);
    if (v.equivalence)
        view->equivalence = describe(*v.equivalence);
    return view;
}

void LedgerWorker::verifyNode(const QString& id) {
    const Entry* e = find(id);
    if (!e)
        return;
    if (auto view = verifyView(*e->snapshot, tr("%1 %2").arg(e->node.operation, id.left(8))))
        emit validationReady(view);
}

void LedgerWorker::forkBranches(const QString& id, int branches, int steps, double temperature) {
    const QString op = QStringLiteral("fork");
    const Entry* e = find(id);
    if (!e || !m_engine->model()) {
        m_engine->finishOperation(op, false, tr("Select a snapshot to fork"));
        return;
    }
    st::ForkOptions o;
    o.branches = branches;
    o.steps = steps;
    if (temperature >= 0)
        o.temperature = float(temperature);
    if (steps > 0)
        m_engine->reportProgress(0, 0,
                                 tr("Forking %1 ways, %2 tokens each").arg(branches).arg(steps));
    auto r = st::fork(*e->snapshot, o, m_engine->model());
    if (!r) {
        m_engine->finishOperation(op, false, QString::fromStdString(r.message()));
        return;
    }
    QStringList made;
    for (auto& b : r.value().branches)
        made << add(std::move(b.snapshot)).left(8);
    publishLedger();
    m_engine->finishOperation(
        op, true, tr("Forked %1 into %2").arg(id.left(8), made.join(QStringLiteral(", "))));
}

void LedgerWorker::patchFrom(const QString& target, const QString& source, int layer, int head) {
    const QString op = QStringLiteral("patch");
    const Entry* a = find(target);
    const Entry* b = find(source);
    if (!a || !b) {
        m_engine->finishOperation(op, false, tr("Select a target and a source snapshot"));
        return;
    }
    st::PatchOptions o;
    o.layer = layer;
    o.head = head;
    o.sourceFile = b->node.file.toStdString();
    auto r = st::patch(*a->snapshot, *b->snapshot, o, m_engine->model());
    if (!r) {
        m_engine->finishOperation(op, false, QString::fromStdString(r.message()));
        return;
    }
    const auto& rep = r.value().report;
    QString change;
    if (rep.logitChange)
        change = tr(": next-token KL %1 vs before").arg(rep.logitChange->kl, 0, 'g', 3);
    const QString id = add(std::move(r.value().snapshot));
    publishLedger();
    m_engine->finishOperation(op, true,
                              tr("Patched layer %1%2 of %3 from %4 → %5%6")
                                  .arg(layer)
                                  .arg(head >= 0 ? tr(" head %1").arg(head) : QString())
                                  .arg(target.left(8), source.left(8), id.left(8), change));
}

void LedgerWorker::injectFault(const QString& id, const QString& fault) {
    const QString op = QStringLiteral("fault");
    const Entry* e = find(id);
    if (!e || !m_engine->model()) {
        m_engine->finishOperation(op, false, tr("Select a snapshot to inject the fault into"));
        return;
    }
    st::FaultContext ctx;
    ctx.model = m_engine->model();
    auto r = st::injectFault(fault.toStdString(), *e->snapshot, ctx);
    if (!r) {
        m_engine->finishOperation(op, false, QString::fromStdString(r.message()));
        return;
    }
    QString summary;
    if (auto view = verifyView(r.value(), tr("fault %1 on %2").arg(fault, id.left(8)))) {
        QStringList ids;
        for (const auto& viol : view->violations)
            if (viol.severity != SeverityRank::Note)
                ids << viol.id;
        summary = ids.isEmpty() ? tr("verify finds nothing") : tr("verify: %1").arg(ids.join(", "));
        emit validationReady(view);
    }
    const QString made = add(std::move(r.value()));
    publishLedger();
    m_engine->finishOperation(
        op, true, tr("Injected %1 into %2 → %3; %4").arg(fault, id.left(8), made.left(8), summary));
}

void LedgerWorker::transplant(const QString& recipient, const QString& donor, int layer,
                              bool allPositions, int steps) {
    const QString op = QStringLiteral("transplant");
    auto model = m_engine->model();
    auto tok = model ? model->tokenizer() : nullptr;
    if (!tok) {
        m_engine->finishOperation(op, false, tr("Load a model with a tokenizer first"));
        return;
    }
    st::TransplantOptions o;
    o.layer = layer;
    o.positions = allPositions ? st::TransplantPositions::All : st::TransplantPositions::Last;
    o.steps = steps;
    auto r = st::transplant(model, tok->encode(recipient.toStdString()),
                            tok->encode(donor.toStdString()), o);
    if (!r) {
        m_engine->finishOperation(op, false, QString::fromStdString(r.message()));
        return;
    }
    const auto& t = r.value();
    auto view = std::make_shared<TransplantView>();
    view->layer = t.layer;
    view->positions = QString::fromStdString(st::transplantPositionsName(t.positions));
    view->klVsDonor = t.vsDonor.kl;
    view->klVsOriginal = t.vsOriginal.kl;
    view->klDonorVsOriginal = t.donorVsOriginal.kl;
    view->top1MatchesDonor = t.vsDonor.top1Agree;
    view->donorContinuation = QString::fromStdString(tok->decode(t.donorTokensGenerated));
    view->originalContinuation = QString::fromStdString(tok->decode(t.originalTokensGenerated));
    for (const auto& p : t.persistence) {
        if (!p.skipped.empty())
            view->skipped << QStringLiteral("%1: %2").arg(QString::fromStdString(p.intervention),
                                                          QString::fromStdString(p.skipped));
        for (const auto& s : p.steps) {
            TransplantRow row;
            row.intervention = QString::fromStdString(p.intervention);
            row.step = s.step;
            const int32_t one[1] = {s.token};
            row.token = QString::fromStdString(tok->decode(one));
            row.klDonor = s.klDonor;
            row.klOriginal = s.klOriginal;
            row.matchesDonor = s.matchesDonor;
            row.matchesOriginal = s.matchesOriginal;
            view->rows.push_back(row);
        }
    }
    emit transplantReady(view);
    m_engine->finishOperation(op, true,
                              tr("Transplant at layer %1 (%2 positions): KL to the donor %3")
                                  .arg(layer)
                                  .arg(view->positions)
                                  .arg(view->klVsDonor, 0, 'g', 3));
}

void LedgerWorker::probeInduction(const QString& text, int length, quint64 seed) {
    const QString op = QStringLiteral("induction");
    auto model = m_engine->model();
    auto tok = model ? model->tokenizer() : nullptr;
    if (!tok) {
        m_engine->finishOperation(op, false, tr("Load a model with a tokenizer first"));
        return;
    }
    st::InductionOptions o;
    o.length = length;
    o.seed = seed;
    o.text = text.toStdString();
    m_engine->reportProgress(0, 0, tr("Probing induction heads"));
    auto r = st::probeInduction(model, *tok, o);
    if (!r) {
        m_engine->finishOperation(op, false, QString::fromStdString(r.message()));
        return;
    }
    const st::InductionReport& rep = r.value();
    auto view = std::make_shared<InductionView>();
    view->text = text;
    view->segmentLength = rep.segmentLength;
    view->seed = rep.segmentLength > 0 ? seed : 0;
    view->tokens = qint64(rep.tokens.size());
    view->layers = int(model->config().nLayers);
    view->queryHeads = int(model->config().nHeads);
    view->firstCopyLoss = rep.firstCopyLoss;
    view->secondCopyLoss = rep.secondCopyLoss;
    view->firstCopyTop1 = rep.firstCopyTop1;
    view->secondCopyTop1 = rep.secondCopyTop1;
    for (const auto& h : rep.heads)
        view->heads.push_back({h.layer, h.head, h.induction, h.previousToken});
    for (const auto& t : rep.recalled) {
        // Core decodes it as streamed after its predecessor (a leading space survives); a
        // byte fragment of a longer character shows as its vocabulary piece.
        QString text = QString::fromStdString(t.text);
        if (text.contains(QChar::ReplacementCharacter))
            text = QString::fromStdString(tok->tokenText(t.id));
        view->recalled.push_back({t.position, text, t.earlierPosition, t.rank, t.probability});
    }
    view->recalledMeanRank = rep.recalledMeanRank;
    view->recalledTop1 = rep.recalledTop1;
    view->otherMeanRank = rep.otherMeanRank;

    QString summary;
    if (view->segmentLength > 0)
        summary = tr("Random segment of %1 tokens, fed twice: second copy loss %2 nats, top-1 "
                     "%3% · first copy %4 nats, top-1 %5%")
                      .arg(view->segmentLength)
                      .arg(view->secondCopyLoss, 0, 'f', 2)
                      .arg(view->secondCopyTop1 * 100, 0, 'f', 0)
                      .arg(view->firstCopyLoss, 0, 'f', 2)
                      .arg(view->firstCopyTop1 * 100, 0, 'f', 0);
    else if (view->recalled.empty())
        summary = tr("%1 tokens; none occurred earlier in the text, so there is nothing to "
                     "recall (repeat a name or a phrase)")
                      .arg(view->tokens);
    else
        summary = tr("%1 tokens; %2 occurred earlier: mean rank %3, ranked first %4% (tokens "
                     "seen for the first time: mean rank %5)")
                      .arg(view->tokens)
                      .arg(view->recalled.size())
                      .arg(view->recalledMeanRank, 0, 'f', 1)
                      .arg(view->recalledTop1 * 100, 0, 'f', 0)
                      .arg(view->otherMeanRank, 0, 'f', 1);
    const InductionHead best = view->strongest();
    if (best.layer >= 0 && best.induction > 0)
        summary += tr(" · strongest induction head: layer %1 head %2 (%3)")
                       .arg(best.layer)
                       .arg(best.head)
                       .arg(best.induction, 0, 'f', 2);
    view->summary = summary;
    emit inductionReady(view);
    m_engine->finishOperation(op, true, tr("Induction probe: %1").arg(summary));
}

} // namespace kvscope::widgets
