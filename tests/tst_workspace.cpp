// The workspace (core/workspace): lineage rules, restore safety, the one verdict, diff of the
// whole ledger and drift — each result compared with what kvscope-cli prints for the same
// snapshot files (`verify|diff|drift --json`), so the GUI (which runs the workspace) and the
// CLI cannot disagree.
#include "testmodel.h"

#include "engine/session.h"
#include "state/surgery/faults.h"
#include "state/ledger/snapshotio.h"
#include "state/verify/verifyfile.h"
#include "util/demomodel.h"
#include "util/fileio.h"
#include "insights/lab.h"
#include "state/surgery/diff.h"
#include "tokenizer/tokenizer.h"
#include "workspace/snapshotmodel.h"
#include "workspace/workspace.h"

#include <QFileInfo>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include <filesystem>
#include <nlohmann/json.hpp>

using namespace kvscope;
namespace st = kvscope::state;

namespace {

const QString kStories = "models/stories260K/stories260K.bin";
const QString kStoriesTok = "models/stories260K/tok512.bin";
const QString kAidreams = "models/aidreams260K/aidreams260K.bin";
const QString kAidreamsTok = "models/aidreams260K/tok512.bin";

struct Cli {
    int code = -1;
    QByteArray out, err;
    nlohmann::json json() const { return nlohmann::json::parse(out.toStdString(), nullptr, false); }
};

Cli cli(const QStringList& args) {
    QProcess p;
    p.start(KVSCOPE_CLI, args);
    p.waitForFinished(600000);
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, p.readAllStandardOutput(),
            p.readAllStandardError()};
}

QStringList modelArgs() {
    return {"-m", QString::fromStdString(testdata::path(kStories)), "-t",
            QString::fromStdString(testdata::path(kStoriesTok))};
}

// Runs a prompt on the workspace's live session and generates `steps` greedy tokens.
void runPrompt(ws::Workspace& w, const std::string& text, int steps) {
    auto prompt = ws::preparePrompt({.text = text}, *w.model());
    QVERIFY2(prompt, prompt.message().c_str());
    w.liveSession()->beginRun(prompt.value().meta);
    QVERIFY(w.liveSession()->feed(prompt.value().tokens));
    if (steps > 0) {
        auto r = w.liveSession()->generate(steps, {});
        QVERIFY2(r, r.message().c_str());
    }
}

void generate(ws::Workspace& w, int steps) {
    auto r = w.liveSession()->generate(steps, {});
    QVERIFY2(r, r.message().c_str());
}

std::string saved(const ws::Workspace& w, const std::string& id, const QTemporaryDir& dir) {
    const std::string path = dir.filePath(QString::fromStdString(id) + ".kvsnap").toStdString();
    if (!st::save(*w.find(id)->snapshot, path))
        qFatal("save failed");
    return path;
}

} // namespace

class TestWorkspace : public QObject {
    Q_OBJECT

    std::shared_ptr<const Model> m_stories, m_aidreams;

private slots:
    void initTestCase() {
        KVSCOPE_REQUIRE_DATA(kStories);
        KVSCOPE_REQUIRE_DATA(kAidreams);
        m_stories = testdata::loadModel(kStories, kStoriesTok);
        m_aidreams = testdata::loadModel(kAidreams, kAidreamsTok);
    }

    void lineageRules() {
        ws::Workspace w;
        w.setModel(m_stories);
        // A capture after a fresh run is a root.
        runPrompt(w, "Once upon a time", 4);
        auto a = w.capture();
        QVERIFY(a);
        QCOMPARE(w.find(a.value())->snapshot->lineage.parentId, std::string());
        QCOMPARE(w.find(a.value())->snapshot->lineage.operation, std::string("capture"));
        // Continuing the live session: the next capture is a child, the continuation recorded.
        generate(w, 3);
        auto b = w.capture();
        QVERIFY(b);
        const auto& lb = w.find(b.value())->snapshot->lineage;
        QCOMPARE(lb.parentId, a.value());
        QCOMPARE(lb.operation, std::string("continue"));
        QCOMPARE(lb.parameters.value("generated", -1), 3);
        // A fresh run after that: a root again, not a child of the last capture.
        runPrompt(w, "The cat", 2);
        auto c = w.capture();
        QVERIFY(c);
        QCOMPARE(w.find(c.value())->snapshot->lineage.parentId, std::string());
        // Restore A, continue, capture: a child of A.
        QVERIFY(w.restore(a.value(), false));
        QCOMPARE(w.parentId(), a.value());
        generate(w, 2);
        auto d = w.capture();
        QVERIFY(d);
        QCOMPARE(w.find(d.value())->snapshot->lineage.parentId, a.value());
        QCOMPARE(w.find(d.value())->snapshot->lineage.operation, std::string("continue"));
        // Truncating records the operation with core's parameters, as a child of the
        // live session's parent (D: nothing happened since).
        auto t = w.truncateLive(5);
        QVERIFY2(t, t.message().c_str());
        const auto& lt = w.find(t.value())->snapshot->lineage;
        QCOMPARE(lt.parentId, d.value());
        QCOMPARE(lt.operation, std::string("truncate"));
        QCOMPARE(lt.parameters.value("at", -1), 5);
        QVERIFY(lt.parameters.contains("dropped_tokens"));
        QCOMPARE(lt.parameters.value("logits", std::string()), std::string("recomputed"));
        QCOMPARE(int64_t(w.live()->tokens().size()), int64_t(5));
        QCOMPARE(w.parentId(), t.value());
        // The truncated live session verifies clean (logits recomputed, positions fixed).
        auto v = w.verify("");
        QVERIFY(v);
        QVERIFY2(v.value().report.ok(), v.value().toJson().dump().c_str());
        // Truncating after generating more first captures what was cut.
        generate(w, 2);
        auto t2 = w.truncateLive(6);
        QVERIFY(t2);
        const std::string cut = w.find(t2.value())->snapshot->lineage.parentId;
        QCOMPARE(w.find(cut)->snapshot->lineage.parentId, t.value());
        QCOMPARE(w.find(cut)->snapshot->lineage.operation, std::string("continue"));
        // Another model: a new root, even right after a restore.
        QVERIFY(w.restore(a.value(), false));
        w.setModel(m_aidreams);
        QCOMPARE(w.parentId(), std::string());
        runPrompt(w, "Once upon a time", 2);
        auto e = w.capture();
        QVERIFY(e);
        QCOMPARE(w.find(e.value())->snapshot->lineage.parentId, std::string());
        // Out-of-range truncation is an error and leaves the live session as it was.
        const auto before = w.live()->tokens();
        QVERIFY(!w.truncateLive(0));
        QVERIFY(w.live()->tokens() == before);
    }

