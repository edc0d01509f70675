// The trainer's options as JSON (the record a checkpoint keeps, so a resumed run takes the
// options it was started with) and their validation. Internal to kvscope_train; torch-free.
#pragma once

#include "train/trainer.h"

#include <nlohmann/json.hpp>

namespace kvscope::train {

// Every option that decides the weights (not the run-control ones: output, checkpoint
// folder, threads, logging cadence).
nlohmann::json optionsToJson(const TrainOptions& o);
// Reads what optionsToJson wrote into `o`; options added later default when absent, so older
// checkpoints still resume. Throws nlohmann::json::exception on a missing required field.
void optionsFromJson(const nlohmann::json& j, TrainOptions& o);
// Throws KvError naming the option ("train: --kv-heads 3 must divide --heads").
void checkOptions(const TrainOptions& o);

} // namespace kvscope::train
