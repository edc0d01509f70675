// Diff, the lineage tree of a folder of snapshots, and every surgery command end to end
// through kvscope-cli (exit codes, JSON shape, bad input) — on stories260K (fixture:
// surgeryfixture.h).
#include "surgeryfixture.h"

#include <QElapsedTimer>

class TestLineage : public SurgeryFixture {
    Q_OBJECT

private slots:
    void initTestCase() { setUp(); }

    // ---- diff

    void diffSelfAndTruncated() {
        KVSCOPE_REQUIRE_DATA(kStories);
        const DiffReport self = diff(m_a, m_a);
        QVERIFY(self.identicalState());
        QCOMPARE(self.firstDivergence, int64_t(-1));
        QCOMPARE(self.commonPrefix, m_a.cacheLength);
        QCOMPARE(self.maxAbs, 0.0);
        QVERIFY(self.fields.empty());
        for (const auto& l : self.layers) {
            QCOMPARE(l.key.maxAbs, 0.0);
            QCOMPARE(l.value.relL2, 0.0);
            QVERIFY(std::fabs(l.key.cosine - 1.0) < 1e-12);
            QCOMPARE(l.heads.size(), std::size_t(m_a.kvHeads));
        }
        auto t = state::truncate(m_a, 10, m_model);
        QVERIFY(t.isOk());
        const DiffReport d = diff(m_a, t.value().snapshot);
        QCOMPARE(d.commonPrefix, int64_t(10));
        QCOMPARE(d.firstDivergence, int64_t(10));
        QCOMPARE(d.tokenA, m_a.tokens[10]);
        QCOMPARE(d.tokenB, -1);
        QCOMPARE(d.comparedPositions, int64_t(10));
        QCOMPARE(d.maxAbs, 0.0);
        QVERIFY(!d.identicalState());
        bool sawCount = false, sawOp = false;
        for (const auto& f : d.fields) {
            sawCount |= f.field == "tokens.count";
            sawOp |= f.field == "lineage.operation";
        }
        QVERIFY(sawCount && sawOp);
        const auto j = d.toJson();
        QCOMPARE(j["tokens"]["first_divergence"].get<int64_t>(), int64_t(10));
    }

    void diffOtherStateAndShapes() {
        KVSCOPE_REQUIRE_DATA(kStories);
        const DiffReport d = diff(m_a, m_b);
        QVERIFY(d.firstDivergence >= 0 && d.firstDivergence < m_a.cacheLength);
        QVERIFY(d.maxAbs > 0);
        QVERIFY(d.layers.back().key.relL2 > 0 && d.layers.back().key.cosine < 1);
        // Different shapes are reported, not a crash.
        Snapshot odd = m_b;
        odd.kvHeads = 1;
        const DiffReport e = diff(m_a, odd);
        QVERIFY(!e.cacheMismatch.empty());
        QVERIFY(e.layers.empty());
        Snapshot broken = m_b;
        broken.layers[2].value = makeBytes({1, 2, 3});
        const DiffReport f = diff(m_a, broken);
        QVERIFY2(f.cacheMismatch.find("layers.2.v") != std::string::npos, f.cacheMismatch.c_str());
    }

    // The verdict and the first difference, decided in core: a replay of a's tokens (its own
    // lineage and sampler, K/V within rounding) is the same state; a corrupted layer is not; a
    // state against itself is identical.
    void diffVerdictSameOrDifferent() {
        KVSCOPE_REQUIRE_DATA(kStories);
        QCOMPARE(diff(m_a, m_a).verdict(), std::string("identical"));
        QCOMPARE(diff(m_a, m_a).firstDifference(), int64_t(-1));
        const Snapshot replay = fed(m_model, m_a.tokens);
        const DiffReport same = diff(m_a, replay);
        QVERIFY(!same.identicalState());
        QVERIFY(same.manifestDifferences() > 0);
        QVERIFY2(same.verdict() == "same",
                 qPrintable(QString::fromStdString(same.toJson().dump()).left(600)));
        QCOMPARE(same.toJson()["verdict"].get<std::string>(), std::string("same"));
        QCOMPARE(same.firstDifference(), int64_t(-1));
        // The cache of layer 1 changed past the tolerance at slot 5: different, first at 5.
        Snapshot bent = m_a;
        auto k = bent.layers[1].key->toVector();
        float x;
        const std::size_t at = (std::size_t(5) * std::size_t(m_a.headDim)) * 4;
        std::memcpy(&x, k.data() + at, 4);
        x += 0.5f;
        std::memcpy(k.data() + at, &x, 4);
        bent.layers[1].key = makeBytes(std::move(k));
        const DiffReport d = diff(m_a, bent);
        QCOMPARE(d.verdict(), std::string("different"));
        QCOMPARE(d.firstDifference(), int64_t(5));
        QCOMPARE(d.toJson()["first_difference"].get<int64_t>(), int64_t(5));
    }

