// Eviction plans: which cache slots each layer and KV head keeps (the survival lab's eviction
// policies and budget allocations, documented in probes/survive.h). Used by compress().
//
// Every policy is a mandatory set (the last token's slot, and the sinks, recent window or
// observation window the policy always keeps) plus a score per (layer, KV head, slot): higher
// is more worth keeping. The allocation then spends the budget of k slots per head:
//   uniform        one set for every layer and head: the best slots by the score summed over
//                  all of them (k slots each)
//   pyramid        one set per layer, more slots in low layers: the budget beyond the
//                  mandatory slots falls linearly with depth (layer l gets a share
//                  proportional to L - l) and sums to L x k; within a layer the best by the
//                  score summed over its heads
//   head-adaptive  per layer, the best (head, slot) entries across the layer's KV heads (a
//                  global top-k over heads, KVH x k entries; each head keeps the mandatory
//                  slots); attention scores are probabilities, comparable across heads
// With one KV head (MQA) head-adaptive is a per-layer choice at a uniform budget.
//
// Thread-safety: a free function over values.
#pragma once

#include "engine/model.h"
#include "engine/session.h"
#include "util/status.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kvscope::state {

struct EvictionPlan {
    std::vector<int64_t> keptSlots;   // every slot some head keeps, sorted (the new cache)
    std::vector<uint8_t> headMask;    // [layers, kvHeads, keptSlots.size()]; empty: all keep all
    std::vector<int64_t> keptPerHead; // [layers * kvHeads]: slots each (layer, head) keeps
    int64_t budget = 0;               // k: the slots per head the budget buys
};

// The allocations planEviction() knows, uniform first.
const std::vector<std::string>& evictionAllocations();
// Whether `policy`'s score differs between layers and heads (so that an allocation other
// than uniform chooses differently): h2o, tova, snapkv, knorm.
bool scoresPerHead(const std::string& policy);

// Keeps k of the full session's T slots (1 <= k <= T) by `policy` and params["allocation"];
// `params` holds every parameter of the policy (defaults filled in) and comes back as
// applied (h2o's recent window, snapkv's clipped window); `given` are the ones the caller
// set (a default may adapt to the budget, a given value only to what fits). Errors name the
// parameter.
Result<EvictionPlan> planEviction(const std::string& policy,
                                  std::map<std::string, std::string>& params,
                                  const std::map<std::string, std::string>& given,
                                  const Model& model, const Session& full,
                                  const std::vector<int32_t>& tokens, int64_t k);

// An integer parameter of a survive policy in [lo, hi]; the error names it.
Result<int64_t> intParam(const std::map<std::string, std::string>& params, const std::string& name,
                         int64_t lo, int64_t hi);

} // namespace kvscope::state
