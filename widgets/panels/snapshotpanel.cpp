#include "snapshotpanel.h"

#include "displaytext.h"
#include "enginecontroller.h"
#include "exportmenu.h"
#include "ledgercontroller.h"
#include "selection.h"
#include "snapshottreemodel.h"
#include "violationmodel.h"

#include "state/surgery/faults.h"

#include <QComboBox>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QFileDialog>
#include <QFormLayout>
#include <QMenu>
#include <QSpinBox>
#include <QToolButton>
#include <QHeaderView>
#include <QLabel>
#include <QMessageBox>
#include <QPushButton>
#include <QToolBar>
#include <QTreeView>
#include <QVBoxLayout>

#include <algorithm>

namespace kvscope::widgets {

SnapshotPanel::SnapshotPanel(EngineController* engine, LedgerController* ledger,
                             Selection* selection, QWidget* parent)
    : QWidget(parent), m_engine(engine), m_ledger(ledger), m_selection(selection),
      m_model(new SnapshotTreeModel(this)) {
    auto* layout = new QVBoxLayout(this);
    auto* bar = new QToolBar(this);
    bar->setToolButtonStyle(Qt::ToolButtonTextOnly);
    bar->addAction(tr("Snapshot"), this, &SnapshotPanel::takeSnapshot)
        ->setToolTip(tr("Capture the live session as a child of the current node"));
    m_forkMenu = new QMenu(tr("Fork"), this);
    // The one Fork menu (the State menu shows this one too): Ctrl+K marks a branch point.
    m_forkMenu
        ->addAction(tr("Mark a branch point (snapshot the live session)"), this,
                    &SnapshotPanel::takeSnapshot)
        ->setShortcut(QKeySequence(tr("Ctrl+K")));
    for (int n : {2, 4})
        m_forkMenu->addAction(
            tr("Fork the selected snapshot %1 ways, 16 tokens each (temperature 1)").arg(n), this,
            [this, n] { forkSelected(n, 16); });
    auto* forkButton = new QToolButton(bar);
    forkButton->setText(tr("Fork"));
    forkButton->setMenu(m_forkMenu);
    forkButton->setPopupMode(QToolButton::InstantPopup);
    forkButton->setToolTip(tr("Branch a state: each branch continues with its own sampler seed"));
    bar->addWidget(forkButton);
    bar->addAction(tr("Restore…"), this, &SnapshotPanel::restoreSelected)
        ->setToolTip(tr("Verify the selected snapshot, then make it the live session"));
    bar->addAction(tr("Truncate"), this, &SnapshotPanel::truncateAtSelection)
        ->setToolTip(tr("Drop positions ≥ the selected position (tokens, cache, mask, positions)"));
    bar->addAction(tr("Patch…"), this, &SnapshotPanel::patchDialog)
        ->setToolTip(tr("Replace one layer's K/V (or one KV head's) with another snapshot's"));
    m_faultMenu = new QMenu(tr("Inject fault"), this);
    m_faultMenu->setToolTipsVisible(true);
    for (const auto& f : kvscope::state::allFaults()) {
        const QString name = QString::fromStdString(f.name);
        QAction* a = m_faultMenu->addAction(name, this, [this, name] { injectFault(name); });
        a->setToolTip(
            tr("%1 — verify names it as %2")
                .arg(QString::fromStdString(f.description), QString::fromStdString(f.check)));
        a->setObjectName(QStringLiteral("fault.") + name);
    }
    auto* faultButton = new QToolButton(bar);
    faultButton->setText(tr("Fault"));
    faultButton->setMenu(m_faultMenu);
    faultButton->setPopupMode(QToolButton::InstantPopup);
    faultButton->setToolTip(tr("The fault lab: a copy of the selected snapshot with a real "
                               "restore failure injected, and what verify says about it"));
    bar->addWidget(faultButton);
    bar->addAction(tr("Save…"), this, &SnapshotPanel::saveSelected);
    bar->addAction(tr("Open…"), this, &SnapshotPanel::openFileDialog);
    bar->addAction(tr("Export…"), this, &SnapshotPanel::exportSelected)
        ->setToolTip(tr("Export the selected snapshot to safetensors (for Python)"));
    layout->addWidget(bar);
    m_tree = new QTreeView(this);
    m_tree->setModel(m_model);
    m_tree->setUniformRowHeights(true);
    m_tree->header()->setSectionResizeMode(QHeaderView::ResizeToContents);
    layout->addWidget(m_tree, 1);
    m_details = new QLabel(this);
    m_details->setWordWrap(true);
    m_details->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(m_details);
    installExportMenu(m_tree,
                      {QStringLiteral("snapshots"), [this] { return m_tree->grab().toImage(); },
                       [this] { return m_model->toCsv(); }});

    connect(m_tree, &QTreeView::doubleClicked, this, &SnapshotPanel::restoreSelected);
    ledger->onAnswer<LedgerView>(this, [this](const LedgerViewPtr& l) {
        const QString keep = selectedId();
        m_model->setLedger(l);
        m_tree->expandAll();
        selectId(keep.isEmpty() ? l->currentId : keep);
    });
    connect(m_tree->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
            [this](const QModelIndex& index) {
                const SnapshotNode* n = m_model->node(index);
                if (!n) {
                    m_details->clear();
                    m_details->setToolTip(QString());
                    return;
                }
                // The operation's parameters as words; the JSON core recorded in the tooltip.
                const QString params = parametersText(n->parameters);
                m_details->setText(
                    tr("<b>%1</b> %2%3 · parent %4 · %5 · cache %6%7<br>…%8")
                        .arg(n->operation.toHtmlEscaped(), n->id,
                             params.isEmpty() ? QString()
                                              : QStringLiteral(" (%1)").arg(params.toHtmlEscaped()),
                             n->parentId.isEmpty() ? tr("none") : n->parentId.left(8),
                             countOf(int(n->tokens), tr("token"), tr("tokens")))
                        .arg(n->cacheLength)
                        .arg(n->file.isEmpty() ? QString()
                                               : QStringLiteral(" · ") + n->file.toHtmlEscaped())
                        .arg(n->preview.toHtmlEscaped()));
                m_details->setToolTip(n->parameters.isEmpty()
                                          ? QString()
                                          : tr("Parameters as recorded: %1").arg(n->parameters));
            });
    ledger->onAnswer<RestorePreview>(this, [this](const std::shared_ptr<const RestorePreview>& p) {
        // The dialog offers "Restore anyway" only for forceable errors; core refuses a
        // structural mismatch whatever is asked, naming the violations.
        const int decision = m_confirm ? m_confirm(*p->report) : askRestore(*p->report);
        if (decision > 0)
            m_ledger->request(req::Restore{p->id, decision == 2});
    });
}

QString SnapshotPanel::selectedId() const {
    const SnapshotNode* n = m_model->node(m_tree->currentIndex());
    return n ? n->id : QString();
}

void SnapshotPanel::selectId(const QString& id) {
    const QModelIndex index = m_model->indexOf(id);
    if (index.isValid())
        m_tree->setCurrentIndex(index);
}

void SnapshotPanel::takeSnapshot() {
    if (m_engine->hasModel())
        m_ledger->request(req::Snapshot{});
}

void SnapshotPanel::restoreSelected() {
    const QString id = selectedId();
    if (!id.isEmpty() && m_engine->hasModel())
        m_ledger->request(req::PreviewRestore{id});
}

void SnapshotPanel::truncateAtSelection() {
    if (m_engine->hasModel() && m_selection->position() >= 0)
        m_ledger->request(req::Truncate{m_selection->position()});
}

void SnapshotPanel::saveSelected() {
    const QString id = selectedId();
    if (id.isEmpty())
        return;
    const QString path = QFileDialog::getSaveFileName(
        this, tr("Save snapshot"), QDir(exportFolder()).filePath(id.left(8) + ".kvsnap"),
        tr("kvscope snapshots (*.kvsnap)"));
    if (path.isEmpty())
        return;
    rememberExportFolder(path);
    m_ledger->request(req::Save{id, path});
}

void SnapshotPanel::exportSelected() {
    const QString id = selectedId();
    if (id.isEmpty())
        return;
    const QString path =
        QFileDialog::getSaveFileName(this, tr("Export to safetensors"),
                                     QDir(exportFolder()).filePath(id.left(8) + ".safetensors"),
                                     tr("safetensors (*.safetensors)"));
    if (path.isEmpty())
        return;
    rememberExportFolder(path);
    m_ledger->request(req::ExportSafetensors{id, path});
}

void SnapshotPanel::openFileDialog() {
    const QString path = QFileDialog::getOpenFileName(
        this, tr("Open snapshot or llama.cpp state"), QString(),
        tr("Snapshots and other engines' states (*.kvsnap *.ggsq *.ggsn *.bin *.safetensors);;"
           "kvscope snapshots (*.kvsnap);;llama.cpp states (*.ggsq *.ggsn *.bin);;Hugging Face "
           "past_key_values (*.safetensors);;All files (*)"));
    if (!path.isEmpty())
        emit openRequested(path);
}

QString SnapshotPanel::restoreQuestion(const ValidationView& report) {
    using kvscope::state::Severity;
    const bool errors = report.report.hasErrors();
    const bool structural = report.report.hasStructural();
    QString text;
    if (structural)
        text = tr("<b>This state cannot be restored onto the loaded model.</b> Its structure "
                  "does not fit (a structural mismatch can never be forced):");
    else if (errors)
        text = tr("<b>Verification found %1.</b> The state can be restored for "
                  "diagnosis, but it will not continue like the original:")
                   .arg(countOf(report.count(Severity::Error), tr("error"), tr("errors")));
    else if (report.violations().empty())
        text = tr("Every invariant holds.");
    else // counted as the Validation panel counts them
        text = tr("No errors; %1, %2:")
                   .arg(countOf(report.count(Severity::Warning), tr("warning"), tr("warnings")),
                        countOf(report.count(Severity::Note), tr("note"), tr("notes")));
    // The state by name in the text too: without a window manager (or on some desktops) the
    // title bar is not shown.
    text = tr("<p>Restore <b>%1</b>.</p>").arg(report.subject.toHtmlEscaped()) + text;
    // The reasons first (structural, then errors, warnings, notes), a screenful at most: a
    // model of another size can fail dozens of fingerprint checks, and the dialog must keep
    // its buttons on the screen. The whole report is on the Validation panel.
    std::vector<kvscope::state::Violation> ordered = report.violations();
    std::stable_sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) {
        return std::pair(a.structural, int(a.severity)) > std::pair(b.structural, int(b.severity));
    });
    constexpr std::size_t kShown = 8;
    QString list;
    for (std::size_t i = 0; i < ordered.size() && i < kShown; ++i) {
        const auto& v = ordered[i];
        QString message = QString::fromStdString(v.message);
        if (message.size() > 400) // a screenful stays a screenful; the panel has it whole
            message = message.left(397) + QStringLiteral("…");
        // Where it is, set apart from the message ("... offset by 1 layer 0, position 0" read
        // as one sentence).
        const QString where = ViolationModel::where(v);
        list += QStringLiteral("<li><b>[%1]</b> %2%3: %4%5</li>")
                    .arg(severityText(rankOf(v.severity)), QString::fromStdString(v.id),
                         v.structural ? tr(" (structural)") : QString(), message.toHtmlEscaped(),
                         where.isEmpty() ? QString() : tr(" <i>(at %1)</i>").arg(where));
    }
    if (ordered.size() > kShown)
        list += tr("<li>… and %1 more (the whole report is on the Validation panel)</li>")
                    .arg(ordered.size() - kShown);
    if (!list.isEmpty())
        text += QStringLiteral("<ul>%1</ul>").arg(list);
    if (!report.equivalenceText.isEmpty())
        text += QStringLiteral("<p>%1</p>").arg(report.equivalenceText.toHtmlEscaped());
    return text;
}

