// The guided tour (Help ▸ Guided tour): eight short steps that drive the real panels on the
// loaded model (the bundled demo model when none is loaded) — the cache grows one column per
// token; the model looks back (a passage that repeats a sentence, the induction probe on it
// and its strongest head's attention pattern); snapshot and restore (drift flat at zero);
// truncate and continue; inject "position offset by one" and watch validation and drift; fork
// and diff two branches; replay against restore; an MLP ablation against the cache.
//
// It is a curated path through eight claims of the insights lab (core/insights): each step
// names one insight and, after its own operations, runs that insight's experiment on the
// loaded model (the Insights panel's Run); the verdict and its explanation, as core computed
// them, appear under the step's text. The last two steps are those experiments alone: they
// open the experiment's evidence in the Diff panel (InsightsPanel::showEvidence).
//
// A step is a script of engine/ledger operations run one after another: each operation is
// started when the engine is idle again after the previous one (the engine runs one request
// at a time), so a step never races its own results; a pause between operations paces what
// is meant to be watched (the first step's tokens, one column every ~200 ms). Showing a step
// brings the panels it talks about to the front. A step that runs its own prompt asks first
// when the live session holds tokens the tour did not make (snapshot it, replace it, or
// cancel). The tour lives in a dock with the step's explanation (it scrolls, never cut off)
// and Back / Run this step / Next; tests call runStep() and wait for stepFinished().
#pragma once

#include <QString>
#include <QStringList>
#include <QWidget>

#include <cstdint>

#include <functional>
#include <vector>

class QLabel;
class QPushButton;
class QScrollArea;

namespace kvscope::gui {

class MainWindow;

class Tour : public QWidget {
    Q_OBJECT
public:
    explicit Tour(MainWindow* window, QWidget* parent = nullptr);

    int stepCount() const { return int(m_steps.size()); }
    int currentStep() const { return m_current; }
    // The status line under the step on screen.
    QString statusText() const;
    // The step's text on screen (with the verdict of its insight on this model, once run).
    QString shownText() const;
    QString stepTitle(int step) const;
    bool isRunning() const { return !m_queue.empty() || m_waiting || m_sleeping; }
    // The object names of the docks step `step` talks about (raised when it is shown).
    QStringList stepDocks(int step) const;
    // Whether step `step` runs its own prompt, replacing the live session.
    bool stepReplacesSession(int step) const;
    // The insight step `step` tests (1..80).
    int stepInsight(int step) const;

    // What to do with a session of the user's before a step replaces it.
    enum class ReplaceChoice { Cancel, SnapshotFirst, Replace };
    // Asked with the live session's token count; by default a dialog (tests set their own).
    using ReplaceConfirmation = std::function<ReplaceChoice(qint64 tokens)>;
    void setReplaceConfirmation(ReplaceConfirmation confirm) { m_confirm = std::move(confirm); }
    // Pause between the paced operations of a step (ms); tests may shorten it.
    static constexpr int kPaceMs = 200;

public slots:
    void showStep(int step);
    // Runs step `step` (shows it first); stepFinished(step, ok) follows.
    void runStep(int step);
    void next();
    void back();

signals:
    void stepFinished(int step, bool ok);

private:
    struct Step {
        QString title;
        QString text;                 // rich text shown in the dock
        std::function<void()> build;  // fills m_queue with the step's operations
        QStringList docks;            // the panels the text talks about
        bool replacesSession = false; // runs its own prompt
        int insight = 0;              // the insight whose experiment ends the step
        bool openEvidence = false;    // and whose evidence it then opens
        // Fills m_queue with operations on the evidence, once it is on screen.
        std::function<void()> afterEvidence;
    };
    // The step's text with its insight: the claim, and the verdict once the experiment ran.
    QString stepText(int step) const;
    void buildSteps();
    void enqueue(std::function<void()> op);
    // A pause of `ms` before the next queued operation (the engine is idle meanwhile).
    void enqueuePause(int ms);
    void raiseDocks(const QStringList& docks);
    // Whether the live session holds tokens that the tour's own steps did not make.
    bool sessionIsUsers() const;
    ReplaceChoice askReplace(qint64 tokens);
    void pump();
    void finish(bool ok);
    // The tour's own ids: snapshots made by earlier steps.
    QString newestNode(const QString& operation) const;
    bool demoModelLoaded() const;
    QString prompt() const;
    // A passage whose sentence is repeated: the second time, a model that reads its cache can
    // copy it (the induction step).
    QString repeatedPassage() const;

    // Records `text` as `step`'s status; shown when that step is the one on screen.
    void setStatus(int step, const QString& text);
    // The status of the running step, or of the one on screen when none runs.
    void setStatus(const QString& text) { setStatus(m_running >= 0 ? m_running : m_current, text); }

    MainWindow* m_window;
    std::vector<Step> m_steps;
    int m_current = 0;
    int m_running = -1;
    std::vector<std::function<void()>> m_queue;
    bool m_waiting = false;
    bool m_sleeping = false; // in a pause (enqueuePause)
    bool m_failed = false;
    uint64_t m_ownRevision = 0; // the state revision the tour's last step left
    bool m_hasOwnRevision = false;
    ReplaceConfirmation m_confirm;
    QString m_clean, m_restored, m_fault; // node ids the steps remember
    QLabel* m_title;
    QLabel* m_text;
    QScrollArea* m_textArea;
    QLabel* m_status;
    // Each step's last status line ("Running…", "Done.", a failure): shown with its step only,
    // so that moving on does not show the previous step's "Done" under one not yet run.
    std::vector<QString> m_statusOf;
    QPushButton* m_back;
    QPushButton* m_run;
    QPushButton* m_next;
};

} // namespace kvscope::gui
