#include "welcomeview.h"

#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QListWidget>
#include <QPushButton>
#include <QVBoxLayout>

namespace kvscope::gui {

WelcomeView::WelcomeView(QWidget* parent) : QWidget(parent) {
    auto* outer = new QVBoxLayout(this);
    outer->addStretch(1);
    auto* title = new QLabel(tr("<h1>kvscope</h1><p>Inspect the state a transformer needs to "
                                "continue a generation: tokens, positions, mask and the KV "
                                "cache, layer by layer.</p>"),
                             this);
    title->setAlignment(Qt::AlignCenter);
    title->setWordWrap(true);
    outer->addWidget(title);
    auto* buttons = new QHBoxLayout;
    buttons->addStretch();
    auto* openModel = new QPushButton(tr("Open model file…"), this);
    auto* openFolder = new QPushButton(tr("Open Hugging Face folder…"), this);
    buttons->addWidget(openModel);
    buttons->addWidget(openFolder);
    buttons->addStretch();
    outer->addLayout(buttons);
    auto* hint = new QLabel(tr("…or drop a llama2.c .bin, a .gguf, a model folder or a snapshot "
                               "file on this window."),
                            this);
    hint->setAlignment(Qt::AlignCenter);
    outer->addWidget(hint);

    auto* lists = new QHBoxLayout;
    lists->addStretch();
    auto* models = new QVBoxLayout;
    models->addWidget(new QLabel(tr("<b>Recent models</b>"), this));
    m_models = new QListWidget(this);
    m_models->setMinimumWidth(320);
    m_models->setMaximumHeight(200);
    models->addWidget(m_models);
    lists->addLayout(models);
    auto* snaps = new QVBoxLayout;
    snaps->addWidget(new QLabel(tr("<b>Recent snapshots</b>"), this));
    m_snapshots = new QListWidget(this);
    m_snapshots->setMinimumWidth(320);
    m_snapshots->setMaximumHeight(200);
    snaps->addWidget(m_snapshots);
    lists->addLayout(snaps);
    lists->addStretch();
    outer->addLayout(lists);
    outer->addStretch(2);

    connect(openModel, &QPushButton::clicked, this, &WelcomeView::openModelRequested);
    connect(openFolder, &QPushButton::clicked, this, &WelcomeView::openFolderRequested);
    for (auto* list : {m_models, m_snapshots})
        connect(list, &QListWidget::itemActivated, this, [this](QListWidgetItem* item) {
            emit openPathRequested(item->data(Qt::UserRole).toString());
        });
}

void WelcomeView::setRecent(const QStringList& models, const QStringList& snapshots) {
    auto fill = [](QListWidget* list, const QStringList& paths, const QString& none) {
        list->clear();
        for (const QString& p : paths) {
            auto* item = new QListWidgetItem(QFileInfo(p).fileName() + QStringLiteral("  —  ") + p);
            item->setData(Qt::UserRole, p);
            item->setToolTip(p);
            list->addItem(item);
        }
        if (paths.isEmpty()) {
            auto* item = new QListWidgetItem(none);
            item->setFlags(Qt::NoItemFlags);
            list->addItem(item);
        }
    };
    fill(m_models, models, tr("(none yet)"));
    fill(m_snapshots, snapshots, tr("(none yet)"));
}

} // namespace kvscope::gui