int SnapshotPanel::askRestore(const ValidationView& report) {
    // The verdict is shown inline (it is the reason for the decision), from the same report as
    // the Validation panel. Structural violations can never be forced; semantic errors may
    // be, but "Restore anyway" is never the default button.
    QMessageBox box(this);
    box.setWindowTitle(tr("Restore %1").arg(report.subject));
    box.setTextFormat(Qt::RichText);
    const bool errors = report.report.hasErrors();
    const bool structural = report.report.hasStructural();
    box.setIcon(structural ? QMessageBox::Critical
                           : (errors ? QMessageBox::Warning : QMessageBox::Question));
    const QString text = restoreQuestion(report);
    box.setText(text);
    QPushButton* restore = errors ? nullptr : box.addButton(tr("Restore"), QMessageBox::AcceptRole);
    QPushButton* force = report.report.forceable()
                             ? box.addButton(tr("Restore anyway"), QMessageBox::DestructiveRole)
                             : nullptr;
    QPushButton* cancel = box.addButton(structural ? QMessageBox::Close : QMessageBox::Cancel);
    if (force)
        force->setAutoDefault(false);
    box.setDefaultButton(restore ? restore : cancel);
    box.setEscapeButton(cancel);
    box.exec();
    if (restore && box.clickedButton() == restore)
        return 1;
    if (force && box.clickedButton() == force)
        return 2;
    return 0;
}

