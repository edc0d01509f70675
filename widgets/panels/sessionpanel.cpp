#include "sessionpanel.h"

#include "enginecontroller.h"
#include "exportmenu.h"
#include "selection.h"
#include "statefollower.h"
#include "tokenmodel.h"
#include "tokenstrip.h"

#include <QButtonGroup>
#include <QCheckBox>
#include <QComboBox>
#include <QSignalBlocker>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QScrollArea>
#include <QPushButton>
#include <QRadioButton>
#include <QSpinBox>
#include <QSplitter>
#include <QStackedWidget>
#include <QToolButton>
#include <QVBoxLayout>

namespace kvscope::widgets {

namespace {

// Where the loaded weights live, as the engine reported it (ModelInfo), for the model's tooltip.
QString weightPlacement(const ModelInfo& info) {
    const QString inPlace = QLocale().formattedDataSize(info.mappedWeightBytes);
    if (info.weightsOnHugePages)
        return info.mappedWeightBytes > 0
                   ? SessionPanel::tr("weights copied onto huge pages (%1 of small tensors used "
                                      "in place from the file)")
                         .arg(inPlace)
                   : SessionPanel::tr("weights copied onto huge pages");
    return info.mappedWeightBytes > 0
               ? SessionPanel::tr("%1 of weights used in place from the file").arg(inPlace)
               : SessionPanel::tr("weights held in memory (none used in place from the file)");
}

} // namespace

SessionPanel::SessionPanel(EngineController* engine, Selection* selection, QWidget* parent)
    : QWidget(parent), m_engine(engine), m_selection(selection), m_tokens(new TokenModel(this)) {
    auto* layout = new QVBoxLayout(this);

    // Model: its name, then the next load's options and Open.
    auto* modelRow = new QHBoxLayout;
    m_modelLabel = new QLabel(tr("No model loaded"), this);
    m_modelLabel->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_modelLabel->setWordWrap(true);
    m_device = new QComboBox(this);
    m_device->addItem(QStringLiteral("cpu"));
    m_device->setToolTip(tr("Devices this libtorch build can run on"));
    m_hugePages = new QCheckBox(tr("Huge pages"), this);
    m_hugePages->setObjectName(QStringLiteral("session.hugePages"));
    m_hugePages->setToolTip(
        tr("For the next model you open: copy the weights out of the file onto huge pages "
           "(the CLI's --huge-pages). Loading takes longer; decoding is faster where mapped "
           "file pages stream slowly, as on many virtual machines. Off: the weights are used "
           "in place from the file."));
    m_hugePages->setChecked(m_engine->weightsOnHugePages());
    connect(m_hugePages, &QCheckBox::toggled, m_engine, &EngineController::setWeightsOnHugePages);
    connect(m_engine, &EngineController::weightsOnHugePagesChanged, m_hugePages,
            &QCheckBox::setChecked);
    m_cacheDtype = new QComboBox(this);
    m_cacheDtype->setObjectName(QStringLiteral("session.cacheDtype"));
    m_cacheDtype->addItems({QStringLiteral("f32"), QStringLiteral("f16"), QStringLiteral("bf16")});
    m_cacheDtype->setToolTip(
        tr("KV cache dtype for the next model you open (the CLI's --cache-dtype). f16 and bf16 "
           "halve the cache's memory (llama.cpp keeps f16 by default); attention still computes "
           "in f32, so the logits move by the 16-bit rounding of K and V. A restored snapshot "
           "keeps the dtype it was captured in."));
    // Empty (the compute dtype) shows f32, which it is on the CPU; a load shows what it made.
    m_cacheDtype->setCurrentText(m_engine->cacheDtype());
    connect(m_cacheDtype, &QComboBox::currentTextChanged, m_engine,
            &EngineController::setCacheDtype);
    connect(m_engine, &EngineController::cacheDtypeChanged, m_cacheDtype,
            &QComboBox::setCurrentText);
    auto* open = new QToolButton(this);
    open->setText(tr("Open…"));
    open->setPopupMode(QToolButton::MenuButtonPopup);
    open->addAction(tr("Open model file…"), this, &SessionPanel::openModelDialog);
    open->addAction(tr("Open Hugging Face folder…"), this, &SessionPanel::openFolderDialog);
    connect(open, &QToolButton::clicked, this, &SessionPanel::openModelDialog);
    // The model on a line of its own, the options of the next load under it: beside them it
    // wrapped into a column that pushed the prompt box off a 1366x768 screen.
    layout->addWidget(m_modelLabel);
    modelRow->addWidget(new QLabel(tr("Device"), this));
    modelRow->addWidget(m_device);
    modelRow->addWidget(m_hugePages);
    modelRow->addWidget(new QLabel(tr("KV cache"), this));
    modelRow->addWidget(m_cacheDtype);
    modelRow->addStretch(1);
    modelRow->addWidget(open);
    layout->addLayout(modelRow);

    // Prompt: raw text or chat messages. No group box: its title and frame cost ~35 px of a
    // dock that, tabbed with the tour above the fork tree, sets the window's minimum height
    // (a window manager's title bar leaves 748 px of a 1366x768 screen).
    auto* promptBox = new QWidget(this);
    promptBox->setObjectName(QStringLiteral("session.prompt"));
    auto* promptLayout = new QVBoxLayout(promptBox);
    promptLayout->setContentsMargins(0, 0, 0, 0);
    auto* modeRow = new QHBoxLayout;
    auto* promptLabel = new QLabel(tr("<b>Prompt</b>"), promptBox);
    modeRow->addWidget(promptLabel);
    m_rawMode = new QRadioButton(tr("Text"), promptBox);
    m_chatMode = new QRadioButton(tr("Chat messages"), promptBox);
    m_rawMode->setChecked(true);
    m_chatMode->setEnabled(false);
    m_chatMode->setToolTip(tr("Needs a tokenizer with a chat template"));
    modeRow->addWidget(m_rawMode);
    modeRow->addWidget(m_chatMode);
    modeRow->addStretch();
    promptLayout->addLayout(modeRow);
    m_promptStack = new QStackedWidget(promptBox);
    m_prompt = new QPlainTextEdit(neutralPrompt(), promptBox);
    m_prompt->setPlaceholderText(tr("Prompt text"));
    // Until the user writes their own, the prompt follows the model (its card's example).
    connect(m_prompt, &QPlainTextEdit::textChanged, this, [this] {
        if (!m_fillingPrompt)
            m_promptEdited = true;
    });
    m_promptStack->addWidget(m_prompt);
    auto* chat = new QWidget(promptBox);
    auto* chatForm = new QFormLayout(chat);
    chatForm->setContentsMargins(0, 0, 0, 0);
    m_system = new QLineEdit(chat);
    m_system->setPlaceholderText(tr("optional system message"));
    m_user = new QPlainTextEdit(chat);
    chatForm->addRow(tr("System"), m_system);
    chatForm->addRow(tr("User"), m_user);
    m_promptStack->addWidget(chat);
    m_promptStack->setMaximumHeight(110);
    m_promptStack->setMinimumHeight(50); // two lines; it scrolls (the dock fits a laptop screen)
    promptLayout->addWidget(m_promptStack);
    connect(m_chatMode, &QRadioButton::toggled, this,
            [this](bool chat) { m_promptStack->setCurrentIndex(chat ? 1 : 0); });

    // Sampler.
    // Two rows of label/value pairs: one row of five would set the dock's minimum width.
    auto* samplerRow = new QGridLayout;
    m_steps = new QSpinBox(promptBox);
    m_steps->setRange(0, 100000);
    m_steps->setValue(32);
    m_steps->setToolTip(tr("Tokens to generate (0: prefill only)"));
    m_temperature = new QDoubleSpinBox(promptBox);
    m_temperature->setRange(0, 5);
    m_temperature->setSingleStep(0.1);
    m_temperature->setToolTip(tr("0 = greedy"));
    m_topP = new QDoubleSpinBox(promptBox);
    m_topP->setRange(0, 1);
    m_topP->setSingleStep(0.05);
    m_topP->setValue(0.9);
    m_topK = new QSpinBox(promptBox);
    m_topK->setRange(0, 100000);
    m_seed = new QSpinBox(promptBox);
    m_seed->setRange(0, std::numeric_limits<int>::max());
    // Room for six digits: the ten of INT_MAX would widen the whole dock.
    m_seed->setMinimumWidth(m_seed->fontMetrics().horizontalAdvance(QStringLiteral("000000")) + 32);
    m_seed->setValue(42);
    for (auto [label, w] : {std::pair<QString, QWidget*>{tr("Steps"), m_steps},
                            {tr("Temp"), m_temperature},
                            {tr("Top-p"), m_topP},
                            {tr("Top-k"), m_topK},
                            {tr("Seed"), m_seed}}) {
        const int i = samplerRow->count() / 2;
        samplerRow->addWidget(new QLabel(label, promptBox), i / 3, 2 * (i % 3));
        samplerRow->addWidget(w, i / 3, 2 * (i % 3) + 1);
    }
    samplerRow->setColumnStretch(6, 1);
    promptLayout->addLayout(samplerRow);

    // Actions.
    auto* buttons = new QHBoxLayout;
    m_run = new QPushButton(tr("Run prompt"), promptBox);
    m_run->setToolTip(tr("Reset, prefill the prompt, generate Steps tokens (Ctrl+Return)"));
    m_step = new QPushButton(tr("Step"), promptBox);
    m_step->setToolTip(tr("Generate one token (F10)"));
    m_more = new QPushButton(tr("Generate"), promptBox);
    m_more->setToolTip(tr("Continue for Steps tokens (F5)"));
    m_stop = new QPushButton(tr("Stop"), promptBox);
    m_stop->setToolTip(tr("Stop the running operation (Esc)"));
    m_reset = new QPushButton(tr("Reset"), promptBox);
    m_reset->setToolTip(tr("Empty the session (tokens and cache)"));
    for (auto* b : {m_run, m_step, m_more, m_stop, m_reset})
        buttons->addWidget(b);
    buttons->addStretch();
    promptLayout->addLayout(buttons);
    connect(m_run, &QPushButton::clicked, this, &SessionPanel::runPrompt);
    connect(m_step, &QPushButton::clicked, this, &SessionPanel::step);
    connect(m_more, &QPushButton::clicked, this, &SessionPanel::generateMore);
    connect(m_stop, &QPushButton::clicked, this, &SessionPanel::stop);
    connect(m_reset, &QPushButton::clicked, this, [this] { m_engine->resetSession(); });
    layout->addWidget(promptBox);

    auto* statusRow = new QHBoxLayout;
    m_progress = new QProgressBar(this);
    m_progress->setMaximumWidth(180);
    m_progress->setVisible(false);
    // The status line and the summary keep their room whether or not they have text yet: in a
    // dock at its minimum height (the tour's tab group on a 1366x768 screen) the panel grew
    // 18 px with the first session, moving the tour's buttons away from under the cursor.
    const int line = fontMetrics().lineSpacing();
    // The message wraps inside a frameless area of one to two lines that scrolls when it says
    // more (a four-line load error pushed the sampler rows over the prompt box); the whole
    // text is also its tooltip.
    auto* messageArea = new QScrollArea(this);
    messageArea->setFrameShape(QFrame::NoFrame);
    messageArea->setWidgetResizable(true);
    messageArea->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    m_message = new QLabel(messageArea);
    m_message->setWordWrap(true);
    m_message->setAlignment(Qt::AlignLeft | Qt::AlignTop);
    m_message->setTextInteractionFlags(Qt::TextSelectableByMouse);
    messageArea->setWidget(m_message);
    messageArea->setMinimumHeight(line + 4);
    messageArea->setMaximumHeight(2 * line + 6);
    statusRow->addWidget(m_progress);
    statusRow->addWidget(messageArea, 1);
    layout->addLayout(statusRow);

    m_summary = new QLabel(this);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_summary->setWordWrap(true); // the top-next list grows with the model
    m_summary->setMinimumHeight(2 * line);
    layout->addWidget(m_summary);
    m_strip = new TokenStrip(this);
    m_strip->setModel(m_tokens);
    // One row of chips at the least (a list view asks for 70 px); it scrolls and grows with
    // the dock.
    m_strip->setMinimumHeight(3 * line);
    m_legend = new TokenLegend(this);
    m_legend->setModel(m_tokens);
    layout->addWidget(m_legend);
    layout->addWidget(m_strip, 1);
    installExportMenu(m_strip,
                      {QStringLiteral("tokens"), [this] { return m_strip->grab().toImage(); },
                       [this] { return m_tokens->toCsv(); }});
    connect(m_strip, &TokenStrip::tokenClicked, this, [this](int row) {
        const auto s = m_tokens->state();
        if (s && size_t(row) < s->tokens.size() && row < s->length)
            m_selection->setPosition(row);
    });
    connect(m_selection, &Selection::changed, this,
            [this] { m_strip->setCurrentToken(int(m_selection->position())); });

    new StateFollower(m_engine, this, [this](const CacheViewPtr& s) { onState(s); });
    connect(m_engine, &EngineController::modelLoaded, this, &SessionPanel::onModel);
    connect(m_engine, &EngineController::busyChanged, this, &SessionPanel::onBusy);
    connect(m_engine, &EngineController::devicesReady, this, [this](const QStringList& devices) {
        const QString current = m_device->currentText();
        m_device->clear();
        m_device->addItems(devices);
        m_device->setCurrentText(current);
    });
    connect(m_engine, &EngineController::progress, this,
            [this](qint64 done, qint64 total, const QString& what) {
                // The bar holds the numbers only; what is running is the label beside it, which
                // wraps (a long name inside the bar was cut off).
                m_progress->setRange(0, int(std::min<qint64>(total, INT_MAX)));
                m_progress->setValue(int(std::min<qint64>(done, INT_MAX)));
                m_progress->setFormat(QStringLiteral("%v/%m"));
                if (m_busy && !what.isEmpty())
                    m_message->setText(what + QStringLiteral("…"));
            });
    connect(m_engine, &EngineController::operationFinished, this, [this](const OperationResult& r) {
        m_message->setStyleSheet(r.ok ? QString() : QStringLiteral("color: #b00000"));
        m_message->setText(r.message);
        m_message->setToolTip(r.message);
    });
    updateButtons();
}

PromptRequest SessionPanel::promptRequest() const {
    PromptRequest r;
    r.prompt.chat = m_chatMode->isChecked();
    r.prompt.text = m_prompt->toPlainText().toStdString();
    r.prompt.system = m_system->text().trimmed().toStdString();
    r.prompt.user = m_user->toPlainText().toStdString();
    r.steps = m_steps->value();
    r.sampler = samplerOptions();
    return r;
}

kvscope::SamplerSettings SessionPanel::samplerOptions() const {
    kvscope::SamplerSettings s;
    s.temperature = float(m_temperature->value());
    s.topP = float(m_topP->value());
    s.topK = m_topK->value();
    s.seed = quint64(m_seed->value());
    return s;
}

void SessionPanel::setPromptText(const QString& text) {
    m_rawMode->setChecked(true);
    m_prompt->setPlainText(text);
    m_promptEdited = true;
}

QString SessionPanel::neutralPrompt() {
    return QStringLiteral("Hello, my name is");
}

QString SessionPanel::summaryText() const {
    return m_summary->text();
}

QString SessionPanel::selectedDevice() const {
    return m_device->currentText();
}

void SessionPanel::openModelDialog() {
    const QString path = QFileDialog::getOpenFileName(
        this, tr("Open model"), QString(),
        tr("Models (*.bin *.gguf *.safetensors config.json);;All files (*)"));
    if (!path.isEmpty())
        m_engine->loadModel(path, selectedDevice());
}

void SessionPanel::openFolderDialog() {
    const QString path = QFileDialog::getExistingDirectory(this, tr("Open model folder"));
    if (!path.isEmpty())
        m_engine->loadModel(path, selectedDevice());
}

void SessionPanel::runPrompt() {
    if (m_engine->hasModel())
        m_engine->runPrompt(promptRequest());
}

void SessionPanel::step() {
    if (m_engine->hasModel())
        m_engine->step(samplerOptions());
}

void SessionPanel::generateMore() {
    if (m_engine->hasModel())
        m_engine->generate(std::max(1, m_steps->value()), samplerOptions());
}

void SessionPanel::stop() {
    m_engine->stop();
}

void SessionPanel::onModel(const ModelInfo& info) {
    m_modelLabel->setText(tr("<b>%1</b> · %2 · %3 layers · %4 heads (%5 KV) · head dim %6 · "
                             "context %7 · %8 params %9· %10")
                              .arg(info.name.toHtmlEscaped(), info.architecture)
                              .arg(info.layers)
                              .arg(info.heads)
                              .arg(info.kvHeads)
                              .arg(info.headDim)
                              .arg(info.maxContext)
                              .arg(QLocale().toString(info.parameters))
                              .arg(info.weightDtype.isEmpty()
                                       ? QString()
                                       : QStringLiteral("(%1) ").arg(info.weightDtype))
                              .arg(info.device));
    m_modelLabel->setToolTip(
        info.path + QStringLiteral("\n") + tr("fingerprint %1").arg(info.fingerprint) +
        QStringLiteral("\n") + weightPlacement(info) +
        (info.variations.isEmpty()
             ? QString()
             : QStringLiteral("\n") + info.variations.join(QStringLiteral("; "))));
    m_device->setCurrentText(info.device);
    {
        // Shows what the load made without choosing it for the next load: with nothing chosen a
        // GPU model's bf16 cache must not become a CPU model's.
        const QSignalBlocker quiet(m_cacheDtype);
        m_cacheDtype->setCurrentText(info.cacheDtype);
    }
    // The model's own example prompt (its card, read by the engine: ws::examplePrompt); a
    // neutral one when it has none. A prompt the user wrote stays.
    m_examplePrompt = info.examplePrompt;
    if (!m_promptEdited) {
        m_fillingPrompt = true;
        m_prompt->setPlainText(m_examplePrompt.isEmpty() ? neutralPrompt() : m_examplePrompt);
        m_fillingPrompt = false;
    }
    m_chatMode->setEnabled(info.hasChatTemplate);
    if (!info.hasChatTemplate)
        m_rawMode->setChecked(true);
    if (info.tokenizerKind.isEmpty())
        m_prompt->setPlaceholderText(tr("No tokenizer: token ids separated by spaces"));
    updateButtons();
}

void SessionPanel::onState(const CacheViewPtr& state) {
    m_tokens->setState(state);
    m_strip->setCurrentToken(int(m_selection->position()));
    if (!state || state->tokens.empty()) {
        m_summary->setText(state && !state->model.path.isEmpty() ? tr("Empty session") : QString());
    } else {
        QStringList top;
        for (size_t i = 0; i < state->topIds.size(); ++i)
            top << QStringLiteral("\"%1\" %2")
                       .arg(TokenModel::visibleText({.text = state->topTexts[i]}))
                       .arg(state->topLogits[i], 0, 'f', 2);
        m_summary->setText(tr("%1 · cache length %2 (%3) · next position %4 · top next: %5")
                               .arg(countOf(int(state->tokens.size()), tr("token"), tr("tokens")))
                               .arg(state->length)
                               .arg(state->cacheDtype)
                               .arg(state->nextPosition)
                               .arg(top.join(QStringLiteral(", "))));
    }
    m_strip->scrollToBottom();
}

void SessionPanel::onBusy(bool busy, const QString& what) {
    m_busy = busy;
    m_progress->setVisible(busy);
    if (busy) {
        m_progress->setRange(0, 0);
        m_message->setStyleSheet(QString());
        m_message->setText(what + QStringLiteral("…"));
    }
    updateButtons();
}

void SessionPanel::updateButtons() {
    const bool model = m_engine->hasModel();
    m_run->setEnabled(model && !m_busy);
    m_step->setEnabled(model && !m_busy);
    m_more->setEnabled(model && !m_busy);
    m_reset->setEnabled(model && !m_busy);
    m_stop->setEnabled(m_busy);
}

} // namespace kvscope::widgets
