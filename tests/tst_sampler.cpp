// The sampler's pieces that need no model: top-p's candidate sort (a radix sort for long
// lists) against std::stable_sort. tst_engine checks seeded sampling against run.c.
#include "engine/sampler.h"

#include <QTest>
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

using namespace kvscope;

namespace {

using Candidates = std::vector<std::pair<float, int32_t>>;

Candidates stableSorted(Candidates c) {
    std::stable_sort(c.begin(), c.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    return c;
}

// n candidates with ids 0..n-1 whose probabilities come from `value`.
template <class F> Candidates make(size_t n, F value) {
    Candidates c;
    for (size_t i = 0; i < n; ++i)
        c.emplace_back(value(i), static_cast<int32_t>(i));
    return c;
}

} // namespace

class TestSampler : public QObject {
    Q_OBJECT
private slots:
    void sortCandidatesIsAStableSort_data() {
        QTest::addColumn<int>("kind");
        QTest::addColumn<int>("n");
        const char* kinds[] = {"uniform", "ties", "subnormal", "one-value", "ascending", "spread"};
        for (int k = 0; k < 6; ++k)
            for (int n : {0, 1, 7, 1023, 1024, 1025, 49152})
                QTest::addRow("%s-%d", kinds[k], n) << k << n;
    }
    // Equal probabilities keep their order (token id order, as the sampler builds the list):
    // the nucleus, and so the token drawn, depends on it.
    void sortCandidatesIsAStableSort() {
        QFETCH(int, kind);
        QFETCH(int, n);
        std::mt19937 rng(static_cast<unsigned>(kind * 100000 + n));
        std::uniform_real_distribution<float> unit(1e-6f, 1.0f);
        const size_t count = static_cast<size_t>(n);
        Candidates c;
        switch (kind) {
        case 0: // a near-uniform distribution, as random weights give
            c = make(count, [&](size_t) { return 1.0f / 49152.0f * (1.0f + 1e-3f * unit(rng)); });
            break;
        case 1: // a handful of distinct values, many ties
            c = make(count, [&](size_t) { return 0.001f * float(1 + rng() % 5); });
            break;
        case 2: // subnormal and normal values mixed
            c = make(count, [&](size_t i) {
                return i % 3 == 0 ? std::numeric_limits<float>::denorm_min() * float(1 + rng() % 9)
                                  : unit(rng);
            });
            break;
        case 3: // one value for all: every pass has one digit
            c = make(count, [](size_t) { return 0.25f; });
            break;
        case 4:
            c = make(count, [](size_t i) { return float(i + 1); });
            break;
        default: // many orders of magnitude
            c = make(count, [&](size_t) { return std::ldexp(unit(rng), -int(rng() % 120)); });
        }
        std::shuffle(c.begin(), c.end(), rng);
        const Candidates expected = stableSorted(c);
        sortCandidates(c);
        QVERIFY(c == expected);
    }
};

QTEST_APPLESS_MAIN(TestSampler)
#include "tst_sampler.moc"