    // The live session keeps its own lineage bookkeeping: what it generated counts without any
    // caller's help (also when generation is stopped), a fresh run forgets the parent and the
    // sampler, the same sampler settings continue one RNG stream, and after a restore the
    // attention queries are replayed once and then recorded again.
    void liveSessionKeepsItsOwnBooks() {
        ws::LiveSession live(m_stories);
        QVERIFY(!live.unsaved());
        QCOMPARE(live.parentId(), std::string());
        QVERIFY(!live.sampler());
        auto prompt = ws::preparePrompt({.text = "Once upon a time"}, *m_stories);
        QVERIFY(prompt);
        live.beginRun(prompt.value().meta);
        QVERIFY(live.feed(prompt.value().tokens));
        QVERIFY(live.unsaved()); // fed, never captured
        QVERIFY(live.queriesRecorded());
        // A bad id is refused, and the session and its recorded queries stay as they were.
        const auto fed = live.session().tokens();
        const std::vector<int32_t> bad{5, int32_t(m_stories->config().vocabSize)};
        QVERIFY(!live.feed(bad));
        QVERIFY(live.session().tokens() == fed);
        QVERIFY(live.queriesRecorded());

        // Generated tokens count, stopped early or not; the lineage sees them as "continue".
        live.descendFrom("A");
        QVERIFY(!live.unsaved());
        QVERIFY(live.generate(3, SamplerSettings{0.0f}));
        int seen = 0;
        auto stopped =
            live.generate(10, SamplerSettings{0.0f}, [&](int32_t) { return ++seen < 2; });
        QVERIFY(stopped);
        QCOMPARE(stopped.value().stopReason, std::string("cancelled"));
        QCOMPARE(live.generatedSinceParent(), int64_t(3 + 2));
        QVERIFY(live.unsaved());

        // One stream for the same settings: 3 + 3 sampled tokens are 6 sampled in one go.
        const SamplerSettings hot{1.0f, 1.0f, 0, 7};
        auto run = [&](const std::vector<int>& steps) {
            ws::LiveSession l(m_stories);
            l.beginRun(prompt.value().meta);
            if (!l.feed(prompt.value().tokens))
                qFatal("feed");
            for (int n : steps)
                if (!l.generate(n, hot))
                    qFatal("generate");
            return l.session().tokens();
        };
        QVERIFY(run({3, 3}) == run({6}));
        QVERIFY(live.sampler()->settings() == SamplerSettings{0.0f});

        // A fresh run: no parent, no sampler, nothing generated, the new prompt meta.
        live.reset();
        QCOMPARE(live.parentId(), std::string());
        QCOMPARE(live.generatedSinceParent(), int64_t(0));
        QVERIFY(!live.sampler());
        QVERIFY(live.session().tokens().empty());

        // Through the workspace: a capture after generating is the parent's "continue" with the
        // count, and a restore replays the queries once for the attention view.
        ws::Workspace w;
        w.setModel(m_stories);
        runPrompt(w, "Once upon a time", 0);
        auto a = w.capture();
        QVERIFY(a);
        QVERIFY(w.liveSession()->generate(4, SamplerSettings{0.0f}));
        auto b = w.capture();
        QVERIFY(b);
        const auto& lb = w.find(b.value())->snapshot->lineage;
        QCOMPARE(lb.parentId, a.value());
        QCOMPARE(lb.operation, std::string("continue"));
        QCOMPARE(lb.parameters.value("generated", -1), 4);
        QCOMPARE(w.liveSession()->generatedSinceParent(), int64_t(0));
        auto recorded = w.liveSession()->attention(1, 0);
        QVERIFY2(recorded, recorded.message().c_str());
        QVERIFY(w.restore(a.value(), false));
        QVERIFY(!w.liveSession()->queriesRecorded());
        auto replayed = w.liveSession()->attention(1, 0);
        QVERIFY2(replayed, replayed.message().c_str());
        QVERIFY(w.liveSession()->queriesRecorded());
        QVERIFY(w.liveSession()->generate(4, SamplerSettings{0.0f}));
        QVERIFY(w.liveSession()->queriesRecorded()); // recorded while it generated
        auto again = w.liveSession()->attention(1, 0);
        QVERIFY(again);
        // The same tokens as B, so the same pattern B's session recorded as it ran.
        QVERIFY(w.live()->tokens() == w.find(b.value())->snapshot->tokens);
        QCOMPARE(again.value().probs.size(), recorded.value().probs.size());
        double worst = 0;
        for (std::size_t i = 0; i < again.value().probs.size(); ++i)
            worst = std::max(worst, std::abs(double(again.value().probs[i]) -
                                             double(recorded.value().probs[i])));
        QVERIFY2(worst < 1e-5, qPrintable(QString::number(worst)));
    }