    // ---- tree

    void treeFromFolder() {
        KVSCOPE_REQUIRE_DATA(kStories);
        const QString dir = qtmp("tree");
        QVERIFY(QDir().mkpath(dir));
        const std::string d = dir.toStdString();
        QVERIFY(save(m_a, d + "/root.kvsnap").isOk());
        ForkOptions o;
        o.branches = 2;
        auto f = state::fork(m_a, o);
        QVERIFY(f.isOk());
        QVERIFY(save(f.value().branches[0].snapshot, d + "/f0.kvsnap").isOk());
        QVERIFY(save(f.value().branches[1].snapshot, d + "/f1.kvsnap").isOk());
        auto t = state::truncate(f.value().branches[0].snapshot, 7, m_model);
        QVERIFY(t.isOk());
        QVERIFY(save(t.value().snapshot, d + "/t.kvsnap").isOk());
        QFile junk(dir + "/junk.kvsnap");
        QVERIFY(junk.open(QIODevice::WriteOnly));
        junk.write("not a snapshot");
        junk.close();

        auto tree = scanLineageTree(d);
        QVERIFY2(tree.isOk(), tree.message().c_str());
        auto j = tree.value().toJson();
        qInfo("%s", tree.value().toText().c_str());
        QCOMPARE(j["roots"].size(), std::size_t(1));
        const auto& root = j["roots"][0];
        QCOMPARE(root["file"].get<std::string>(), std::string("root.kvsnap"));
        QCOMPARE(root["operation"].get<std::string>(), std::string("capture"));
        QCOMPARE(root["children"].size(), std::size_t(2));
        const auto& f0 = root["children"][0];
        QCOMPARE(f0["file"].get<std::string>(), std::string("f0.kvsnap"));
        QCOMPARE(f0["operation"].get<std::string>(), std::string("fork"));
        QCOMPARE(f0["parameters"]["branch"].get<int>(), 0);
        QCOMPARE(f0["children"].size(), std::size_t(1));
        QCOMPARE(f0["children"][0]["operation"].get<std::string>(), std::string("truncate"));
        QCOMPARE(f0["children"][0]["tokens"].get<int>(), 7);
        QCOMPARE(root["children"][1]["children"].size(), std::size_t(0));
        QCOMPARE(j["problems"].size(), std::size_t(1)); // junk.kvsnap

        // Missing parent: the forks become roots marked as such.
        QVERIFY(QFile::remove(dir + "/root.kvsnap"));
        auto orphan = scanLineageTree(d);
        QVERIFY(orphan.isOk());
        auto k = orphan.value().toJson();
        QCOMPARE(k["roots"].size(), std::size_t(2));
        for (const auto& r : k["roots"])
            QVERIFY(r.value("parent_missing", false));
        QVERIFY(orphan.value().toText().find("parent not here") != std::string::npos);

        // Duplicate id: reported, the later file is a root of its own.
        QVERIFY(QFile::copy(dir + "/t.kvsnap", dir + "/t2.kvsnap"));
        auto dup = scanLineageTree(d);
        QVERIFY(dup.isOk());
        bool reported = false;
        for (const auto& p : dup.value().problems)
            reported |= p.find("duplicate id") != std::string::npos;
        QVERIFY(reported);
        QCOMPARE(dup.value().toJson()["roots"].size(), std::size_t(3));
    }

    void treeCycles() {
        std::vector<TreeNode> nodes(4);
        const char* names[] = {"a", "b", "c", "d"};
        const char* parents[] = {"c", "a", "b", "a"}; // a -> b -> c -> a, d under a
        for (int i = 0; i < 4; ++i) {
            nodes[std::size_t(i)].id = names[i];
            nodes[std::size_t(i)].parentId = parents[i];
            nodes[std::size_t(i)].file = std::string(names[i]) + ".kvsnap";
        }
        const LineageTree t = buildLineageTree(nodes);
        QCOMPARE(t.roots.size(), std::size_t(1));
        QVERIFY(t.nodes[t.roots[0]].inCycle);
        QCOMPARE(t.problems.size(), std::size_t(1));
        QVERIFY(t.problems[0].find("cycle") != std::string::npos);
        // Every node appears exactly once in the JSON tree.
        std::function<int(const nlohmann::json&)> count = [&](const nlohmann::json& n) {
            int c = 1;
            for (const auto& k : n["children"])
                c += count(k);
            return c;
        };
        QCOMPARE(count(t.toJson()["roots"][0]), 4);
    }

