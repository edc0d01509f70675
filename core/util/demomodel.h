// Where the bundled demo model lives (a Hugging Face folder trained by
// packaging/train-demo-model.sh). kvscope and kvscope-cli use it when no model is given.
// Thread-safe: reads the environment and the file system only.
#pragma once

#include <optional>
#include <string>

namespace kvscope {

// The demo model folder, the first of these that holds a config.json:
//   1. $KVSCOPE_DEMO_MODEL (when set, only this is tried: a wrong value is not silently
//      replaced by another model);
//   2. <directory of the running executable>/../share/kvscope/demo-model (the installed
//      layout: /usr/bin/kvscope-cli -> /usr/share/kvscope/demo-model);
//   3. the source tree's resources/demo-model: KVSCOPE_SOURCE_DIR when the build defines it,
//      else the nearest ancestor folder of the executable that has resources/demo-model
//      (development builds live inside the source tree).
// std::nullopt when none exists.
std::optional<std::string> findDemoModel();

} // namespace kvscope