    // The snapshot store on its own, with no model: ids in creation order (a replaced id keeps
    // its place), the lineage of what it holds, every state saved into its folder as it is
    // added, a save that fails reported with the state kept in memory, and a folder opened
    // through whatever opens a file (here one that refuses one file: named, still listed).
    void snapshotStoreOnItsOwn() {
        ws::Workspace w;
        w.setModel(m_stories);
        runPrompt(w, "Once upon a time", 2);
        auto captured = w.captureLive();
        QVERIFY(captured);
        const st::Snapshot root = captured.value();
        st::Snapshot child = root;
        child.lineage.id = root.lineage.id + "-child";
        child.lineage.parentId = root.lineage.id;
        child.lineage.operation = "continue";
        const std::string a = root.lineage.id, b = child.lineage.id;

        ws::SnapshotStore store;
        QCOMPARE(store.add(root), a);
        QCOMPARE(store.add(child), b);
        QCOMPARE(store.add(root, {}, {st::Violation{}}), a); // replaced in place
        QCOMPARE(store.order(), (std::vector<std::string>{a, b}));
        QCOMPARE(store.find(a)->readViolations.size(), std::size_t{1});
        QVERIFY(!store.find("no such id"));
        const auto tree = store.lineage();
        QCOMPARE(tree.roots.size(), std::size_t{1});
        QCOMPARE(tree.nodes[tree.roots[0]].id, a);
        QVERIFY(tree.toJsonText().find(b) != std::string::npos);

        QTemporaryDir dir;
        const std::string folder = dir.filePath("ws").toStdString();
        QVERIFY(store.useFolder(folder));
        for (const auto& id : {a, b})
            QVERIFY(std::filesystem::exists(store.find(id)->file));
        QVERIFY(store.takeSaveProblems().empty());
        // The folder removed under it: the next state stays in memory, the problem is named.
        std::filesystem::remove_all(folder);
        st::Snapshot third = child;
        third.lineage.id = "third";
        store.add(third);
        QVERIFY(store.find("third") && store.find("third")->file.empty());
        const auto problems = store.takeSaveProblems();
        QVERIFY(!problems.empty());
        QVERIFY2(problems.front().find(folder) != std::string::npos, problems.front().c_str());

        // Opened through a stand-in for the workspace's verify-and-add.
        const std::string folder2 = dir.filePath("ws2").toStdString();
        {
            ws::SnapshotStore writer;
            QVERIFY(writer.useFolder(folder2));
            writer.add(root);
            writer.add(child);
        }
        ws::SnapshotStore reader;
        auto opened = reader.openFolder(folder2, [&](const std::string& path, std::string* why) {
            if (path.find("-child") != std::string::npos) {
                *why = "refused here";
                return std::string();
            }
            auto s = st::load(path);
            return s ? reader.add(std::move(s.value()), path) : std::string();
        });
        QVERIFY2(opened, opened.message().c_str());
        QCOMPARE(opened.value().ids, std::vector<std::string>{a});
        QCOMPARE(opened.value().problems.size(), std::size_t{1});
        QVERIFY(opened.value().problems[0].find("refused here") != std::string::npos);
        const auto manifest = nlohmann::json::parse(
            readFileText((std::filesystem::path(folder2) / "workspace.json").string()));
        QCOMPARE(manifest["states"].size(), std::size_t{2}); // the refused file stays listed
    }

    // The lab's room: no model, no experiment; the standard state is made by the first
    // experiment and kept for the next (the same state, not made again) until the model changes;
    // a claim without an experiment, an unknown number and a model too small are named.
    void labCacheKeepsItsStandardState() {
        ws::LabCache lab;
        QVERIFY(!lab.run(2));
        lab.setModel(m_stories);
        QVERIFY(!lab.base());
        auto first = lab.run(2);
        QVERIFY2(first, first.message().c_str());
        const st::Snapshot* base = lab.base();
        QVERIFY(base && !base->tokens.empty());
        const std::string id = base->lineage.id;
        QVERIFY(lab.run(5));
        QCOMPARE(lab.base(), base);
        QCOMPARE(lab.base()->lineage.id, id);
        auto definitional = lab.run(3);
        QVERIFY(!definitional);
        QVERIFY2(definitional.message().find("has no experiment") != std::string::npos,
                 definitional.message().c_str());
        QVERIFY(!lab.run(99));
        // Another model: the state is made again, for it (aidreams260K's 128 positions are
        // too few for the lab's standard state, and that is what the error says).
        lab.setModel(m_aidreams);
        QVERIFY(!lab.base());
        auto small = lab.run(2);
        QVERIFY(!small);
        QVERIFY2(small.message().find("positions free") != std::string::npos,
                 small.message().c_str());
        QVERIFY(!lab.base());
    }

