// Per-head eviction: the cache's head mask (KvCache::headMask) in the forward pass, the budget
// allocations of the survival lab (probes/eviction.h: pyramid, head-adaptive) and the ledger
// of a head-masked state (manifest v2, verify, restore, continue, truncate, diff, refusals,
// the CLI). The demo model has one KV head (MQA), stories260K four.
#include "engine/attention.h"
#include "engine/kvcache.h"
#include "state/probes/survive.h"
#include "surgeryfixture.h"
#include "testmodel.h"

#include <algorithm>
#include <numeric>
#include <set>

namespace {

const char* kDemo = KVSCOPE_TESTS_DIR "/../resources/demo-model";

// A copy of `cache` without the slots in `drop` (positions kept for the others).
KvCache withoutSlots(const KvCache& cache, const std::set<int64_t>& drop) {
    const int64_t T = cache.length(), H = cache.kvHeads();
    const size_t row = size_t(cache.headDim()) * (cache.dtype() == "f32" ? 4 : 2);
    std::vector<int64_t> positions;
    for (int64_t t = 0; t < T; ++t)
        if (!drop.count(t))
            positions.push_back(cache.positions()[size_t(t)]);
    std::vector<KvCache::RawLayer> layers(size_t(cache.layers()));
    for (int l = 0; l < int(cache.layers()); ++l) {
        const auto k = cache.rawKey(l), v = cache.rawValue(l);
        for (int64_t h = 0; h < H; ++h)
            for (int64_t t = 0; t < T; ++t)
                if (!drop.count(t)) {
                    const size_t at = size_t(h * T + t) * row;
                    layers[size_t(l)].key.insert(layers[size_t(l)].key.end(), k.begin() + long(at),
                                                 k.begin() + long(at + row));
                    layers[size_t(l)].value.insert(layers[size_t(l)].value.end(),
                                                   v.begin() + long(at),
                                                   v.begin() + long(at + row));
                }
    }
    auto c = KvCache::fromRaw(cache.dtype(), cache.device(), H, cache.headDim(), positions,
                              std::vector<uint8_t>(positions.size(), 1), layers);
    if (!c)
        qFatal("fromRaw: %s", c.message().c_str());
    return c.value();
}

// A head mask hiding `hidden` slots from (layer, head) pairs for which `where` is true.
std::vector<uint8_t> hiding(const KvCache& c, const std::set<int64_t>& hidden,
                            const std::function<bool(int64_t, int64_t)>& where) {
    const int64_t T = c.length(), H = c.kvHeads();
    std::vector<uint8_t> m(size_t(c.layers() * H * T), 1);
    for (int64_t l = 0; l < c.layers(); ++l)
        for (int64_t h = 0; h < H; ++h)
            if (where(l, h))
                for (int64_t t : hidden)
                    m[size_t((l * H + h) * T + t)] = 0;
    return m;
}

// The logits after feeding `token` to a session over `cache`.
std::vector<float> nextLogits(const std::shared_ptr<const Model>& model, const Snapshot& s,
                              KvCache cache, int32_t token, Observer* observer = nullptr) {
    Session session(model, std::move(cache), s.tokens, s.nextPosition, s.lastLogits);
    session.setObserver(observer);
    const int32_t one[1] = {token};
    if (Status st = session.feed(one); !st)
        qFatal("feed: %s", st.message().c_str());
    return session.lastLogits();
}

// Records "attn_probs" ([H, T, P]) of every layer.
class ProbsRecorder : public Observer {
public:
    bool wants(std::string_view name, int) const override { return name == "attn_probs"; }
    void observe(std::string_view, int layer, const HostTensor& value) override {
        if (probs.size() <= size_t(layer))
            probs.resize(size_t(layer) + 1);
        probs[size_t(layer)] = value;
    }
    std::vector<HostTensor> probs;
};

// Attention each slot receives from every query of the buffer, per (layer, KV head):
// [layers][kvHeads][T], from a replay's queries (the test's own sums, as H2O scores them).
std::vector<std::vector<std::vector<double>>> headScores(const std::shared_ptr<const Model>& model,
                                                         const std::vector<int32_t>& tokens) {
    Session replay(model);
    QueryRecorder rec(int64_t(1) << 40);
    replay.setObserver(&rec);
    if (Status st = replay.feed(tokens); !st)
        qFatal("replay: %s", st.message().c_str());
    const int64_t T = int64_t(tokens.size());
    const auto& mc = model->config();
    std::vector<std::vector<std::vector<double>>> out(
        size_t(mc.nLayers),
        std::vector<std::vector<double>>(size_t(mc.nKvHeads), std::vector<double>(size_t(T))));
    for (int l = 0; l < int(mc.nLayers); ++l)
        for (int h = 0; h < int(mc.nHeads); ++h) {
            auto p = attentionPattern(*model, replay.cache(), rec.queries(l), T, l, h);
            if (!p)
                qFatal("attention: %s", p.message().c_str());
            for (int64_t q = 0; q < T; ++q)
                for (int64_t j = 0; j < T; ++j)
                    out[size_t(l)][size_t(p.value().kvHead)][size_t(j)] +=
                        p.value().probs[size_t(q * T + j)];
        }
    return out;
}

// Which slots each (layer, head) of a compressed state keeps, as token indices.
std::vector<std::set<int64_t>> keptSets(const Compressed& c) {
    const Snapshot& s = c.snapshot;
    const int64_t L = int64_t(s.layers.size()), H = s.kvHeads, S = s.cacheLength;
    std::vector<std::set<int64_t>> out(size_t(L * H));
    for (int64_t r = 0; r < L * H; ++r)
        for (int64_t i = 0; i < S; ++i)
            if (s.headMask.empty() || s.headMask[size_t(r * S + i)])
                out[size_t(r)].insert(c.keptTokens[size_t(i)]);
    return out;
}

} // namespace

