// The survival frontier as the Survival panel plots it: one curve per policy (and budget
// allocation: state::runCurve) of a sweep, bytes
// kept / full (x) against KL mean (y, log scale), in the sweep's order (survivalPolicies()).
// Plain math, no widgets: the points are core's numbers (the sweep JSON's "bytes_ratio" and
// "kl.mean"); the only thing decided here is where a KL of exactly 0 (the full state) sits on
// a log axis — at `floor`, a decade under the smallest positive KL, and said so in its label.
#pragma once

#include <QString>
#include <QStringList>
#include <QVector>

#include <nlohmann/json.hpp>

namespace kvscope::widgets {

struct FrontierCurve {
    QString policy;
    QString allocation;   // an eviction's budget allocation when not uniform, else empty
    QString name;         // state::runCurve(): "snapkv", "snapkv pyramid
    QVector<double> x, y; // bytes ratio, KL mean (zeros drawn at Frontier::floor)
    QVector<double> kl;   // KL mean as core measured it
    QStringList labels;   // per point: "25 %", "4 bits", "" (one-point policies)
};

struct Frontier {
    std::vector<FrontierCurve> curves; // in the order the policies first occur
    double floor = 1e-6;               // where KL = 0 is drawn
    double maxY = 1;                   // largest KL mean drawn (>= floor)

    // From a sweep's JSON ({"results": [SurviveResult::toJson(false), ...]}).
    static Frontier fromSweep(const nlohmann::json& sweep);
    // Where a result with this KL mean is drawn (max(kl, floor)).
    double yOf(double klMean) const { return klMean > floor ? klMean : floor; }
    // The label of a run: state::runSetting() of its policy, budget and parameters.
    static QString runLabel(const nlohmann::json& result);
    // The sweep as CSV (one row per run).
    static QString toCsv(const nlohmann::json& sweep);
};

} // namespace kvscope::widgets