    // Each stored state knows its model: a stories260K state in a workspace that loaded
    // aidreams260K is another model's; its own tokenizer is found beside its recorded model
    // file (where aidreams260K's would decode its ids into other words); gone from there, it
    // has none (the views show ids); diff names the two models first.
    void snapshotsKnowTheirModel() {
        ws::Workspace w;
        w.setModel(m_stories);
        runPrompt(w, "Once upon a time", 4);
        auto a = w.capture();
        QVERIFY(a);
        const st::Snapshot storiesState = *w.find(a.value())->snapshot;
        w.setModel(m_aidreams);
        runPrompt(w, "Once upon a time", 4);
        auto b = w.capture();
        QVERIFY(b);
        const st::Snapshot dreamsState = *w.find(b.value())->snapshot;
        QVERIFY(ws::madeWith(storiesState, m_stories.get()));
        QVERIFY(!ws::madeWith(storiesState, m_aidreams.get()));
        QVERIFY(ws::madeWith(dreamsState, m_aidreams.get()));
        QVERIFY(!ws::madeWith(storiesState, nullptr));
        QCOMPARE(st::modelName(storiesState), std::string("stories260K.bin"));

        ws::TokenizerFinder finder;
        QCOMPARE(finder.find(dreamsState, m_aidreams.get()), m_aidreams->tokenizer());
        const auto own = finder.find(storiesState, m_aidreams.get());
        QVERIFY(own);
        QVERIFY(own != m_aidreams->tokenizer());
        QCOMPARE(own->fingerprint(), m_stories->tokenizer()->fingerprint());
        const auto& ids = storiesState.tokens;
        QCOMPARE(own->decode(ids), m_stories->tokenizer()->decode(ids));
        QVERIFY(m_aidreams->tokenizer()->decode(ids) != own->decode(ids));
        st::Snapshot moved = storiesState;
        moved.modelPath = "/nonexistent/stories260K.bin";
        QVERIFY(!ws::TokenizerFinder().find(moved, m_aidreams.get()));
        QVERIFY(ws::TokenizerFinder().find(moved, m_stories.get())); // the loaded one's

        const st::DiffReport d = st::diff(storiesState, dreamsState);
        QVERIFY(!d.sameModel);
        QCOMPARE(d.modelA, std::string("stories260K.bin"));
        QCOMPARE(d.modelB, std::string("aidreams260K.bin"));
        QVERIFY(d.toJson()["models"]["same"] == false);
        QVERIFY(st::diff(storiesState, storiesState).toJson()["models"]["same"] == true);
    }

    void structuralMismatchCannotBeForced() {
        ws::Workspace w;
        w.setModel(m_stories);
        runPrompt(w, "Once upon a time", 3);
        auto a = w.capture();
        QVERIFY(a);
        w.setModel(m_aidreams); // another geometry (4 layers MHA vs 5 layers GQA)
        auto r = w.restore(a.value(), true);
        QVERIFY(!r);
        QVERIFY2(r.message().find("cache.shape") != std::string::npos, r.message().c_str());
        QVERIFY(r.message().find("cannot be forced") != std::string::npos);
        QVERIFY(w.live()->tokens().empty()); // the live session is untouched
        auto v = w.verify(a.value());
        QVERIFY(v);
        QVERIFY(v.value().report.hasStructural());
        QVERIFY(!v.value().report.forceable());
        QCOMPARE(v.value().toJson()["forceable"].get<bool>(), false);

        // The CLI refuses `continue --force` with the same named violation, no stack trace.
        QTemporaryDir dir;
        w.setModel(m_stories);
        const std::string path = saved(w, a.value(), dir);
        const Cli c =
            cli({"continue", QString::fromStdString(path), "-m",
                 QString::fromStdString(testdata::path(kAidreams)), "-t",
                 QString::fromStdString(testdata::path(kAidreamsTok)), "--force", "-n", "3"});
        QCOMPARE(c.code, 1);
        QVERIFY2(c.err.contains("cache.shape") && c.err.contains("cannot be forced"),
                 c.err.constData());
        QVERIFY2(!c.err.contains("frame #") && !c.err.contains("Exception raised from"),
                 c.err.constData());

        // A cache cut without fixing positions: structural, refused with its name (it used to
        // fail inside the cache builder with a byte count).
        st::FaultContext ctx;
        ctx.model = m_stories;
        auto faulty = st::injectFault("truncated-cache", *w.find(a.value())->snapshot, ctx);
        QVERIFY(faulty);
        const std::string fid = w.add(faulty.value());
        auto rf = w.restore(fid, true);
        QVERIFY(!rf);
        QVERIFY2(rf.message().find("positions.count") != std::string::npos, rf.message().c_str());
    }

    void semanticErrorsCanBeForced() {
        ws::Workspace w;
        w.setModel(m_stories);
        runPrompt(w, "Once upon a time", 6);
        auto a = w.capture();
        QVERIFY(a);
        auto f = w.injectFault(a.value(), "position-offset");
        QVERIFY2(f, f.message().c_str());
        auto v = w.verify(f.value());
        QVERIFY(v);
        // The root cause is an error, not a warning under a logits error.
        const st::Violation* offset = v.value().report.find("positions.offset");
        QVERIFY2(offset, v.value().toJson().dump().c_str());
        QCOMPARE(offset->severity, st::Severity::Error);
        QVERIFY(v.value().report.forceable());
        QVERIFY(!w.restore(f.value(), false));
        auto r = w.restore(f.value(), true);
        QVERIFY2(r, r.message().c_str());
        QVERIFY(r.value().forced);
        // The live session's verdict after the forced restore names the same error.
        auto live = w.verify("");
        QVERIFY(live);
        QVERIFY(live.value().report.has("positions.offset"));
    }

