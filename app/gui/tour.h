// The guided tour (Help ▸ Guided tour): six short steps that drive the real panels on the
// loaded model (the bundled demo model when none is loaded) — the cache grows one column per
// token; the model looks back (a passage that repeats a sentence, the induction probe on it
// and its strongest head's attention pattern); snapshot and restore (drift flat at zero);
// truncate and continue; inject "position offset by one" and watch validation and drift; fork
// and diff two branches.
//
// A step is a script of engine/ledger operations run one after another: each operation is
// started when the engine is idle again after the previous one (the engine runs one request
// at a time), so a step never races its own results. The tour lives in a dock with the
// step's explanation and Back / Run this step / Next; tests call runStep() and wait for
// stepFinished().
#pragma once

#include <QString>
#include <QWidget>

#include <functional>
#include <vector>

class QLabel;
class QPushButton;

namespace kvscope::gui {

class MainWindow;

class Tour : public QWidget {
    Q_OBJECT
public:
    explicit Tour(MainWindow* window, QWidget* parent = nullptr);

    int stepCount() const { return int(m_steps.size()); }
    int currentStep() const { return m_current; }
    QString stepTitle(int step) const;
    bool isRunning() const { return !m_queue.empty() || m_waiting; }

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
        QString text;                // rich text shown in the dock
        std::function<void()> build; // fills m_queue with the step's operations
    };
    void buildSteps();
    void enqueue(std::function<void()> op);
    void pump();
    void finish(bool ok);
    // The tour's own ids: snapshots made by earlier steps.
    QString newestNode(const QString& operation) const;
    bool demoModelLoaded() const;
    QString prompt() const;
    // A passage whose sentence is repeated: the second time, a model that reads its cache can
    // copy it (the induction step).
    QString repeatedPassage() const;

    MainWindow* m_window;
    std::vector<Step> m_steps;
    int m_current = 0;
    int m_running = -1;
    std::vector<std::function<void()>> m_queue;
    bool m_waiting = false;
    bool m_failed = false;
    QString m_clean, m_restored, m_fault; // node ids the steps remember
    QLabel* m_title;
    QLabel* m_text;
    QLabel* m_status;
    QPushButton* m_back;
    QPushButton* m_run;
    QPushButton* m_next;
};

} // namespace kvscope::gui
