// SessionPanel ("Model and session"): load a model on a device, enter a prompt (raw text or
// system/user chat messages), run / step / generate / stop with sampler settings, and see the
// token strip. Posts requests to the EngineController; shows what it reports.
#pragma once

#include "viewdata.h"

#include <QWidget>

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QRadioButton;
class QSpinBox;
class QStackedWidget;

namespace kvscope::widgets {

class EngineController;
class Selection;
class TokenLegend;
class TokenModel;
class TokenStrip;

class SessionPanel : public QWidget {
    Q_OBJECT
public:
    SessionPanel(EngineController* engine, Selection* selection, QWidget* parent = nullptr);

    PromptRequest promptRequest() const;
    kvscope::SamplerSettings samplerOptions() const;
    // Sets the prompt as the user would (it then stays when another model is opened).
    void setPromptText(const QString& text);
    QString promptText() const { return QString::fromStdString(promptRequest().prompt.text); }
    // The example prompt of the loaded model's card (ws::examplePrompt); empty when it has
    // none. The prompt box starts with it (or neutralPrompt()) until the user edits it.
    QString examplePrompt() const { return m_examplePrompt; }
    static QString neutralPrompt();
    QString selectedDevice() const;
    TokenModel* tokenModel() const { return m_tokens; }
    TokenLegend* tokenLegend() const { return m_legend; }
    // The line above the token strip: tokens, cache length, next position, top next tokens.
    QString summaryText() const;

public slots:
    void openModelDialog();
    void openFolderDialog();
    void runPrompt();
    void step();
    void generateMore();
    void stop();

private:
    void onState(const CacheViewPtr& state);
    void onModel(const ModelInfo& info);
    void onBusy(bool busy, const QString& what);
    void updateButtons();

    EngineController* m_engine;
    Selection* m_selection;
    TokenModel* m_tokens;
    QLabel* m_modelLabel;
    QComboBox* m_device;
    QCheckBox* m_hugePages;
    QComboBox* m_cacheDtype;
    QRadioButton* m_rawMode;
    QRadioButton* m_chatMode;
    QStackedWidget* m_promptStack;
    QPlainTextEdit* m_prompt;
    QLineEdit* m_system;
    QPlainTextEdit* m_user;
    QSpinBox* m_steps;
    QDoubleSpinBox* m_temperature;
    QDoubleSpinBox* m_topP;
    QSpinBox* m_topK;
    QSpinBox* m_seed;
    QPushButton* m_run;
    QPushButton* m_step;
    QPushButton* m_more;
    QPushButton* m_stop;
    QPushButton* m_reset;
    QProgressBar* m_progress;
    QLabel* m_message;
    QLabel* m_summary;
    TokenStrip* m_strip;
    TokenLegend* m_legend;
    bool m_busy = false;
    QString m_examplePrompt;
    bool m_promptEdited = false; // the user wrote the prompt: a model change keeps it
    bool m_fillingPrompt = false;
};

} // namespace kvscope::widgets