    // GUI ≡ CLI, at the workspace: verify, diff and drift of stored snapshots give the JSON that
    // kvscope-cli prints for the same files.
    void sameJsonAsCli() {
        ws::Workspace w;
        w.setModel(m_stories);
        runPrompt(w, "Once upon a time", 8);
        auto clean = w.capture();
        QVERIFY(clean);
        QTemporaryDir dir;
        const std::string cleanPath = saved(w, clean.value(), dir);

        std::vector<std::string> ids{clean.value()};
        for (const auto& f : st::allFaults()) {
            auto id = w.injectFault(clean.value(), f.name);
            QVERIFY2(id, (f.name + ": " + id.message()).c_str());
            ids.push_back(id.value());
        }
        for (const std::string& id : ids) {
            const std::string path = saved(w, id, dir);
            const std::string what =
                w.find(id)->snapshot->lineage.parameters.value("fault", "clean");
            // verify
            const Cli v =
                cli(QStringList{"verify", QString::fromStdString(path), "--json"} + modelArgs());
            auto mine = w.verify(id);
            QVERIFY(mine);
            nlohmann::json a = mine.value().toJson(), b = v.json();
            QVERIFY2(a == b, (what + "\nworkspace " + a.dump() + "\ncli " + b.dump()).c_str());
            QCOMPARE(v.code, mine.value().report.ok() ? 0 : 1);
            // diff against the clean state
            const Cli d = cli({"diff", QString::fromStdString(cleanPath),
                               QString::fromStdString(path), "--json"});
            auto dm = w.diff(clean.value(), id);
            QVERIFY(dm);
            a = dm.value().report.toJson();
            b = d.json();
            QVERIFY2(a == b, (what + "\nworkspace " + a.dump() + "\ncli " + b.dump()).c_str());
        }

        // The position offset is visible in the diff: every cached position moved by one.
        auto offsetId = std::find_if(ids.begin(), ids.end(), [&](const std::string& id) {
            return w.find(id)->snapshot->lineage.parameters.value("fault", "") == "position-offset";
        });
        QVERIFY(offsetId != ids.end());
        auto d = w.diff(clean.value(), *offsetId);
        QVERIFY(d);
        const auto& p = d.value().report.positions;
        QCOMPARE(p.compared, int64_t(w.find(clean.value())->snapshot->positions.size()));
        QCOMPARE(p.differ, p.compared);
        QCOMPARE(p.firstDifferingIndex, int64_t(0));
        QVERIFY(p.offset && *p.offset == 1);
        QCOMPARE(d.value().report.nextPositionB, d.value().report.nextPositionA + 1);
        QVERIFY(!d.value().report.identicalState());

        // Fork pair and truncation: diff and drift against the CLI.
        st::ForkOptions fo;
        fo.branches = 2;
        fo.steps = 4;
        fo.temperature = 1.0f;
        auto forks = w.fork(clean.value(), fo);
        QVERIFY2(forks, forks.message().c_str());
        const std::string fa = saved(w, forks.value()[0], dir);
        const std::string fb = saved(w, forks.value()[1], dir);
        const Cli fd =
            cli({"diff", QString::fromStdString(fa), QString::fromStdString(fb), "--json"});
        auto fdm = w.diff(forks.value()[0], forks.value()[1]);
        QVERIFY(fdm);
        QVERIFY(fdm.value().report.toJson() == fd.json());
        const Cli dr = cli(QStringList{"drift", QString::fromStdString(fa),
                                       QString::fromStdString(fb), "-n", "6", "--force", "--json"} +
                           modelArgs());
        auto drm = w.drift(forks.value()[0], forks.value()[1], 6, st::ToleranceProfile::SameDevice);
        QVERIFY2(drm, drm.message().c_str());
        QVERIFY2(drm.value().toJson() == dr.json(),
                 (drm.value().toJson().dump() + "\n" + dr.out.toStdString()).c_str());
        // Within the tolerance is core's judgement (state::within), step by step; a state
        // against itself is outside it at no step (a truncated one, below, at some).
        const auto& outcome = drm.value();
        int outside = 0;
        for (std::size_t i = 0; i < outcome.result.steps.size(); ++i) {
            QCOMPARE(outcome.withinTolerance(i),
                     st::within(outcome.result.steps[i].logits, outcome.tolerance));
            QCOMPARE(dr.json()["steps"][i]["within_tolerance"].get<bool>(),
                     outcome.withinTolerance(i));
            outside += !outcome.withinTolerance(i);
        }
        QCOMPARE(outcome.stepsOutsideTolerance(), outside);
        auto self =
            w.drift(forks.value()[0], forks.value()[0], 6, st::ToleranceProfile::SameDevice);
        QVERIFY2(self, self.message().c_str());
        QCOMPARE(self.value().stepsOutsideTolerance(), 0);

        QVERIFY(w.restore(clean.value(), false));
        auto t = w.truncateLive(5);
        QVERIFY(t);
        const std::string tp = saved(w, t.value(), dir);
        const Cli td =
            cli({"diff", QString::fromStdString(cleanPath), QString::fromStdString(tp), "--json"});
        auto tdm = w.diff(clean.value(), t.value());
        auto cut = w.drift(clean.value(), t.value(), 4, st::ToleranceProfile::SameDevice);
        QVERIFY2(cut, cut.message().c_str());
        QVERIFY(cut.value().stepsOutsideTolerance() > 0);
        QVERIFY(tdm);
        QVERIFY(tdm.value().report.toJson() == td.json());
        const Cli tv =
            cli(QStringList{"verify", QString::fromStdString(tp), "--json"} + modelArgs());
        auto tvm = w.verify(t.value());
        QVERIFY(tvm);
        QVERIFY(tvm.value().toJson() == tv.json());
    }