    // A chain 100,000 snapshots deep (a hostile folder; 12,000 overflowed the stack when the
    // walks recursed): linked, printed as text and JSON, without recursion, in linear time.
    void deepChainIsWalkedIteratively() {
        constexpr int n = 100000;
        std::vector<TreeNode> nodes(n);
        for (int i = 0; i < n; ++i) {
            auto& x = nodes[std::size_t(i)];
            x.id = "id" + std::to_string(i);
            x.parentId = i == 0 ? "" : "id" + std::to_string(i - 1);
            x.file = "s" + std::to_string(i) + ".kvsnap";
            x.operation = i == 0 ? "generate" : "continue";
        }
        QElapsedTimer timer;
        timer.start();
        const LineageTree t = buildLineageTree(std::move(nodes));
        QCOMPARE(t.roots.size(), std::size_t(1));
        const std::string text = t.toText();
        const std::string jsonText = t.toJsonText();
        const nlohmann::json j = t.toJson();
        const qint64 ms = timer.elapsed();
        qInfo("100,000-deep chain: linked and printed in %lld ms; text %zu bytes, JSON %zu bytes",
              ms, text.size(), jsonText.size());
        QVERIFY2(text.size() < std::size_t(n) * 250, "the text grew faster than the chain");
        QVERIFY(text.find("[depth 99999]") != std::string::npos);
        // The streamed JSON is the document toJson() builds (parsed: nlohmann parses without
        // recursion; only its dump recurses).
        const auto parsed = nlohmann::json::parse(jsonText);
        QCOMPARE(parsed["count"].get<int>(), n);
        const nlohmann::json* node = &parsed["roots"][0];
        const nlohmann::json* mine = &j["roots"][0];
        for (int depth = 0; depth < n; ++depth) {
            QVERIFY((*node)["file"] == (*mine)["file"]);
            if (depth + 1 < n) {
                QCOMPARE((*node)["children"].size(), std::size_t(1));
                node = &(*node)["children"][0];
                mine = &(*mine)["children"][0];
            } else {
                QVERIFY((*node)["children"].empty());
            }
        }
        QVERIFY2(ms < 20000, "quadratic somewhere"); // a guard against O(n^2), not a timing
    }

    // ---- CLI end to end

