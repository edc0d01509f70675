// InductionPanel ("Induction"): does the model look back at its context, and which heads do
// it (core/state/probes/induction.h)? A text to probe (empty: a random segment of ordinary tokens
// fed twice, with its length and seed), Run, and "Use the live session's text". The result: a
// one-line summary (the copy losses, or how well the tokens that occurred earlier in the text
// were predicted), every head sorted by induction score (with its previous-token score), and
// for a text the recalled tokens with their rank and probability. Selecting a head selects its
// layer and asks for its query head in the Attention panel (headSelected()). Both tables
// export CSV/PNG from the context menu and copy themselves as CSV.
//
// InductionHeadModel and InductionRecallModel are the two tables' read-only item models,
// reset wholesale when a new report arrives. GUI thread only.
#pragma once

#include "statedata.h"

#include <QAbstractTableModel>
#include <QWidget>

class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;
class QTableView;

namespace kvscope::widgets {

class EngineController;
class LedgerController;
class Selection;

// Every head of a report in core's ranking (InductionReport::byInduction: highest induction
// score first, ties in layer-major order).
class InductionHeadModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { Layer, Head, Induction, PreviousToken, ColumnCount };
    // Scores are attention probabilities in [0, 1]; ScoreRole gives the raw double.
    static constexpr int ScoreRole = Qt::UserRole + 1;
    using QAbstractTableModel::QAbstractTableModel;

    void setReport(InductionViewPtr report);
    const InductionViewPtr& report() const { return m_report; }
    // The head shown in `row` (sorted order); row must be valid.
    const kvscope::state::HeadScore& head(int row) const { return m_rows[size_t(row)]; }
    // The row of (layer, head), or -1.
    int rowOf(int layer, int head) const;

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

    QString toCsv() const;

private:
    InductionViewPtr m_report;
    std::vector<kvscope::state::HeadScore> m_rows;
};

// The tokens of a probed text that occurred earlier in it, in text order.
class InductionRecallModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { Position, Token, Earlier, Rank, Probability, ColumnCount };
    using QAbstractTableModel::QAbstractTableModel;

    void setReport(InductionViewPtr report);
    const InductionViewPtr& report() const { return m_report; }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

    QString toCsv() const;

private:
    InductionViewPtr m_report;
};

class InductionPanel : public QWidget {
    Q_OBJECT
public:
    InductionPanel(EngineController* engine, LedgerController* ledger, Selection* selection,
                   QWidget* parent = nullptr);

    InductionHeadModel* headModel() const { return m_heads; }
    InductionRecallModel* recallModel() const { return m_recall; }
    QTableView* headTable() const { return m_headTable; }
    InductionViewPtr report() const { return m_heads->report(); }
    QString summary() const;

    // Probe inputs: empty text = the random segment.
    void setText(const QString& text);
    void setSegment(int length, quint64 seed);
    // The live session's tokens as text (special tokens left out); empty without a session.
    QString liveText() const;

public slots:
    void run();
    // Fills the text field with liveText().
    void useLiveText();
    // Selects the row of (layer, head); false when the report has no such head.
    bool selectHead(int layer, int head);
    // Selects the head with the highest induction score (the first row).
    bool selectStrongest();

signals:
    // A head row was selected: its layer is now the Selection's; show its query head.
    void headSelected(int layer, int queryHead);

private:
    void showReport(const InductionViewPtr& report);
    void onRowSelected(int row);

    EngineController* m_engine;
    LedgerController* m_ledger;
    Selection* m_selection;
    InductionHeadModel* m_heads;
    InductionRecallModel* m_recall;
    QLineEdit* m_text;
    QPushButton* m_useLive;
    QSpinBox* m_length;
    QSpinBox* m_seed;
    QLabel* m_summary;
    QTableView* m_headTable;
    QTableView* m_recallTable;
};

} // namespace kvscope::widgets