    // The insights lab's evidence (Workspace::storeEvidence): the experiment's states become
    // children of the lab's standard state, roles recorded; storing again replaces them in
    // place; the live session and the user's snapshots are untouched. The CLI writes the same
    // states (--save-evidence): the workspace's diff of the stored pair equals `kvscope-cli
    // diff` of the files.
    void insightEvidence() {
        ws::Workspace w;
        w.setModel(m_stories);
        auto none = w.storeEvidence({});
        QVERIFY(!none); // nothing ran yet
        QVERIFY2(none.message().find("run the experiment") != std::string::npos,
                 none.message().c_str());
        runPrompt(w, "Once upon a time", 4);
        auto mine = w.capture();
        QVERIFY(mine);
        const auto liveTokens = w.live()->tokens();
        auto r = w.runInsight(47);
        QVERIFY2(r, r.message().c_str());
        const auto& result = r.value();
        QVERIFY(result.view == insights::EvidenceView::Diff);
        QVERIFY(result.states.size() >= 2);
        auto ids = w.storeEvidence(result);
        QVERIFY2(ids, ids.message().c_str());
        QCOMPARE(ids.value().size(), result.states.size());
        const std::size_t stored = w.order().size();
        QCOMPARE(stored, 1 + 1 + result.states.size()); // mine, the lab's state, the evidence
        const auto* base = w.find(w.find(ids.value()[0])->snapshot->lineage.parentId);
        QVERIFY(base);
        QCOMPARE(base->snapshot->lineage.parameters.value("insights_lab", ""),
                 std::string("standard state"));
        for (std::size_t k = 0; k < ids.value().size(); ++k) {
            const auto& l = w.find(ids.value()[k])->snapshot->lineage;
            QCOMPARE(l.parameters.value("insight", 0), 47);
            QCOMPARE(l.parameters.value("role", ""), result.states[k].role);
            QCOMPARE(l.parentId, base->snapshot->lineage.id);
        }
        QVERIFY(w.storeEvidence(result));
        QCOMPARE(w.order().size(), stored); // the same states again: replaced, not added
        QVERIFY(w.live()->tokens() == liveTokens);
        QCOMPARE(w.parentId(), mine.value());

        QTemporaryDir dir;
        const Cli c =
            cli(QStringList{"insights", "run", "47", "--json", "--save-evidence", dir.path()} +
                modelArgs());
        QVERIFY2(c.code == 0, c.err.constData());
        const auto j = c.json()["insights"][0];
        QCOMPARE(j["evidence_view"].get<std::string>(), std::string("diff"));
        QCOMPARE(j["evidence_states"].size(), result.states.size());
        for (std::size_t k = 0; k < result.states.size(); ++k) {
            QCOMPARE(j["evidence_states"][k]["role"].get<std::string>(), result.states[k].role);
            QVERIFY(QFileInfo::exists(
                QString::fromStdString(j["evidence_states"][k]["file"].get<std::string>())));
        }
        QCOMPARE(j["focus"]["layer"].get<int>(), result.focus.layer);
        const Cli d = cli(
            {"diff", QString::fromStdString(j["evidence_states"][0]["file"].get<std::string>()),
             QString::fromStdString(j["evidence_states"][1]["file"].get<std::string>()), "--json"});
        QVERIFY2(d.code == 0 || d.code == 1, d.err.constData());
        auto dm = w.diff(ids.value()[0], ids.value()[1]);
        QVERIFY(dm);
        nlohmann::json a = dm.value().report.toJson(), b = d.json();
        // The recorded fields differ in lineage (each run captures anew, the workspace records
        // the insight and the role); the tokens, positions, mask and cache do not.
        for (nlohmann::json* x : {&a, &b}) {
            x->erase("fields");
            x->erase("manifest_differences");
        }
        QVERIFY2(a == b, ("workspace " + a.dump() + "\ncli " + b.dump()).c_str());

        // Another model: the old result is refused by name.
        w.setModel(m_aidreams);
        auto stale = w.storeEvidence(result);
        QVERIFY(!stale);
    }

    // Every experiment's evidence opens where the GUI opens it (MainWindow::showEvidence):
    // drift of the pair for drift and faults, diff of the pair, a forced restore of the first
    // state for the views of the live session (and its attention pattern at the focus).
    void everyEvidenceOpens() {
        const auto demo = findDemoModel();
        QVERIFY2(demo, "the bundled demo model was not found");
        auto demoModel = Model::load(*demo);
        QVERIFY2(demoModel, demoModel.message().c_str());
        for (const auto& [name, model] :
             {std::pair{"stories260K", m_stories}, std::pair{"demo", demoModel.value()}}) {
            ws::Workspace w;
            w.setModel(model);
            for (int n : insights::experimentNumbers()) {
                const QByteArray what = QByteArray(name) + " #" + QByteArray::number(n);
                auto r = w.runInsight(n);
                QVERIFY2(r, (what + " " + r.message().c_str()).constData());
                auto ids = w.storeEvidence(r.value());
                QVERIFY2(ids, (what + " " + ids.message().c_str()).constData());
                const std::string view = insights::evidenceViewName(r.value().view);
                const auto& id = ids.value();
                const auto& f = r.value().focus;
                if (view == "faults") {
                    // The damaged state's verdict; its drift, unless the damage is structural (then
                    // the refusal names it, as verify does).
                    auto v = w.verify(id.back());
                    QVERIFY2(v, (what + " verify: " + v.message().c_str()).constData());
                    if (id.size() >= 2) {
                        auto d = w.drift(id[0], id[1], 8, st::ToleranceProfile::SameDevice);
                        QVERIFY2(d || d.message().find("structural") != std::string::npos,
                                 (what + " drift: " + d.message().c_str()).constData());
                    }
                } else if (view == "drift") {
                    QVERIFY2(id.size() >= 2, what.constData());
                    auto d = w.drift(id[0], id[1], 8, st::ToleranceProfile::SameDevice);
                    QVERIFY2(d, (what + " drift: " + d.message().c_str()).constData());
                } else if (view == "diff") {
                    auto d = w.diff(id[0], id[1]);
                    QVERIFY2(d, (what + " diff: " + d.message().c_str()).constData());
                    if (f.layer >= 0)
                        QVERIFY(f.layer < int(d.value().report.layers.size()));
                } else if (view == "attention" || view == "positions" || view == "heatmap") {
                    auto back = w.restore(id[0], true);
                    QVERIFY2(back, (what + " restore: " + back.message().c_str()).constData());
                    QVERIFY(w.live()->tokens() == w.find(id[0])->snapshot->tokens);
                    if (view == "attention") {
                        auto a =
                            w.liveSession()->attention(std::max(0, f.layer), std::max(0, f.head));
                        QVERIFY2(a, (what + " attention: " + a.message().c_str()).constData());
                        if (f.position >= 0)
                            QVERIFY(f.position < a.value().queries);
                    }
                }
            }
        }
    }