    void cliCommands() {
        KVSCOPE_REQUIRE_DATA(kStories);
        if (!QFileInfo::exists(kCli))
            QFAIL("kvscope-cli not built");
        const QString model = QString::fromStdString(testdata::path(kStories));
        const QString a = qtmp("cli-a.kvsnap"), b = qtmp("cli-b.kvsnap");
        QVERIFY(save(m_a, a.toStdString()).isOk());
        QVERIFY(save(m_b, b.toStdString()).isOk());

        // truncate
        auto r =
            cli({"truncate", a, "--at", "10", "-m", model, "-o", qtmp("cli-t.kvsnap"), "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        QCOMPARE(r.json()["report"].toObject()["at"].toInt(), 10);
        QCOMPARE(r.json()["report"].toObject()["dropped_count"].toInt(),
                 int(m_a.tokens.size()) - 10);
        QVERIFY(!r.json()["report"].toObject()["dropped_text"].toString().isEmpty());
        // Bad --at: exit 1, the field named, an existing output untouched.
        const QString keep = qtmp("keep.kvsnap");
        {
            QFile f(keep);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write("precious");
        }
        for (const QString bad : {"0", "1000"}) {
            r = cli({"truncate", a, "--at", bad, "-m", model, "-o", keep});
            QCOMPARE(r.code, 1);
            QVERIFY2(r.err.contains("at = "), r.err.constData());
        }
        // fork (no model), then tree over the folder
        const QString forks = qtmp("cli-forks");
        r = cli({"fork", a, "-n", "2", "-o", forks, "--temperature", "1", "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        QCOMPARE(r.json()["branches"].toArray().size(), 2);
        for (const auto& br : r.json()["branches"].toArray())
            QVERIFY(QFileInfo::exists(br.toObject()["file"].toString()));
        QVERIFY(QFileInfo::exists(forks + "/cli-a-fork1.kvsnap"));
        r = cli(
            {"fork", a, "-n", "2", "-o", forks + "-steps", "--steps", "4", "-m", model, "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        QCOMPARE(r.json()["branches"].toArray()[0].toObject()["generated"].toArray().size(), 4);
        r = cli({"fork", a, "-n", "2", "-o", forks + "-x", "--steps", "4"});
        QCOMPARE(r.code, 2); // --steps without --model
        QVERIFY(QFile::copy(a, forks + "/cli-a.kvsnap"));
        r = cli({"tree", forks, "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        QCOMPARE(r.json()["roots"].toArray().size(), 1);
        QCOMPARE(r.json()["roots"].toArray()[0].toObject()["children"].toArray().size(), 2);
        r = cli({"tree", forks});
        QCOMPARE(r.code, 0);
        QVERIFY(r.out.contains("fork"));
        r = cli({"tree", qtmp("no-such-dir")});
        QCOMPARE(r.code, 1);

        // patch
        r = cli({"patch", a, "--from", b, "--layer", "1", "-o", qtmp("cli-p.kvsnap"), "-m", model,
                 "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        QCOMPARE(r.json()["report"].toObject()["logits"].toString(), QString("recomputed"));
        QVERIFY(r.json()["report"].toObject()["key_elements_changed"].toInt() > 0);
        r = cli({"patch", a, "--from", b, "--layer", "99", "-o", keep});
        QCOMPARE(r.code, 1);
        QVERIFY2(r.err.contains("layer"), r.err.constData());
        r = cli({"patch", a, "--from", qtmp("cli-t.kvsnap"), "--layer", "0", "-o", keep});
        QCOMPARE(r.code, 1); // mismatched lengths, no range
        QVERIFY2(r.err.contains("positions"), r.err.constData());
        r = cli({"patch", a, "--from", b, "--layer", "0", "--positions", "3-5", "-o", keep});
        QCOMPARE(r.code, 2);
        r = cli({"patch", a, "--from", b, "--layer", "0", "--head", "1", "--positions", "2:6", "-o",
                 qtmp("cli-ph.kvsnap"), "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        QCOMPARE(r.json()["report"].toObject()["logits"].toString(), QString("stale"));

        // splice
        r = cli({"splice", a, "--from", b, "--range", "1:4", "--at", "2", "-m", model, "-o",
                 qtmp("cli-s.kvsnap"), "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        const auto rep = r.json()["report"].toObject();
        QCOMPARE(rep["inserted"].toInt(), 3);
        QVERIFY(rep["validation"].toObject()["ok"].toBool());
        QVERIFY(rep["drift"].toObject()["cache"].toObject()["layers"].toArray().size() > 0);
        r = cli(
            {"splice", a, "--from", b, "--range", "1:4", "--at", "999", "-m", model, "-o", keep});
        QCOMPARE(r.code, 1);
        QVERIFY2(r.err.contains("at = "), r.err.constData());
        r = cli({"verify", qtmp("cli-s.kvsnap"), "-m", model, "--json"});
        QVERIFY2(r.code == 0, r.out.constData());

        // diff
        r = cli({"diff", a, qtmp("cli-t.kvsnap"), "--json"});
        QVERIFY2(r.code == 0, r.err.constData());
        const auto tok = r.json()["tokens"].toObject();
        QCOMPARE(tok["common_prefix"].toInt(), 10);
        QCOMPARE(tok["first_divergence"].toInt(), 10);
        QVERIFY(r.json()["cache"].toObject()["layers"].toArray().size() == int(m_a.layers.size()));
        QVERIFY(r.json()["fields"].toArray().size() > 0);
        r = cli({"diff", a, b, "--heads"});
        QCOMPARE(r.code, 0);
        r = cli({"diff", a, qtmp("keep.kvsnap")});
        QCOMPARE(r.code, 1);

        // Nothing overwrote the existing output.
        QFile f(keep);
        QVERIFY(f.open(QIODevice::ReadOnly));
        QCOMPARE(f.readAll(), QByteArray("precious"));
    }
};

QTEST_GUILESS_MAIN(TestLineage)
#include "tst_lineage.moc"
