#include "snapshottreemodel.h"

#include "csv.h"
#include "displaytext.h"

#include <QFileInfo>
#include <QPalette>
#include <QJsonDocument>
#include <QJsonObject>
#include <QFont>

namespace kvscope::widgets {

namespace {
// Internal ids are node index + 1 so that 0 never names a node.
quintptr toInternal(int node) {
    return quintptr(node) + 1;
}
int fromInternal(quintptr id) {
    return int(id) - 1;
}
} // namespace

SnapshotTreeModel::SnapshotTreeModel(QObject* parent) : QAbstractItemModel(parent) {}

void SnapshotTreeModel::setLedger(const LedgerViewPtr& ledger) {
    beginResetModel();
    m_ledger = ledger;
    const int n = ledger ? int(ledger->nodes.size()) : 0;
    m_children.assign(size_t(n) + 1, {});
    m_parent.assign(size_t(n), -1);
    // The links are core's (state::buildLineageTree via the workspace: cycles already broken);
    // an index out of range is treated as a root.
    for (int i = 0; i < n; ++i) {
        const int p = ledger->nodes[size_t(i)].parent;
        m_parent[size_t(i)] = p >= 0 && p < n && p != i ? p : -1;
        m_children[m_parent[size_t(i)] < 0 ? size_t(n) : size_t(p)].push_back(i);
    }
    endResetModel();
}

const std::vector<int>& SnapshotTreeModel::childrenOf(int node) const {
    return m_children[node < 0 ? m_children.size() - 1 : size_t(node)];
}

int SnapshotTreeModel::rowInParent(int node) const {
    const auto& siblings = childrenOf(m_parent[size_t(node)]);
    return int(std::find(siblings.begin(), siblings.end(), node) - siblings.begin());
}

const SnapshotNode* SnapshotTreeModel::node(const QModelIndex& index) const {
    if (!index.isValid() || !m_ledger)
        return nullptr;
    return &m_ledger->nodes[size_t(fromInternal(index.internalId()))];
}

QModelIndex SnapshotTreeModel::indexOf(const QString& id) const {
    if (!m_ledger)
        return {};
    for (size_t i = 0; i < m_ledger->nodes.size(); ++i)
        if (m_ledger->nodes[i].id == id)
            return createIndex(rowInParent(int(i)), 0, toInternal(int(i)));
    return {};
}

QModelIndex SnapshotTreeModel::index(int row, int column, const QModelIndex& parent) const {
    if (!hasIndex(row, column, parent) || m_children.empty())
        return {};
    const int p = parent.isValid() ? fromInternal(parent.internalId()) : -1;
    return createIndex(row, column, toInternal(childrenOf(p)[size_t(row)]));
}

QModelIndex SnapshotTreeModel::parent(const QModelIndex& child) const {
    if (!child.isValid())
        return {};
    const int p = m_parent[size_t(fromInternal(child.internalId()))];
    if (p < 0)
        return {};
    return createIndex(rowInParent(p), 0, toInternal(p));
}

int SnapshotTreeModel::rowCount(const QModelIndex& parent) const {
    if (m_children.empty() || (parent.isValid() && parent.column() != 0))
        return 0;
    return int(childrenOf(parent.isValid() ? fromInternal(parent.internalId()) : -1).size());
}

int SnapshotTreeModel::columnCount(const QModelIndex&) const {
    return ColumnCount;
}

QVariant SnapshotTreeModel::data(const QModelIndex& index, int role) const {
    if (!checkIndex(index, CheckIndexOption::IndexIsValid))
        return {};
    const SnapshotNode& n = *node(index);
    switch (role) {
    case Qt::DisplayRole:
        switch (index.column()) {
        case NodeColumn: {
            // An import says where from: "import ← llama.cpp ggsq".
            if (n.name.startsWith(QLatin1Char('#')))
                return n.name; // an insights-lab evidence state: its insight and role
            QString op = n.operation;
            if (op == QLatin1String("import")) {
                const auto p = QJsonDocument::fromJson(n.parameters.toUtf8()).object();
                if (p.contains(QLatin1String("engine")))
                    op += QStringLiteral(" ← %1 %2")
                              .arg(p.value(QLatin1String("engine")).toString(),
                                   p.value(QLatin1String("format")).toString());
            }
            return QStringLiteral("%1  %2").arg(op, n.id.left(8));
        }
        case TokensColumn:
            return n.tokens;
        case ModelColumn:
            return n.modelName;
        case ParametersColumn:
            return parametersText(n.parameters);
        case CreatedColumn:
            return n.createdAt;
        case FileColumn:
            return n.file.isEmpty() ? QString() : QFileInfo(n.file).fileName();
        }
        return {};
    case Qt::ToolTipRole: {
        // The parameters as recorded (the JSON `kvscope-cli tree` prints), under the summary.
        QString tip = tr("%1\n%2, cache %3\n…%4")
                          .arg(n.id, countOf(int(n.tokens), tr("token"), tr("tokens")))
                          .arg(n.cacheLength)
                          .arg(n.preview);
        if (n.otherModel)
            tip += QStringLiteral("\n") +
                   (n.ownTokenizerFound
                        ? tr("Made with %1, not the loaded model: its tokens are decoded with "
                             "its own tokenizer; restoring it needs that model.")
                        : tr("Made with %1, not the loaded model: its tokens are shown as ids "
                             "(its own tokenizer was not found); restoring it needs that model."))
                       .arg(n.modelName);
        if (!n.file.isEmpty())
            tip += QStringLiteral("\n") + n.file;
        if (!n.parameters.isEmpty())
            tip += QStringLiteral("\n") + tr("%1 %2").arg(n.operation, n.parameters);
        return tip;
    }
    case Qt::ForegroundRole:
        if (n.otherModel)
            return QPalette().color(QPalette::Disabled, QPalette::Text);
        return {};
    case Qt::FontRole:
        if (m_ledger && n.id == m_ledger->currentId) {
            QFont f;
            f.setBold(true);
            return f;
        }
        return {};
    case IdRole:
        return n.id;
    }
    return {};
}

QVariant SnapshotTreeModel::headerData(int section, Qt::Orientation orientation, int role) const {
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
    case NodeColumn:
        return tr("Snapshot");
    case TokensColumn:
        return tr("Tokens");
    case ModelColumn:
        return tr("Model");
    case ParametersColumn:
        return tr("Operation parameters");
    case CreatedColumn:
        return tr("Created");
    case FileColumn:
        return tr("File");
    }
    return {};
}

QString SnapshotTreeModel::toCsv() const {
    CsvWriter csv({QStringLiteral("id"), QStringLiteral("parent"), QStringLiteral("operation"),
                   QStringLiteral("parameters"), QStringLiteral("tokens"),
                   QStringLiteral("created"), QStringLiteral("file"), QStringLiteral("model")});
    if (m_ledger)
        for (const auto& n : m_ledger->nodes)
            csv.row({n.id, n.parentId, n.operation, n.parameters, QString::number(n.tokens),
                     n.createdAt, n.file, n.modelName});
    return csv.text();
}

} // namespace kvscope::widgets