    void openKeepsReadProblems() {
        ws::Workspace w;
        w.setModel(m_stories);
        runPrompt(w, "Once upon a time", 3);
        auto a = w.capture();
        QVERIFY(a);
        QTemporaryDir dir;
        const std::string path = saved(w, a.value(), dir);
        auto opened = w.open(path);
        QCOMPARE(opened.id, a.value());
        QVERIFY(opened.verdict.report.ok());
        QCOMPARE(w.find(a.value())->file, path);
        // Not a snapshot: a verdict naming the file, nothing stored.
        const std::string junk = dir.filePath("junk.kvsnap").toStdString();
        QFile f(QString::fromStdString(junk));
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("not a snapshot at all");
        f.close();
        const size_t before = w.order().size();
        auto bad = w.open(junk);
        QVERIFY(bad.id.empty());
        QVERIFY(bad.verdict.report.has("file.magic"));
        QCOMPARE(w.order().size(), before);

        // A snapshot opened from an uncompressed file restores over the file's mapping (the
        // GUI's Open + Restore take the same path as the CLI's load + restore).
        const std::string raw = dir.filePath("raw.kvsnap").toStdString();
        st::SaveOptions so;
        so.write.compress = false;
        QVERIFY(st::save(*w.find(a.value())->snapshot, raw, so));
        ws::Workspace w2;
        w2.setModel(m_stories);
        auto reopened = w2.open(raw);
        QVERIFY(!reopened.id.empty() && reopened.verdict.report.ok());
        QVERIFY(w2.find(reopened.id)->snapshot->layers[0].key->file());
        auto restored = w2.restore(reopened.id, false);
        QVERIFY2(restored, restored.message().c_str());
        QVERIFY(w2.live()->cache().usesFileMapping());
    }

    // A workspace folder: every state is saved as it is made (capture, fork, truncate), the
    // manifest lists them in creation order, a second workspace (a relaunch) opens the same
    // tree and each verifies clean; a missing and a damaged file are named while the rest
    // opens (and stay listed); the CLI's tree reads the same folder; LiveSession::unsaved() says
    // when the live session holds tokens no stored state has.
    void folderKeepsEveryState() {
        QTemporaryDir dir;
        const std::string folder = dir.filePath("ws").toStdString();
        std::vector<std::string> ids;
        {
            ws::Workspace w;
            w.setModel(m_stories);
            QVERIFY(!w.liveSession()->unsaved());
            QVERIFY(w.useFolder(folder));
            runPrompt(w, "Once upon a time", 4);
            QVERIFY(w.liveSession()->unsaved()); // fed and generated, never captured
            auto a = w.capture();
            QVERIFY(a);
            QVERIFY(!w.liveSession()->unsaved());
            generate(w, 2);
            QVERIFY(w.liveSession()->unsaved()); // generated since the capture
            st::ForkOptions two;
            two.branches = 2;
            two.steps = 3;
            auto forks = w.fork(a.value(), two);
            QVERIFY2(forks, forks.message().c_str());
            auto cut = w.truncateLive(3);
            QVERIFY2(cut, cut.message().c_str());
            // The capture, its two forks, the live session as truncation found it (a
            // "continue" of the capture: its two generated tokens kept) and the truncation.
            ids = w.order();
            QCOMPARE(ids.size(), std::size_t{5});
            QCOMPARE(ids.front(), a.value());
            QCOMPARE((std::vector<std::string>{ids[1], ids[2]}), forks.value());
            QCOMPARE(w.find(ids[3])->snapshot->lineage.operation, std::string("continue"));
            QCOMPARE(ids.back(), cut.value());
            for (const auto& id : ids)
                QVERIFY(QFileInfo::exists(QString::fromStdString(w.find(id)->file)));
            w.setViewState({{"selected", ids[1]}});
            QVERIFY(w.takeSaveProblems().empty());
        } // the workspace is gone, as after a crash: nothing was saved on the way out
        ws::Workspace again;
        again.setModel(m_stories);
        auto opened = again.openFolder(folder);
        QVERIFY2(opened, opened.message().c_str());
        QVERIFY(opened.value().problems.empty());
        QCOMPARE(opened.value().ids, ids);
        QCOMPARE(again.order(), ids);
        QCOMPARE(again.viewState()["selected"].get<std::string>(), ids[1]);
        for (const auto& id : ids) {
            auto v = again.verify(id);
            QVERIFY(v);
            QVERIFY(v.value().report.ok());
        }
        {
            ws::Workspace fresh;
            fresh.setModel(m_stories);
            for (const auto& id : ids)
                fresh.open((std::filesystem::path(folder) / (id + ".kvsnap")).string());
            QVERIFY(again.lineage().toJson() == fresh.lineage().toJson());
        }
        const Cli tree = cli({"tree", QString::fromStdString(folder), "--json"});
        QCOMPARE(tree.code, 0);
        QVERIFY2(tree.out.contains(QByteArray::fromStdString(ids.back())), tree.out.constData());

        // One file gone, one damaged: both named, the rest opens, both stay listed.
        std::filesystem::remove(std::filesystem::path(folder) / (ids[1] + ".kvsnap"));
        std::filesystem::resize_file(std::filesystem::path(folder) / (ids[2] + ".kvsnap"), 100);
        ws::Workspace third;
        third.setModel(m_stories);
        auto partial = third.openFolder(folder);
        QVERIFY2(partial, partial.message().c_str());
        QCOMPARE(partial.value().ids, (std::vector<std::string>{ids[0], ids[3], ids[4]}));
        QCOMPARE(partial.value().problems.size(), std::size_t{2});
        QVERIFY(partial.value().problems[0].find(ids[1] + ".kvsnap: missing") != std::string::npos);
        QVERIFY(partial.value().problems[1].find(ids[2] + ".kvsnap") != std::string::npos);
        const auto manifest = nlohmann::json::parse(
            readFileText((std::filesystem::path(folder) / "workspace.json").string()));
        QCOMPARE(manifest["states"].size(), std::size_t{5});

        // A damaged manifest is named; nothing opens.
        QFile m(QString::fromStdString(folder + "/workspace.json"));
        QVERIFY(m.open(QIODevice::WriteOnly));
        m.write("{\"kvscope_workspace\": 1, \"states\": [");
        m.close();
        ws::Workspace fourth;
        fourth.setModel(m_stories);
        auto broken = fourth.openFolder(folder);
        QVERIFY(!broken);
        QVERIFY2(broken.message().find("workspace.json") != std::string::npos,
                 broken.message().c_str());
        // A file where the folder should be.
        const std::string file = dir.filePath("plain-file").toStdString();
        QVERIFY(QFile(QString::fromStdString(file)).open(QIODevice::WriteOnly));
        QVERIFY(!fourth.useFolder(file));
    }

