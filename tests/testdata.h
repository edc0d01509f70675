// Locating ../shared test data (models, tokenizers, chat templates) from Qt Test suites.
// KVSCOPE_TEST_DATA overrides the default (../shared beside the repository).
#pragma once

#include <QDir>
#include <QFileInfo>
#include <QString>
#include <QTest>
#include <string>

namespace testdata {

inline QString root() {
    const QByteArray env = qgetenv("KVSCOPE_TEST_DATA");
    return QDir::cleanPath(env.isEmpty() ? QString(KVSCOPE_DEFAULT_TEST_DATA)
                                         : QString::fromLocal8Bit(env));
}

// Absolute path of `rel` under the test data root, as std::string.
inline std::string path(const QString& rel) {
    return (root() + "/" + rel).toStdString();
}

inline bool exists(const QString& rel) {
    return QFileInfo::exists(root() + "/" + rel);
}

} // namespace testdata

namespace testdata {
// Strict mode (KVSCOPE_STRICT_TEST_DATA=1; packaging/run-tests.sh and CI): a missing fixture
// fails the test instead of skipping it — a green run that skipped is not a pass.
inline bool strict() {
    return qEnvironmentVariableIntValue("KVSCOPE_STRICT_TEST_DATA") != 0;
}
} // namespace testdata

// Skips the current test when `rel` is missing under the shared test data (fails in strict
// mode).
#define KVSCOPE_REQUIRE_DATA(rel)                                                                  \
    do {                                                                                           \
        if (!testdata::exists(rel)) {                                                              \
            const QString why =                                                                    \
                QString("shared test data not found: %1/%2 (set KVSCOPE_TEST_DATA)")               \
                    .arg(testdata::root(), QString(rel));                                          \
            if (testdata::strict())                                                                \
                QFAIL(qPrintable(why + " [strict mode]"));                                         \
            QSKIP(qPrintable(why));                                                                \
        }                                                                                          \
    } while (0)
