#include "tour.h"

#include "mainwindow.h"

#include "enginecontroller.h"
#include "util/demomodel.h"
#include "driftpanel.h"
#include "inductionpanel.h"
#include "insightspanel.h"
#include "insights/registry.h"
#include "ledgercontroller.h"
#include "sessionpanel.h"
#include "statedata.h"

#include <QDockWidget>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QMessageBox>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QTimer>
#include <QVBoxLayout>

namespace kvscope::gui {

using widgets::EngineController;

Tour::Tour(MainWindow* window, QWidget* parent) : QWidget(parent), m_window(window) {
    auto* layout = new QVBoxLayout(this);
    m_title = new QLabel(this);
    QFont f = m_title->font();
    f.setBold(true);
    f.setPointSizeF(f.pointSizeF() * 1.2);
    m_title->setFont(f);
    m_title->setWordWrap(true); // a narrow dock wraps the title instead of cutting it
    m_text = new QLabel;
    m_text->setWordWrap(true);
    m_text->setTextFormat(Qt::RichText);
    m_text->setAlignment(Qt::AlignTop | Qt::AlignLeft);
    m_text->setContentsMargins(0, 0, 4, 0);
    // The explanation scrolls when the dock is short (a laptop screen): never cut off.
    m_textArea = new QScrollArea(this);
    m_textArea->setWidget(m_text);
    m_textArea->setWidgetResizable(true);
    m_textArea->setFrameShape(QFrame::NoFrame);
    m_textArea->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    m_textArea->setMinimumHeight(m_text->fontMetrics().lineSpacing() * 3);
    m_status = new QLabel(this);
    m_status->setWordWrap(true);
    // A line kept for the status whether or not it has text, so that the step's text above
    // does not shift when a step reports. (The buttons' 18 px jump after the first step came
    // from the session panel's token legend in the same tab group: see tokenstrip.cpp.)
    m_status->setMinimumHeight(m_status->fontMetrics().lineSpacing());
    auto* buttons = new QHBoxLayout;
    m_back = new QPushButton(tr("◀ Back"), this);
    m_run = new QPushButton(tr("Run this step"), this);
    m_next = new QPushButton(tr("Next ▶"), this);
    m_run->setDefault(true);
    buttons->addWidget(m_back);
    buttons->addStretch();
    buttons->addWidget(m_run);
    buttons->addWidget(m_next);
    layout->addWidget(m_title);
    layout->addWidget(m_textArea, 1);
    layout->addWidget(m_status);
    layout->addLayout(buttons);
    connect(m_back, &QPushButton::clicked, this, &Tour::back);
    connect(m_next, &QPushButton::clicked, this, &Tour::next);
    connect(m_run, &QPushButton::clicked, this, [this] { runStep(m_current); });
    // The next operation of a running step starts when the engine is idle again.
    connect(window->engine(), &EngineController::busyChanged, this, [this](bool busy) {
        if (!busy && m_waiting) {
            m_waiting = false;
            QTimer::singleShot(0, this, &Tour::pump);
        }
    });
    // Another model: the verdicts and "Done" lines were about the one before (the Insights
    // panel clears its results on the same signal; queued so that it has).
    connect(
        window->engine(), &EngineController::modelLoaded, this,
        [this] {
            std::vector<QString> kept(
                static_cast<size_t>(stepCount())); // a running step keeps its line
            if (m_running >= 0 && size_t(m_running) < m_statusOf.size())
                kept[size_t(m_running)] = m_statusOf[size_t(m_running)];
            m_statusOf = std::move(kept);
            m_text->setText(stepText(m_current));
            if (m_running < 0 || m_running == m_current)
                m_status->setText(m_statusOf[size_t(m_current)]);
        },
        Qt::QueuedConnection);
    connect(window->engine(), &EngineController::operationFinished, this,
            [this](const widgets::OperationResult& r) {
                if (m_running < 0)
                    return;
                if (!r.ok)
                    m_failed = true;
                setStatus(QStringLiteral("%1%2").arg(r.ok ? QString() : tr("Failed: "), r.message));
            });
    // A step's experiment has a verdict: it goes under the step's text.
    window->ledger()->onAnswer<widgets::InsightView>(
        this, [this](const widgets::InsightViewPtr& v) {
            if (v && v->number == stepInsight(m_current))
                m_text->setText(stepText(m_current));
        });
    // "Open in Insights" under a step's text.
    connect(m_text, &QLabel::linkActivated, this, [this](const QString& link) {
        if (!link.startsWith(QLatin1String("insight:")))
            return;
        m_window->insightsPanel()->select(link.mid(8).toInt());
        raiseDocks({QStringLiteral("dock.insights")});
    });
    buildSteps();
    showStep(0);
}

int Tour::stepInsight(int step) const {
    return step >= 0 && step < stepCount() ? m_steps[size_t(step)].insight : 0;
}

QString Tour::stepText(int step) const {
    const Step& s = m_steps[size_t(step)];
    const insights::Insight* i = insights::findInsight(s.insight);
    if (!i)
        return s.text;
    QString text = s.text + tr("<p><b>Insight #%1</b> (tier %2): <i>%3</i></p>")
                                .arg(i->number)
                                .arg(i->tier)
                                .arg(QString::fromStdString(i->claim).toHtmlEscaped());
    const auto r = m_window->insightsPanel()->result(i->number);
    if (!r)
        return text + tr("<p>The step ends with this claim's experiment on the loaded model; "
                         "its verdict appears here.</p>");
    const QString verdict = QString::fromStdString(insights::verdictName(r->result.verdict));
    return text + tr("<p>Verdict on this model: <b>%1</b>. %2 <a href=\"insight:%3\">Open in "
                     "Insights</a></p>")
                      .arg(verdict, QString::fromStdString(r->result.why).toHtmlEscaped())
                      .arg(i->number);
}

QString Tour::stepTitle(int step) const {
    return step >= 0 && step < stepCount() ? m_steps[size_t(step)].title : QString();
}

QStringList Tour::stepDocks(int step) const {
    return step >= 0 && step < stepCount() ? m_steps[size_t(step)].docks : QStringList();
}

bool Tour::stepReplacesSession(int step) const {
    return step >= 0 && step < stepCount() && m_steps[size_t(step)].replacesSession;
}

void Tour::raiseDocks(const QStringList& docks) {
    for (const QString& name : docks)
        if (QDockWidget* d = m_window->dock(name)) {
            d->show();
            d->raise();
        }
}

void Tour::showStep(int step) {
    m_current = std::clamp(step, 0, stepCount() - 1);
    const Step& s = m_steps[size_t(m_current)];
    m_title->setText(tr("Step %1 of %2 · %3").arg(m_current + 1).arg(stepCount()).arg(s.title));
    m_text->setText(stepText(m_current));
    m_textArea->verticalScrollBar()->setValue(0);
    m_back->setEnabled(m_current > 0);
    m_next->setEnabled(m_current + 1 < stepCount());
    m_statusOf.resize(size_t(stepCount()));
    m_status->setText(m_running >= 0 && m_running != m_current
                          ? tr("Step %1 is running…").arg(m_running + 1)
                          : m_statusOf[size_t(m_current)]);
    // The panels the text talks about, in front (each tab group shows one of them).
    if (m_window->engine()->hasModel())
        raiseDocks(s.docks);
}

QString Tour::statusText() const {
    return m_status->text();
}

QString Tour::shownText() const {
    return m_text->text();
}

void Tour::setStatus(int step, const QString& text) {
    if (step < 0 || step >= stepCount())
        return;
    m_statusOf.resize(size_t(stepCount()));
    m_statusOf[size_t(step)] = text;
    if (step == m_current)
        m_status->setText(text);
}

void Tour::next() {
    showStep(m_current + 1);
}

void Tour::back() {
    showStep(m_current - 1);
}

bool Tour::sessionIsUsers() const {
    const auto st = m_window->engine()->state();
    if (!st || st->tokens.empty())
        return false;
    return !m_hasOwnRevision || st->revision != m_ownRevision;
}

Tour::ReplaceChoice Tour::askReplace(qint64 tokens) {
    if (m_confirm)
        return m_confirm(tokens);
    switch (MainWindow::askKeepSession(
        window(), tr("Guided tour"),
        tr("This step runs its own prompt and replaces the live session (%1).")
            .arg(widgets::countOf(int(tokens), tr("token"), tr("tokens"))),
        tr("Keep a snapshot of it first? It stays in the fork tree (Snapshots panel), and "
           "Restore brings it back."),
        tr("Snapshot, then run"), tr("Replace it"))) {
    case MainWindow::LeaveChoice::Snapshot:
        return ReplaceChoice::SnapshotFirst;
    case MainWindow::LeaveChoice::Discard:
        return ReplaceChoice::Replace;
    default:
        return ReplaceChoice::Cancel;
    }
}

void Tour::runStep(int step) {
    if (isRunning() || step < 0 || step >= stepCount())
        return;
    showStep(step);
    // The user's own session is never replaced without asking.
    ReplaceChoice choice = ReplaceChoice::Replace;
    if (m_steps[size_t(step)].replacesSession && sessionIsUsers()) {
        choice = askReplace(qint64(m_window->engine()->state()->tokens.size()));
        if (choice == ReplaceChoice::Cancel) {
            setStatus(tr("Not run: your session is as it was."));
            emit stepFinished(step, false);
            return;
        }
    }
    m_running = step;
    m_failed = false;
    setStatus(tr("Running…"));
    m_run->setEnabled(false);
    if (choice == ReplaceChoice::SnapshotFirst) {
        widgets::LedgerController* ledger = m_window->ledger();
        enqueue([ledger] { ledger->request(widgets::req::Snapshot{}); });
    }
    m_steps[size_t(step)].build();
    // The step's insight: its experiment on the loaded model (the Insights panel runs it and
    // keeps the result; the verdict shows under the text), then, for the steps that are the
    // experiment alone, its evidence in the panel it names.
    if (const int n = m_steps[size_t(step)].insight) {
        widgets::InsightsPanel* insights = m_window->insightsPanel();
        enqueue([insights, n] {
            insights->select(n);
            insights->run();
        });
        if (m_steps[size_t(step)].openEvidence)
            enqueue([insights] { insights->showEvidence(); });
        if (m_steps[size_t(step)].afterEvidence)
            m_steps[size_t(step)].afterEvidence();
    }
    pump();
}

void Tour::enqueue(std::function<void()> op) {
    m_queue.push_back(std::move(op));
}

void Tour::enqueuePause(int ms) {
    enqueue([this, ms] {
        m_sleeping = true;
        QTimer::singleShot(ms, this, [this] {
            m_sleeping = false;
            pump();
        });
    });
}

void Tour::pump() {
    EngineController* engine = m_window->engine();
    while (!m_queue.empty() && !m_waiting && !m_sleeping) {
        if (m_failed)
            return finish(false);
        auto op = std::move(m_queue.front());
        m_queue.erase(m_queue.begin());
        op();
        if (engine->isBusy())
            m_waiting = true; // continue on busyChanged(false)
    }
    if (m_queue.empty() && !m_waiting && !m_sleeping && m_running >= 0)
        finish(!m_failed);
}

void Tour::finish(bool ok) {
    m_queue.clear();
    m_waiting = false;
    m_sleeping = false;
    const int step = m_running;
    m_running = -1;
    m_run->setEnabled(true);
    // What the tour left is the tour's: the next step may replace it without asking.
    if (const auto st = m_window->engine()->state()) {
        m_ownRevision = st->revision;
        m_hasOwnRevision = true;
    }
    if (ok)
        setStatus(step, tr("Done. %1")
                            .arg(step + 1 < stepCount() ? tr("Next ▶ when ready.")
                                                        : tr("That is the tour.")));
    if (step != m_current) // the user moved on while it ran: that step's own line
        m_status->setText(m_statusOf[size_t(m_current)]);
    emit stepFinished(step, ok);
}

QString Tour::newestNode(const QString& operation) const {
    if (auto l = m_window->ledger()->ledger())
        for (auto it = l->nodes.rbegin(); it != l->nodes.rend(); ++it)
            if (it->operation == operation)
                return it->id;
    return {};
}

bool Tour::demoModelLoaded() const {
    const auto demo = findDemoModel();
    const QString path = m_window->engine()->model().path;
    return demo && !path.isEmpty() &&
           QFileInfo(path).canonicalFilePath() ==
               QFileInfo(QString::fromStdString(*demo)).canonicalFilePath();
}

QString Tour::prompt() const {
    // The bundled model speaks the King James Bible; another model's card may name its own
    // example; checkpoints like stories260K (no card) know children's stories.
    if (demoModelLoaded())
        return QStringLiteral("And Moses said unto Aaron");
    if (const QString example = m_window->sessionPanel()->examplePrompt(); !example.isEmpty())
        return example;
    return QStringLiteral("Once upon a time, there was a little girl named Lily");
}

QString Tour::repeatedPassage() const {
    // A rare name and a sentence the model has not seen, then the sentence again up to a
    // point: only the cache tells the model how it goes on.
    if (demoModelLoaded())
        return QStringLiteral("And Jabez called on the God of Israel, saying, Oh that thou "
                              "wouldest bless me indeed. And Jabez called on the God of Israel, "
                              "saying,");
    return QStringLiteral("Once upon a time, there was a little fox named Pip. Pip found a shiny "
                          "red stone in the park. Once upon a time, there was a little fox named "
                          "Pip. Pip found");
}

void Tour::buildSteps() {
    MainWindow* w = m_window;
    EngineController* engine = w->engine();
    auto raise = [w](const char* dock) {
        if (QDockWidget* d = w->dock(QString::fromLatin1(dock))) {
            d->show();
            d->raise();
        }
    };
    auto greedy = [] {
        kvscope::SamplerSettings o;
        o.temperature = 0;
        return o;
    };
    // A step that needs a model opens the bundled one when none is loaded.
    auto ensureModel = [this, engine, w] {
        if (engine->hasModel())
            return;
        enqueue([this, w] {
            const auto demo = findDemoModel();
            if (!demo) {
                m_failed = true;
                setStatus(tr("No model is loaded and the bundled demo model was not "
                             "found: open a model first."));
                return;
            }
            w->openPath(QString::fromStdString(*demo));
        });
    };

    // The tour's prompt, then `steps` greedy tokens.
    auto tourPrompt = [this](int steps) {
        widgets::PromptRequest r;
        r.prompt.text = prompt().toStdString();
        r.steps = steps;
        r.sampler.temperature = 0;
        return r;
    };
    // A step that works on the live session feeds the tour's prompt (and eight greedy tokens)
    // when there is none: run on its own, "snapshot the session" had nothing to snapshot and
    // the drift failed on an empty state.
    auto ensureSession = [this, engine, ensureModel, tourPrompt] {
        ensureModel();
        enqueue([this, engine, tourPrompt] {
            if (engine->state() && !engine->state()->tokens.empty())
                return;
            setStatus(tr("No session yet: feeding the tour's prompt first."));
            engine->runPrompt(tourPrompt(8));
        });
    };

    m_steps.push_back(
        {tr("The cache grows one column per token"),
         tr("<p>A transformer does not re-read its prompt for every new token: it keeps the keys "
            "and values of every token it has seen — the <b>KV cache</b> — and each new token "
            "attends to them.</p><p>This step feeds a short prompt, then generates eight tokens "
            "one at a time, slowly enough to watch. In the <b>KV heatmaps</b> (layer × position) "
            "every token adds one column to every layer, and the <b>Position alignment</b> panel "
            "shows each cached token's position.</p>"),
         [this, engine, raise, greedy, ensureModel, tourPrompt] {
             ensureModel();
             enqueue([this, engine, raise, tourPrompt] {
                 engine->runPrompt(tourPrompt(0));
                 raise("dock.kv");
                 raise("dock.positions");
             });
             // One token, one column, then a pause: the cache grows at a pace one can follow.
             constexpr int kTokens = 8;
             for (int i = 1; i <= kTokens; ++i) {
                 enqueuePause(kPaceMs);
                 enqueue([engine, greedy] { engine->step(greedy()); });
                 enqueue([this, i] {
                     setStatus(
                         tr("Token %1 of %2: one more column in every layer.").arg(i).arg(kTokens));
                 });
             }
         },
         {QStringLiteral("dock.kv"), QStringLiteral("dock.positions")},
         true,
         19});

    widgets::LedgerController* ledger = w->ledger();
    m_steps.push_back(
        {tr("The model looks back: induction heads"),
         tr("<p>The cache is what lets a model reuse its context. This step feeds a passage that "
            "names someone and then repeats its sentence, and generates eight tokens. A model that "
            "reads its cache ranks the repeated tokens far above new ones (the <b>Induction</b> "
            "panel lists each with its rank); a large one goes on exactly as the sentence "
            "went before.</p><p>An <b>induction "
            "head</b> attends from a repeated token to the token <i>after</i> its earlier "
            "occurrence — the continuation to copy. The <b>Induction</b> panel scores every head "
            "on the passage; the strongest is selected and the <b>Attention</b> panel shows it: "
            "in the second copy, an off-diagonal stripe.</p>"),
         [this, engine, w, ledger, raise, greedy, ensureModel] {
             ensureModel();
             enqueue([this, engine] {
                 widgets::PromptRequest r;
                 r.prompt.text = repeatedPassage().toStdString();
                 r.steps = 0;
                 r.sampler.temperature = 0;
                 engine->runPrompt(r);
             });
             enqueue([engine, greedy] { engine->generate(8, greedy()); });
             enqueue([this, ledger, w, raise] {
                 w->inductionPanel()->setText(repeatedPassage());
                 raise("dock.induction");
                 ledger->request(widgets::req::Induction{repeatedPassage(), 32, 1});
             });
             // The report has arrived (it is emitted before the probe's operation ends).
             enqueue([this, w, raise] {
                 if (!w->inductionPanel()->selectStrongest()) {
                     m_failed = true;
                     setStatus(tr("The induction probe gave no heads."));
                     return;
                 }
                 raise("dock.induction");
                 raise("dock.attention");
             });
         },
         {QStringLiteral("dock.induction"), QStringLiteral("dock.attention")},
         true,
         8});

    m_steps.push_back(
        {tr("Snapshot and restore: drift stays at zero"),
         tr("<p>A <b>snapshot</b> records the whole state needed to continue: the cache of every "
            "layer, the tokens, positions, mask, last logits, sampler state and the fingerprints "
            "of the model and tokenizer it belongs to.</p><p>This step snapshots the session, "
            "restores the snapshot (its invariants are verified first) and continues both the "
            "snapshot and the restored session side by side: the <b>Logit drift</b> panel stays "
            "flat at zero — the restore is equivalent. (With no session yet, it feeds the "
            "tour's prompt first.)</p>"),
         [this, ledger, raise, ensureSession] {
             ensureSession();
             enqueue([ledger] { ledger->request(widgets::req::Snapshot{}); });
             enqueue([this, ledger] {
                 m_clean = ledger->ledger() ? ledger->ledger()->currentId : QString();
                 ledger->request(widgets::req::Restore{m_clean, false});
             });
             enqueue([this, ledger, raise] {
                 // As many steps as the insight's experiment follows (its verdict says 32).
                 ledger->request(
                     widgets::req::Drift{m_clean, QString(), 32, QStringLiteral("same-device")});
                 raise("dock.snapshots");
                 raise("dock.drift");
             });
         },
         {QStringLiteral("dock.snapshots"), QStringLiteral("dock.drift")},
         false,
         5});

    m_steps.push_back(
        {tr("Truncate and continue"),
         tr("<p>Rewinding is cutting the state at a position: tokens, cache columns, positions "
            "and mask must all be cut together, and the next position must follow.</p><p>This "
            "step truncates the session to half its length (a new node in the <b>fork tree</b>) "
            "and generates eight new tokens from there. The heatmaps shrink, then grow again.</p>"),
         [this, engine, ledger, raise, greedy, ensureSession] {
             ensureSession();
             enqueue([engine, ledger] {
                 const auto st = engine->state();
                 const qint64 n = st ? qint64(st->tokens.size()) : 0;
                 ledger->request(widgets::req::Truncate{std::max<qint64>(1, n / 2)});
             });
             enqueue([engine, greedy, raise] {
                 engine->generate(8, greedy());
                 raise("dock.snapshots");
                 raise("dock.kv");
             });
         },
         {QStringLiteral("dock.snapshots"), QStringLiteral("dock.kv")},
         false,
         49});

    // The fault is the insight's experiment itself, opened as its evidence: the verdict under
    // the text and the Logit drift beside it are one measurement (the same two states, the same
    // 32 steps). Injected into the tour's own snapshot instead, the panel showed a divergence at
    // step 1 and KL 2.5 beside a verdict that read "first different token 15, max KL 0.576".
    m_steps.push_back(
        {tr("Inject “position offset by one”"),
         tr("<p>The commonest silent restore failure: every cached token is recorded one position "
            "later than it was computed at (an off-by-one in cache_position). Nothing crashes — "
            "the model just continues from subtly wrong state.</p><p>This step runs the insights "
            "lab's experiment: the <b>fault lab</b> injects that fault into the lab's standard "
            "state, and both states are added to the <b>fork tree</b>. <b>Validation</b> names "
            "the broken invariants, and <b>Logit drift</b> continues the clean and the faulty "
            "state side by side for the experiment's 32 steps, the numbers of the verdict below."
            "</p><p><b>Diff ▸ What matters</b> then copies the clean state's keys and values "
            "into the faulty one, layer by layer: if the next token stays as wrong as before, the "
            "damage is not in the K/V at all but in what the panel names beside them.</p>"),
         [] {},
         {QStringLiteral("dock.validation"), QStringLiteral("dock.drift"),
          QStringLiteral("dock.diff")},
         false,
         35,
         true,
         [this, ledger, raise] {
             // The evidence's drift compared the clean state (A) with the faulty one (B).
             enqueue([this, ledger, raise] {
                 m_fault = m_window->driftPanel()->pickedB();
                 const QString clean = m_window->driftPanel()->pickedA();
                 if (m_fault.isEmpty() || clean.isEmpty()) {
                     m_failed = true;
                     setStatus(tr("The experiment's states did not open."));
                     return;
                 }
                 ledger->request(widgets::req::Localize{m_fault, clean});
                 raise("dock.diff");
             });
             // Last, so that it is the report on screen (the live one is re-checked after
             // every operation).
             enqueue([this, ledger] { ledger->request(widgets::req::VerifyNode{m_fault}); });
         }});

    m_steps.push_back(
        {tr("Fork and diff two branches"),
         tr("<p>A state can be continued many ways. <b>Fork</b> branches the clean snapshot two "
            "ways, each continuing 16 tokens with its own sampler seed; the <b>fork tree</b> "
            "shows both branches under their parent.</p><p><b>Diff</b> then aligns the two "
            "branches: their common prefix, the first diverging token, and per layer and head how "
            "far their caches differ after it.</p>"),
         [this, ledger, raise] {
             enqueue([this, ledger] {
                 if (m_clean.isEmpty()) {
                     m_failed = true;
                     setStatus(tr("Run step 3 first: it makes the clean snapshot."));
                     return;
                 }
                 ledger->request(widgets::req::Fork{m_clean, 2, 16, 1.0});
             });
             enqueue([ledger, raise] {
                 QStringList forks;
                 if (auto l = ledger->ledger())
                     for (auto it = l->nodes.rbegin(); it != l->nodes.rend() && forks.size() < 2;
                          ++it)
                         if (it->operation == QStringLiteral("fork"))
                             forks << it->id;
                 raise("dock.snapshots");
                 if (forks.size() == 2) {
                     ledger->request(widgets::req::Diff{forks[1], forks[0]});
                     raise("dock.diff");
                 }
             });
         },
         {QStringLiteral("dock.snapshots"), QStringLiteral("dock.diff")},
         false,
         18});

    // The last two steps are experiments of the insights lab alone: two claims people repeat
    // about KV memory, decided on the loaded model, with the states they compare opened in
    // the Diff panel.
    m_steps.push_back(
        {tr("Does replaying the prompt rebuild the state?"),
         tr("<p>A claim one often reads: re-feeding the prompt only <i>looks</i> like memory; it "
            "does not rebuild what the model had inside, so restoring the saved K/V is the only "
            "way back.</p><p>This step puts it to the test. The experiment replays a state's "
            "tokens in a fresh session and compares every layer's keys and values, and the next "
            "token's distribution, with the restored cache. Then the <b>Diff</b> panel opens on "
            "the two states (both are added to the <b>fork tree</b>): judge the heatmaps and "
            "the numbers yourself. A replay costs a full prefill where a restore costs a copy — "
            "the experiment times both.</p>"),
         [] {},
         {QStringLiteral("dock.diff"), QStringLiteral("dock.snapshots")},
         false,
         21,
         true});

    m_steps.push_back(
        {tr("Do the feed-forward layers touch the memory?"),
         tr("<p>Another claim: attention drives memory and the feed-forward (MLP) path merely "
            "reacts — it shapes each step's output but not what is kept in the cache.</p><p>The "
            "experiment zeroes one layer's MLP output while prefilling the same tokens and "
            "measures how far every layer's cached keys and values move. The <b>Diff</b> panel "
            "then opens on the ablated state against the clean one, at the layer that moved "
            "most: if the claim held, the layers above the ablated one would cache what they "
            "cached before.</p>"),
         [] {},
         {QStringLiteral("dock.diff"), QStringLiteral("dock.snapshots")},
         false,
         47,
         true});
}

} // namespace kvscope::gui