    // A chat prompt keeps its template name and hash and its role segments through a
    // capture (GUI snapshots used to lose them, so prompt.template_hash could never fire).
    void chatPromptMetaSurvivesCapture() {
        const auto demo = findDemoModel();
        if (!demo)
            QFAIL("the bundled demo model (resources/demo-model) was not found");
        auto model = Model::load(*demo, {});
        QVERIFY2(model, model.message().c_str());
        ws::Workspace w;
        w.setModel(model.value());
        auto prompt = ws::preparePrompt(
            {.chat = true, .system = "Answer briefly.", .user = "Who spake unto Moses?"},
            *model.value());
        QVERIFY2(prompt, prompt.message().c_str());
        const auto& meta = prompt.value().meta;
        QCOMPARE(meta.chatTemplateName, std::string("tokenizer"));
        QVERIFY(!meta.chatTemplateHash.empty());
        auto hasRole = [&](const std::string& role) {
            return std::any_of(meta.segments.begin(), meta.segments.end(),
                               [&](const st::TokenSegment& g) { return g.role == role; });
        };
        QVERIFY(hasRole("system") && hasRole("user"));
        w.liveSession()->beginRun(prompt.value().meta);
        QVERIFY(w.liveSession()->feed(prompt.value().tokens));
        auto id = w.capture();
        QVERIFY(id);
        const auto& captured = w.find(id.value())->snapshot->prompt;
        QCOMPARE(captured.chatTemplateName, meta.chatTemplateName);
        QCOMPARE(captured.chatTemplateHash, meta.chatTemplateHash);
        QVERIFY(captured.segments.size() >= meta.segments.size());
        auto v = w.verify(id.value());
        QVERIFY(v);
        QVERIFY2(!v.value().report.has("prompt.template_hash"), v.value().toJson().dump().c_str());
        QVERIFY2(v.value().report.ok(), v.value().toJson().dump().c_str());
    }

    void preparePromptChatAndIds() {
        // A model without a chat template refuses chat mode with a message, never throws.
        auto p = ws::preparePrompt({.chat = true, .user = "hi"}, *m_stories);
        QVERIFY(!p);
        QVERIFY(!p.message().empty());
        auto raw = ws::preparePrompt({.text = "Once upon a time"}, *m_stories);
        QVERIFY(raw);
        QCOMPARE(raw.value().meta.promptTokens, int64_t(raw.value().tokens.size()));
        // Without a tokenizer the prompt is token ids, separated by spaces, newlines or commas.
        ModelConfig c = m_stories->config();
        auto bare = Model::createRandom(c, 3);
        QVERIFY2(bare, bare.message().c_str());
        QVERIFY(!bare.value()->tokenizer());
        auto ids = ws::preparePrompt({.text = "1 403\n407,261\t378"}, *bare.value());
        QVERIFY2(ids, ids.message().c_str());
        QCOMPARE(ids.value().tokens, (std::vector<int32_t>{1, 403, 407, 261, 378}));
        auto notIds = ws::preparePrompt({.text = "1 once"}, *bare.value());
        QVERIFY(!notIds);
        QVERIFY(notIds.message().find("\"once\"") != std::string::npos);
        // An empty raw prompt is just what the tokenizer adds (BOS): a valid one-token run.
        auto empty = ws::preparePrompt({.text = ""}, *m_stories);
        QVERIFY(empty);
        QCOMPARE(empty.value().tokens, std::vector<int32_t>{int32_t(m_stories->config().bosId)});
    }
};

QTEST_GUILESS_MAIN(TestWorkspace)
#include "tst_workspace.moc"