void SnapshotPanel::forkSelected(int branches, int steps) {
    const QString id = selectedId();
    if (!id.isEmpty() && m_engine->hasModel())
        m_ledger->request(req::Fork{id, branches, steps});
}

void SnapshotPanel::patchSelectedFrom(const QString& source, int layer, int head) {
    const QString id = selectedId();
    if (!id.isEmpty() && !source.isEmpty())
        m_ledger->request(req::Patch{id, source, layer, head});
}

void SnapshotPanel::patchDialog() {
    const QString target = selectedId();
    const LedgerViewPtr ledger = m_ledger->ledger();
    if (target.isEmpty() || !ledger || ledger->nodes.size() < 2)
        return;
    QDialog dialog(this);
    dialog.setWindowTitle(tr("Patch %1").arg(m_ledger->label(target)));
    auto* form = new QFormLayout(&dialog);
    auto* source = new QComboBox(&dialog);
    for (const auto& n : ledger->nodes)
        if (n.id != target)
            source->addItem(QStringLiteral("%1 %2 · %3")
                                .arg(n.operation, n.id.left(8),
                                     countOf(int(n.tokens), tr("token"), tr("tokens"))),
                            n.id);
    auto* layer = new QSpinBox(&dialog);
    layer->setRange(0, std::max(0, m_engine->model().layers - 1));
    auto* head = new QSpinBox(&dialog);
    head->setRange(-1, std::max(0, m_engine->model().kvHeads - 1));
    head->setSpecialValueText(tr("all KV heads"));
    head->setValue(-1);
    form->addRow(tr("K/V from"), source);
    form->addRow(tr("Layer"), layer);
    form->addRow(tr("KV head"), head);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, &dialog);
    connect(buttons, &QDialogButtonBox::accepted, &dialog, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
    form->addRow(buttons);
    if (dialog.exec() == QDialog::Accepted)
        patchSelectedFrom(source->currentData().toString(), layer->value(), head->value());
}

void SnapshotPanel::injectFault(const QString& name) {
    const QString id = selectedId();
    if (!id.isEmpty() && m_engine->hasModel())
        m_ledger->request(req::InjectFault{id, name});
}

} // namespace kvscope::widgets
