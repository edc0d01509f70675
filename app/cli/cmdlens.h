// `lens` (cmdlens.cpp) and the head attribution it shares with `attribute --heads`.
#pragma once

#include "clicommon.h"

#include <cstdint>
#include <string>

namespace kvscope::cli {

struct HeadAttributionArgs {
    std::string snapshot;
    ModelOptions model;
    int32_t token = -1; // < 0: the top-1 of the restored last step
    int top = 10;       // parts listed in the text output, largest |contribution| first
    bool force = false;
    bool json = false;
};

// The direct logit attribution of a snapshot's next token over its attention heads and MLPs
// (state::attributeHeads), printed as text or JSON; throws CliFailure.
void runHeadAttribution(const HeadAttributionArgs& a);

// Registers `lens`.
void registerLensCommand(CLI::App& app);

} // namespace kvscope::cli
