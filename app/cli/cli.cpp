// kvscope-cli: the headless front end. Every command takes --json.
// Exit codes: 0 ok, 1 failure (bad input, failed verification), 2 usage error.
// run() is the whole program; main.cpp calls it (and the hostile corpus's fork server,
// tests/hostile/zygote.cpp, calls it in a forked child per case).
#include "clicommon.h"
#include "cmdlens.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>

namespace kvscope::cli {
void registerConvertCommand(CLI::App& app); // cmdconvert.cpp
void registerSurgeryCommands(
    CLI::App& app); // cmdsurgery.cpp: fork, tree, truncate, patch, splice, diff
void registerFaultCommands(CLI::App& app);    // cmdfaults.cpp: fault list/inject, transplant
void registerInductionCommand(CLI::App& app); // cmdinduction.cpp: induction
void registerTrainCommand(CLI::App& app);     // cmdtrain.cpp: train
// cmdrandommodel.cpp: random-model
void registerRandomModelCommand(CLI::App& app);
void registerInteropCommands(CLI::App& app); // cmdinterop.cpp: import
void registerInsightsCommand(CLI::App& app); // cmdinsights.cpp: insights list/run
} // namespace kvscope::cli

[[noreturn]] void kvscope::cli::exitNow(int code) {
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    std::_Exit(code);
}

int kvscope::cli::run(int argc, char** argv) {
    CLI::App app{"kvscope-cli: inspect, snapshot and restore transformer KV-cache state"};
    app.require_subcommand(1);
    app.set_version_flag("--version", std::string("kvscope ") + KVSCOPE_VERSION);
    registerModelCommands(app);
    registerConvertCommand(app);
    registerStateCommands(app);
    registerSurgeryCommands(app);
    registerFaultCommands(app);
    registerInductionCommand(app);
    registerTrainCommand(app);
    registerRandomModelCommand(app);
    registerInteropCommands(app);
    registerSurviveCommand(app);
    registerLensCommand(app);
    registerInsightsCommand(app);
    addValueChecks(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        const int rc = app.exit(e);
        return rc == 0 ? kExitOk : kExitUsage;
    } catch (const CliFailure& f) {
        std::cerr << "kvscope-cli: " << f.message << "\n";
        return f.code;
    } catch (const std::exception& e) {
        std::cerr << "kvscope-cli: " << kvscope::userMessage(e) << "\n";
        return kExitFailure;
    }
    return kExitOk;
}
