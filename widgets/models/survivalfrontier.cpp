#include "survivalfrontier.h"

#include "csv.h"

#include "state/probes/survive.h"

#include <algorithm>
#include <limits>

namespace kvscope::widgets {

namespace {
double number(const nlohmann::json& j, const char* key) {
    const auto it = j.find(key);
    return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}
double klMean(const nlohmann::json& r) {
    const auto it = r.find("kl");
    return it != r.end() && it->is_object() ? number(*it, "mean") : 0.0;
}

nlohmann::json parametersOf(const nlohmann::json& r) {
    const auto p = r.find("parameters");
    return p != r.end() && p->is_object() ? *p : nlohmann::json::object();
}
} // namespace

QString Frontier::runLabel(const nlohmann::json& r) {
    return QString::fromStdString(
        state::runSetting(r.value("policy", std::string()), number(r, "budget"), parametersOf(r)));
}

Frontier Frontier::fromSweep(const nlohmann::json& sweep) {
    Frontier f;
    const auto it = sweep.find("results");
    if (it == sweep.end() || !it->is_array())
        return f;
    double minPositive = std::numeric_limits<double>::infinity();
    for (const auto& r : *it)
        if (const double kl = klMean(r); kl > 0)
            minPositive = std::min(minPositive, kl);
    f.floor = std::isfinite(minPositive) ? minPositive / 10 : 1e-6;
    f.maxY = f.floor;
    for (const auto& r : *it) {
        const std::string policy = r.value("policy", std::string());
        const QString name = QString::fromStdString(state::runCurve(policy, parametersOf(r)));
        auto c = std::find_if(f.curves.begin(), f.curves.end(),
                              [&](const FrontierCurve& x) { return x.name == name; });
        if (c == f.curves.end()) {
            FrontierCurve curve;
            curve.policy = QString::fromStdString(policy);
            curve.name = name;
            if (name != curve.policy)
                curve.allocation = name.mid(curve.policy.size() + 1);
            f.curves.push_back(curve);
            c = f.curves.end() - 1;
        }
        const double kl = klMean(r);
        c->x << number(r, "bytes_ratio");
        c->y << f.yOf(kl);
        c->kl << kl;
        QString label = runLabel(r);
        if (kl <= 0)
            label += (label.isEmpty() ? QString() : QStringLiteral(", ")) +
                     QStringLiteral("KL 0 (drawn at the axis floor)");
        c->labels << label;
        f.maxY = std::max(f.maxY, f.yOf(kl));
    }
    return f;
}

QString Frontier::toCsv(const nlohmann::json& sweep) {
    CsvWriter csv({QStringLiteral("policy"), QStringLiteral("allocation"), QStringLiteral("run"),
                   QStringLiteral("bytes_kept"), QStringLiteral("bytes_full"),
                   QStringLiteral("bytes_ratio"), QStringLiteral("kl_mean"),
                   QStringLiteral("kl_p99"), QStringLiteral("kl_max"),
                   QStringLiteral("top1_agreement"), QStringLiteral("first_divergence"),
                   QStringLiteral("ppl_ratio")});
    const auto it = sweep.find("results");
    if (it == sweep.end() || !it->is_array())
        return csv.text();
    auto num = [](const nlohmann::json& j, const char* k) {
        const auto v = j.find(k);
        return v != j.end() && v->is_number() ? QString::number(v->get<double>(), 'g', 17)
                                              : QString();
    };
    for (const auto& r : *it) {
        const nlohmann::json kl = r.value("kl", nlohmann::json::object());
        const nlohmann::json params = parametersOf(r);
        const auto allocation = params.find("allocation");
        csv.row({QString::fromStdString(r.value("policy", std::string())),
                 allocation != params.end() && allocation->is_string()
                     ? QString::fromStdString(allocation->get<std::string>())
                     : QString(),
                 runLabel(r), num(r, "bytes_kept"), num(r, "bytes_full"), num(r, "bytes_ratio"),
                 num(kl, "mean"), num(kl, "p99"), num(kl, "max"), num(r, "top1_agreement"),
                 num(r, "first_divergence"), num(r, "ppl_ratio")});
    }
    return csv.text();
}

} // namespace kvscope::widgets