class TestHeadMask : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    std::shared_ptr<const Model> m_demo, m_stories;
    Snapshot m_demoState, m_storiesState;

    std::vector<std::pair<std::shared_ptr<const Model>, const Snapshot*>> both() const {
        return {{m_demo, &m_demoState}, {m_stories, &m_storiesState}};
    }
    KvCache cacheOf(const std::shared_ptr<const Model>& model, const Snapshot& s) {
        auto r = restore(s, model);
        if (!r)
            qFatal("restore: %s", r.message().c_str());
        return r.value().session.cache();
    }

private slots:
    void initTestCase() {
        QVERIFY(m_dir.isValid());
        auto demo = Model::load(kDemo);
        QVERIFY2(demo, demo.message().c_str());
        m_demo = demo.value();
        m_demoState =
            generated(m_demo, "And God said, Let there be light: and there was light.", 24);
        KVSCOPE_REQUIRE_DATA(kStories);
        m_stories = testdata::loadModel(kStories);
        m_storiesState = generated(m_stories, "Once upon a time, there was a little girl", 24);
    }

    // The forward pass honours the head mask: hiding slots from every head equals removing
    // them (and equals the slot mask); hiding them in one layer only changes that layer's
    // attention, whose probabilities at the hidden slots are 0 for that head's group alone.
    void forwardHonoursHeadMask() {
        for (const auto& [model, state] : both()) {
            const KvCache full = cacheOf(model, *state);
            const std::set<int64_t> hidden{2, 5, 9};
            const int32_t token = state->tokens[3];
            const auto removed = nextLogits(model, *state, withoutSlots(full, hidden), token);

            KvCache everywhere = full;
            QVERIFY(everywhere.setHeadMask(hiding(full, hidden, [](auto, auto) { return true; })));
            const auto masked = nextLogits(model, *state, everywhere, token);
            QVERIFY2(maxAbsDiff(masked, removed) < 1e-4,
                     qPrintable(QString::number(maxAbsDiff(masked, removed))));
            std::vector<uint8_t> slotMask(size_t(full.length()), 1);
            for (int64_t t : hidden)
                slotMask[size_t(t)] = 0;
            auto bySlot = full.withPositions(full.positions(), slotMask);
            QVERIFY(bySlot);
            QCOMPARE(full.visibleSlots(), full.length());
            QCOMPARE(bySlot.value().visibleSlots(), full.length() - int64_t(hidden.size()));
            QVERIFY(maxAbsDiff(nextLogits(model, *state, bySlot.value(), token), masked) < 1e-5);

            // Layer 1, KV head 0 only.
            KvCache one = full;
            QVERIFY(one.setHeadMask(
                hiding(full, hidden, [](int64_t l, int64_t h) { return l == 1 && h == 0; })));
            ProbsRecorder probs;
            const auto partial = nextLogits(model, *state, one, token, &probs);
            QVERIFY(maxAbsDiff(partial, nextLogits(model, *state, full, token)) > 1e-4);
            QVERIFY(maxAbsDiff(partial, masked) > 1e-4);
            const auto& mc = model->config();
            const int64_t P = full.length() + 1, G = mc.nHeads / mc.nKvHeads;
            for (int l = 0; l < 2; ++l)
                for (int64_t h = 0; h < mc.nHeads; ++h) {
                    const HostTensor& p = probs.probs[size_t(l)]; // [H, 1, P]
                    QCOMPARE(p.dim(2), P);
                    for (int64_t t : hidden) {
                        const float v = p.data[size_t(h * P + t)];
                        if (l == 1 && h / G == 0)
                            QCOMPARE(v, 0.0f);
                        else
                            QVERIFY(v > 0);
                    }
                }
            // attentionPattern (the GUI's attention view) gives the forward pass's probabilities:
            // the hidden slots 0 for that group, the same row as attn_probs for every head.
            Session session(model, one, state->tokens, state->nextPosition, state->lastLogits);
            QueryRecorder rec;
            session.setObserver(&rec);
            QVERIFY(session.feed(std::vector<int32_t>{token}));
            for (int64_t h = 0; h < mc.nHeads; ++h) {
                auto pattern =
                    attentionPattern(*model, session.cache(), rec.queries(1), 1, 1, int(h));
                QVERIFY2(pattern, pattern.message().c_str());
                for (int64_t j = 0; j < P; ++j)
                    QVERIFY(std::abs(pattern.value().probs[size_t(j)] -
                                     probs.probs[1].data[size_t(h * P + j)]) < 1e-5);
            }
        }
    }

    // Pyramid: each layer's heads keep one set; the sets shrink with depth and spend L x k
    // slots in all; every layer keeps the mandatory slots and, beyond them, its own best by
    // the attention its heads received (recomputed here); dropped entries hold zeros.
    void pyramidAllocation() {
        for (const auto& [model, state] : both()) {
            auto c =
                compress(*state, model,
                         {.policy = "h2o", .budget = 0.25, .params = {{"allocation", "pyramid"}}});
            QVERIFY2(c, c.message().c_str());
            const int64_t L = int64_t(state->layers.size()), H = state->kvHeads,
                          T = state->cacheLength, k = c.value().budgetSlots;
            QCOMPARE(k, std::llround(0.25 * double(T)));
            const auto& per = c.value().keptPerHead;
            QCOMPARE(int64_t(per.size()), L * H);
            int64_t sumLayers = 0;
            for (int64_t l = 0; l < L; ++l) {
                for (int64_t h = 1; h < H; ++h)
                    QCOMPARE(per[size_t(l * H + h)], per[size_t(l * H)]);
                if (l > 0)
                    QVERIFY(per[size_t(l * H)] <= per[size_t((l - 1) * H)]);
                sumLayers += per[size_t(l * H)];
            }
            QCOMPARE(sumLayers, L * k);
            QVERIFY(per.front() > per.back());
            QVERIFY(!c.value().snapshot.headMask.empty());
            QCOMPARE(c.value().parameters["allocation"].get<std::string>(), std::string("pyramid"));

            const auto sets = keptSets(c.value());
            const auto scores = headScores(model, state->tokens);
            const int64_t recent = std::stoll(c.value().parameters["recent"].get<std::string>());
            std::set<int64_t> mandatory;
            for (int64_t t = T - std::min(recent, k); t < T; ++t)
                mandatory.insert(t);
            for (int64_t l = 0; l < L; ++l) {
                const auto& kept = sets[size_t(l * H)];
                for (int64_t t : mandatory)
                    QVERIFY(kept.count(t));
                std::vector<double> layer(size_t(T), 0.0);
                for (int64_t h = 0; h < H; ++h)
                    for (int64_t t = 0; t < T; ++t)
                        layer[size_t(t)] += scores[size_t(l)][size_t(h)][size_t(t)];
                double minKept = INFINITY, maxDropped = -INFINITY;
                for (int64_t t = 0; t < T; ++t)
                    if (!mandatory.count(t))
                        (kept.count(t) ? minKept : maxDropped) =
                            kept.count(t) ? std::min(minKept, layer[size_t(t)])
                                          : std::max(maxDropped, layer[size_t(t)]);
                QVERIFY2(minKept >= maxDropped - 1e-6,
                         qPrintable(QString("layer %1: kept %2 < dropped %3")
                                        .arg(l)
                                        .arg(minKept)
                                        .arg(maxDropped)));
            }
            // Kept entries are the original bytes, dropped ones zeros.
            const Snapshot& s = c.value().snapshot;
            const int64_t S = s.cacheLength, D = s.headDim;
            for (int64_t l = 0; l < L; ++l) {
                const auto* orig =
                    reinterpret_cast<const float*>(state->layers[size_t(l)].key->data());
                const auto* mine = reinterpret_cast<const float*>(s.layers[size_t(l)].key->data());
                for (int64_t h = 0; h < H; ++h)
                    for (int64_t i = 0; i < S; ++i) {
                        const int64_t t = c.value().keptTokens[size_t(i)];
                        const bool keep = s.headMask[size_t((l * H + h) * S + i)] != 0;
                        for (int64_t d = 0; d < D; ++d)
                            QCOMPARE(mine[(h * S + i) * D + d],
                                     keep ? orig[(h * T + t) * D + d] : 0.0f);
                    }
            }
        }
    }

    // Head-adaptive: per layer, the heads spend H x k entries in all, each keeps the mandatory
    // slots, and beyond them every kept (head, slot) has at least the score of every dropped
    // one of that layer; with several KV heads the heads' counts differ somewhere.
    void headAdaptiveAllocation() {
        for (const auto& [model, state] : both()) {
            auto c = compress(
                *state, model,
                {.policy = "h2o", .budget = 0.25, .params = {{"allocation", "head-adaptive"}}});
            QVERIFY2(c, c.message().c_str());
            const int64_t L = int64_t(state->layers.size()), H = state->kvHeads,
                          T = state->cacheLength, k = c.value().budgetSlots;
            const auto sets = keptSets(c.value());
            const auto scores = headScores(model, state->tokens);
            const int64_t recent = std::stoll(c.value().parameters["recent"].get<std::string>());
            bool countsDiffer = false, layersDiffer = false;
            for (int64_t l = 0; l < L; ++l) {
                int64_t total = 0;
                double minKept = INFINITY, maxDropped = -INFINITY;
                for (int64_t h = 0; h < H; ++h) {
                    const auto& kept = sets[size_t(l * H + h)];
                    total += int64_t(kept.size());
                    countsDiffer |= kept.size() != sets[size_t(l * H)].size();
                    for (int64_t t = 0; t < T; ++t) {
                        if (t >= T - std::min(recent, k)) {
                            QVERIFY(kept.count(t)); // mandatory
                            continue;
                        }
                        const double v = scores[size_t(l)][size_t(h)][size_t(t)];
                        if (kept.count(t))
                            minKept = std::min(minKept, v);
                        else
                            maxDropped = std::max(maxDropped, v);
                    }
                }
                QCOMPARE(total, H * k);
                QVERIFY2(minKept >= maxDropped - 1e-6,
                         qPrintable(QString("layer %1: kept %2 < dropped %3")
                                        .arg(l)
                                        .arg(minKept)
                                        .arg(maxDropped)));
                layersDiffer |= l > 0 && sets[size_t(l * H)] != sets[0];
            }
            if (H > 1)
                QVERIFY(countsDiffer);
            QVERIFY(layersDiffer); // a per-layer choice, not the uniform one
        }
        // Positional and random scores are the same in every head: one choice (no head mask).
        auto s = compress(
            m_storiesState, m_stories,
            {.policy = "sink-window", .budget = 0.25, .params = {{"allocation", "head-adaptive"}}});
        QVERIFY2(s, s.message().c_str());
        QVERIFY(s.value().snapshot.headMask.empty());
    }

    // A head-masked state on disk and on: ledger version 2 with the head mask, loaded equal,
    // verified clean with a note, restored with its mask, continued (new slots seen by every
    // head) and captured clean, diffed against itself without the mask.
    void headMaskedLedger() {
        for (const auto& [model, state] : both()) {
            // snapkv's observation window is mandatory; a small one leaves the pyramid room.
            auto c = compress(*state, model,
                              {.policy = "snapkv",
                               .budget = 0.5,
                               .params = {{"allocation", "pyramid"}, {"window", "8"}}});
            QVERIFY2(c, c.message().c_str());
            const Snapshot& s = c.value().snapshot;
            QVERIFY(s.lineage.parameters.contains("kept_per_head"));
            const std::string path = m_dir.filePath("pyramid.kvsnap").toStdString();
            QVERIFY(save(s, path).isOk());
            auto manifest = loadManifest(path);
            QVERIFY(manifest);
            QCOMPARE(manifest.value()["kvscope_ledger"].get<int>(), 2);
            QCOMPARE(manifest.value()["head_mask"]["count"].get<size_t>(), s.headMask.size());
            auto loaded = load(path);
            QVERIFY2(loaded, loaded.message().c_str());
            QCOMPARE(loaded.value().headMask, s.headMask);
            auto v = verifyFile(path, model);
            QVERIFY2(!v.report.hasErrors(), qPrintable(ids(v.report)));
            QVERIFY(v.equivalence && v.equivalence->equivalent);
            bool note = false;
            for (const auto& x : v.report.violations)
                note |= x.id == "head_mask.partial";
            QVERIFY2(note, qPrintable(ids(v.report)));

            // A plain state stays version 1.
            const std::string plain = m_dir.filePath("plain.kvsnap").toStdString();
            QVERIFY(save(*state, plain).isOk());
            QCOMPARE(loadManifest(plain).value()["kvscope_ledger"].get<int>(), 1);
            QVERIFY(!loadManifest(plain).value().contains("head_mask"));

            auto r = restore(s, model);
            QVERIFY2(r, r.message().c_str());
            QCOMPARE(r.value().session.cache().headMask(), s.headMask);
            Session session = r.value().session;
            Sampler greedy(SamplerSettings{0.0f, 0.9f, 0, 42});
            QVERIFY(session.generate(5, greedy));
            CaptureOptions co;
            co.sampler = &greedy;
            co.parent = &s;
            auto next = capture(session, co);
            QVERIFY(next);
            const int64_t L = int64_t(s.layers.size()), H = s.kvHeads, S = s.cacheLength;
            QCOMPARE(int64_t(next.value().headMask.size()), L * H * (S + 5));
            for (int64_t row = 0; row < L * H; ++row)
                for (int64_t i = 0; i < S + 5; ++i)
                    QCOMPARE(next.value().headMask[size_t(row * (S + 5) + i)],
                             i < S ? s.headMask[size_t(row * S + i)] : uint8_t(1));
            auto nv = verifySnapshot(next.value(), model);
            QVERIFY2(!nv.report.hasErrors(), qPrintable(ids(nv.report)));
            QVERIFY(nv.equivalence && nv.equivalence->equivalent);

            Snapshot noMask = s;
            noMask.headMask.clear();
            const DiffReport d = diff(s, noMask);
            QVERIFY(!d.identicalState());
            QVERIFY(d.headMask.differ > 0);
            QCOMPARE(d.toJson()["head_mask"]["differ"].get<int64_t>(), d.headMask.differ);
            QVERIFY(diff(s, s).identicalState());
        }
    }

    // A hand-made head mask over a full state: truncate keeps each row's prefix; patch and
    // splice refuse it by name; a mask of the wrong size or with a 2 is refused by verify
    // (structural: not even a forced restore takes it); the fault lab refuses it.
    void surgeryAndRefusals() {
        const auto& model = m_stories;
        const Snapshot& state = m_storiesState;
        const KvCache full = cacheOf(model, state);
        Snapshot m = state;
        m.headMask = hiding(full, {1, 3}, [](int64_t l, int64_t h) { return l == 2 && h == 1; });
        auto mv = verifySnapshot(m, model);
        QVERIFY2(!mv.report.hasErrors(), qPrintable(ids(mv.report)));

        const int64_t T = state.cacheLength, at = T - 4;
        auto t = truncate(m, at, model);
        QVERIFY2(t, t.message().c_str());
        const int64_t rows = int64_t(state.layers.size()) * state.kvHeads;
        QCOMPARE(int64_t(t.value().snapshot.headMask.size()), rows * at);
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t i = 0; i < at; ++i)
                QCOMPARE(t.value().snapshot.headMask[size_t(r * at + i)],
                         m.headMask[size_t(r * T + i)]);
        auto tv = verifySnapshot(t.value().snapshot, model);
        QVERIFY2(!tv.report.hasErrors(), qPrintable(ids(tv.report)));

        auto p = patch(m, state, po(0), model);
        QVERIFY(!p);
        QVERIFY2(p.message().find("head mask") != std::string::npos, p.message().c_str());
        auto sp = splice(state, m, {.begin = 0, .end = 2, .at = 1}, model);
        QVERIFY(!sp);
        QVERIFY2(sp.message().find("head mask") != std::string::npos, sp.message().c_str());

        for (auto [bad, id] :
             {std::pair{std::vector<uint8_t>(m.headMask.begin(), m.headMask.end() - 1),
                        "head_mask.shape"},
              {m.headMask, "head_mask.values"}}) {
            Snapshot h = m;
            h.headMask = bad;
            if (std::string(id) == "head_mask.values")
                h.headMask[7] = 2;
            auto hv = verifySnapshot(h, model);
            bool found = false;
            for (const auto& x : hv.report.violations)
                found |= x.id == id && x.structural;
            QVERIFY2(found, qPrintable(ids(hv.report)));
            auto forced = restore(h, model, {.force = true, .validate = {}});
            QVERIFY(!forced);
            QVERIFY2(forced.message().find("head") != std::string::npos, forced.message().c_str());
        }
    }

    // The CLI: survive with an allocation saves a restorable state whose JSON says what each
    // head kept; verify accepts it; the sweep runs the allocations for the scored policies.
    void cli() {
        const std::string src = m_dir.filePath("src.kvsnap").toStdString();
        QVERIFY(save(m_storiesState, src).isOk());
        const QString out = m_dir.filePath("adaptive.kvsnap");
        const QString modelPath = QString::fromStdString(testdata::path(kStories));
        const QString tok = QString::fromStdString(testdata::path(kStoriesTok));
        auto r = ::cli({"survive", QString::fromStdString(src), "-m", modelPath, "-t", tok,
                        "--policy", "tova", "--budget", "0.25", "--param",
                        "allocation=head-adaptive", "-n", "4", "-o", out, "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        const QJsonObject j = r.json();
        QCOMPARE(j["parameters"].toObject()["allocation"].toString(), QString("head-adaptive"));
        const QJsonArray per = j["kept_per_head"].toArray();
        QCOMPARE(per.size(), qsizetype(m_storiesState.layers.size()) * m_storiesState.kvHeads);
        auto c = compress(
            m_storiesState, m_stories,
            {.policy = "tova", .budget = 0.25, .params = {{"allocation", "head-adaptive"}}});
        QVERIFY(c);
        for (qsizetype i = 0; i < per.size(); ++i)
            QCOMPARE(per[i].toInteger(), c.value().keptPerHead[size_t(i)]);
        auto v = ::cli({"verify", out, "-m", modelPath, "-t", tok, "--json"});
        QVERIFY2(v.code == 0, (v.out + v.err).constData());

        auto bad = ::cli({"survive", QString::fromStdString(src), "-m", modelPath, "-t", tok,
                          "--policy", "h2o", "--param", "allocation=diagonal"});
        QVERIFY(bad.code != 0);
        QVERIFY2(bad.err.contains("allocation=diagonal"), bad.err.constData());
    }
};

QTEST_GUILESS_MAIN(TestHeadMask)
#include "tst_headmask.moc"
