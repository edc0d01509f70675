#include "validationpanel.h"

#include "exportmenu.h"
#include "ledgercontroller.h"
#include "selection.h"
#include "violationmodel.h"

#include <QHeaderView>
#include <QLabel>
#include <QSplitter>
#include <QTableView>
#include <QTextBrowser>
#include <QVBoxLayout>

namespace kvscope::widgets {

ValidationPanel::ValidationPanel(LedgerController* ledger, Selection* selection, QWidget* parent)
    : QWidget(parent), m_selection(selection), m_model(new ViolationModel(this)) {
    auto* layout = new QVBoxLayout(this);
    m_header = new QLabel(tr("No report yet"), this);
    m_header->setWordWrap(true);
    layout->addWidget(m_header);
    auto* split = new QSplitter(Qt::Vertical, this);
    m_table = new QTableView(split);
    m_table->setModel(m_model);
    m_table->verticalHeader()->hide();
    m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_table->setSelectionMode(QAbstractItemView::SingleSelection);
    m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    m_table->horizontalHeader()->setSectionResizeMode(ViolationModel::MessageColumn,
                                                      QHeaderView::Stretch);
    m_explanation = new QTextBrowser(split);
    m_explanation->setPlaceholderText(tr("Select a violation to read what it means"));
    split->addWidget(m_table);
    split->addWidget(m_explanation);
    // Three rows and two lines at the least (each view asks for 70 px): this dock shares the
    // fork tree's tab group, which with the session's sets the window's minimum height.
    const int line = fontMetrics().lineSpacing();
    m_table->setMinimumHeight(4 * line);
    m_explanation->setMinimumHeight(2 * line + 8);
    split->setStretchFactor(0, 3);
    split->setStretchFactor(1, 1);
    layout->addWidget(split, 1);
    installExportMenu(m_table, {QStringLiteral("validation"), [this] { return grab().toImage(); },
                                [this] { return m_model->toCsv(); }});

    connect(m_table->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
            [this](const QModelIndex& current) {
                if (!current.isValid()) {
                    m_explanation->clear();
                    return;
                }
                const auto& v = m_model->violation(current.row());
                auto html = [](const std::string& t) {
                    return QString::fromStdString(t).toHtmlEscaped();
                };
                m_explanation->setHtml(
                    QStringLiteral("<b>%1</b> (%2, %3%4)<br>%5<p>%6</p>")
                        .arg(html(v.id), severityText(rankOf(v.severity)), html(v.item),
                             v.structural ? tr(", structural: can never be forced") : QString(),
                             html(v.message), html(v.explanation)));
                if (v.layer >= 0 || v.head >= 0 || v.position >= 0)
                    m_selection->set(v.layer, v.head,
                                     v.position >= 0 ? v.position : m_selection->position());
            });
    ledger->onAnswer<ValidationView>(this, &ValidationPanel::showReport);
}

void ValidationPanel::showReport(const ValidationViewPtr& report) {
    m_model->setReport(report);
    m_explanation->clear();
    const QColor color = ViolationModel::severityColor(report->worst());
    QString text =
        tr("<span style='color:%1'>●</span> <b>%2</b>: %3")
            .arg(color.name(), report->subject.toHtmlEscaped(), severityCounts(report->report));
    if (report->violations().empty())
        text += tr(" — every invariant holds");
    if (!report->equivalenceText.isEmpty())
        text += QStringLiteral("<br>") + report->equivalenceText.toHtmlEscaped();
    m_header->setText(text);
}

} // namespace kvscope::widgets
