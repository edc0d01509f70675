// The engine's worker threads for work outside the engine: callers that must not include
// libtorch (the state ledger) split a loop over the same intra-op threads the engine's kernels
// use, so KVSCOPE_THREADS and Model::setThreads bound them too.
#pragma once

#include <cstdint>
#include <functional>

namespace kvscope {

// Calls fn(begin, end) on disjoint ranges covering [0, n), chunks of at least `grain`, on up
// to the engine's thread count (1 until a model was loaded or setThreads called); returns when
// all are done. fn must not throw. Inside another parallel region it runs serially.
void parallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

} // namespace kvscope
