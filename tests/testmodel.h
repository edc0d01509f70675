// Loading a shared-data model in a test suite that links the engine: a failed load ends the
// suite with the loader's message (the callers check KVSCOPE_REQUIRE_DATA first).
#pragma once

#include "engine/model.h"
#include "testdata.h"

#include <memory>

namespace testdata {

inline std::shared_ptr<const kvscope::Model> loadModel(const QString& rel,
                                                       const QString& tokenizer = {}) {
    kvscope::LoadOptions o;
    if (!tokenizer.isEmpty())
        o.tokenizerPath = path(tokenizer);
    auto r = kvscope::Model::load(path(rel), o);
    if (!r)
        qFatal("load failed: %s", r.message().c_str());
    return r.value();
}

} // namespace testdata
