// The 80 insights as data. Claims paraphrase the compendium (never quote it) and keep its
// loose or doubtful parts, because the experiments exist to test exactly those. Notes of
// definitional insights point at files that exist (tst_insights checks every path).
#include "insights/registry.h"

#include <algorithm>
#include <array>

namespace kvscope::insights {

namespace {

constexpr InsightClass M = InsightClass::Measurable;
constexpr InsightClass D = InsightClass::Definitional;
constexpr InsightClass N = InsightClass::NotTestable;

struct Row {
    int number;
    InsightClass cls;
    const char* claim;
    const char* note;
    const char* experiment;
};

struct Tier {
    const char* name;
    std::vector<Row> rows;
};

// The tier a row sits in is its tier: the grouping below is the compendium's.
const std::array<Tier, 8>& tiers() {
    static const std::array<Tier, 8> kTiers = {{
        {"Foundation: what transformers remember",
         {
             {1, M,
              "A model keeps nothing between calls; continuity across calls comes only from "
              "capturing its KV cache and restoring it.",
              "",
              "Feed a prompt's continuation tokens into a fresh session with no state, into a "
              "session restored from a snapshot of the prompt and into a replay of the prompt, "
              "and compare each with the uninterrupted run's next-token logits (KL, top-1)."},
             {2, M,
              "Memory lives in the attention K/V cache; without it every token is processed as "
              "though it were the first token of the sequence.",
              "",
              "Feed one token after a prompt with every cached slot masked out "
              "(KvCache::withPositions, mask 0) and compare its logits with the same token fed "
              "alone at position 0 (max |Δlogit|, KL), the unmasked cache being the control."},
             {3, D,
              "Every token yields one query, one key and one value per head in every layer, and "
              "these are stored, so the store grows with sequence length.",
              "By construction of attention, with one correction: the cache keeps one K and one "
              "V per KV head per layer per token (core/engine/kvcache.h: [kv_heads, length, "
              "head_dim]) and queries are computed and dropped (core/engine/observer.h: q is "
              "[H, T, D], k and v [KVH, T, D]); with grouped-query attention 'per head' means "
              "per KV head (the demo model's 4 query heads share 1).",
              ""},
             {4, D,
              "The cache is not persistent: it is reset on every call of the model unless the "
              "caller passes it back, and without it the context is lost at once.",
              "By construction: the model is immutable after load and holds no sequence state "
              "(core/engine/model.h); the cache belongs to the Session that feeds it, kept across "
              "feed() calls and emptied only by reset() or a new Session "
              "(core/engine/session.h). Whether a runtime resets it per call is API design, not "
              "a property of the model.",
              ""},
             {5, M,
              "Saving the KV cache and injecting it back restores the model's memory, which is "
              "what makes chat, multi-turn reasoning and reuse work.",
              "",
              "Capture a state after a prompt, write it to a .kvsnap, read it back and restore "
              "it, then run the equivalence check and a 32-step drift against the live session "
              "it came from (KL per step, first diverging token)."},
             {6, M,
              "Without the cache the model does not know earlier tokens; tokens alone carry no "
              "memory, and prompt-only approaches are wasteful and lossy past short sequences.",
              "",
              "Replay the token buffers of states of 64, 128 and up to 448 tokens (at most the "
              "context limit - 16) and compare each rebuilt cache and its next-step logits with "
              "the restored state (relative L2 of K/V per layer, KL) to see whether re-fed tokens "
              "lose anything as length grows, timing both routes."},
             {7, M,
              "Attention heads score cached keys by dot product with the query; a higher score "
              "gives a higher weight and so more influence on the output.",
              "The dot-product scoring is definitional (core/engine/attention.h); the experiment "
              "tests the 'more influence' part, which also depends on the values.",
              "For four consecutive queries, mask the cached slot that receives the most attention "
              "(summed over every layer and head, from the attention view's rows) and the one that "
              "receives the least, one at a time, and compare the change of the next-token logits "
              "(KL): the top slot should matter more every time."},
             {8, M,
              "Heads differ in what they look at, some handling syntax, others meaning links or "
              "distant references, and their combination yields the model's grasp of context.",
              "Caveat: naming a head 'syntactic' or 'semantic' needs annotated text; the "
              "experiment decides whether heads take distinct roles.",
              "Run the induction probe on a repeated random segment and record each head's "
              "previous-token and induction score, testing whether heads separate into distinct "
              "roles (the spread of a score over heads) rather than attending alike."},
             {9, D,
              "Tokens are not chat turns: the model knows nothing of speakers or structure, so "
              "designers must encode turns in the prompt format.",
              "By construction: the model sees one flat token buffer; turns exist only as text "
              "rendered by the chat template (core/chat/template.h) and as the segment map kept "
              "beside the tokens (core/state/ledger/snapshot.h: TokenSegment), which the forward "
              "pass never reads.",
              ""},
             {10, D,
              "Feed-forward layers keep no memory; only attention layers hold history through "
              "the cache, and MLPs transform rather than accumulate.",
              "By construction: the cache stores only each layer's K and V "
              "(core/engine/kvcache.h); the MLP output is added to the residual stream and "
              "dropped (core/engine/llama.cpp: forwardLlamaFrom). An MLP still shapes every "
              "higher layer's cached K/V through the residual stream; that is measured under "
              "#47.",
              ""},
         }},
        {"Mechanics: how memory actually works",
         {
             {11, D,
              "Every token advances the position counter; positional encodings, additive or "
              "rotary, let the model tell order and combine with attention.",
              "By construction: Session::feed gives its tokens positions nextPosition, "
              "nextPosition + 1, ... (core/engine/session.cpp); llama models rotate q and k "
              "(core/engine/rope.cpp), GPT-2 adds learned position embeddings "
              "(core/engine/gpt2.cpp). The position view shows the stored positions "
              "(widgets/panels/positionpanel.h).",
              ""},
             {12, M,
              "Cached positions must equal each token's absolute index; a misaligned cache "
              "breaks attention patterns, so sequencing must be exact.",
              "",
              "Re-rotate every cached key from position p to p + 16 (rerotateKeys; positions and "
              "next position shifted alike) and continue, then shift only the position record by "
              "one (the position-offset fault): drift KL and the first diverging token over 32 "
              "greedy steps decide whether the absolute index or only consistency matters."},
             {13, M,
              "A saved cache must carry position state as well as keys and values; without "
              "positions it is ambiguous, and a restore has to line up all three.",
              "",
              "Restore a snapshot with its positions replaced by a shifted guess and measure the "
              "drift against the true positions, and check whether the validation core recovers "
              "the true positions from the keys alone (positions.offset, from recomputed layer-0 "
              "keys)."},
             {14, M,
              "The count of tokens already processed must be tracked, and measured rather than "
              "assumed, since padding, truncation and formatting all change it.",
              "",
              "Continue a state whose next position lags the true count by 1 and by 4 (the "
              "stale-next-position fault) or leads it, and measure drift KL and the first "
              "diverging token against the correct count, and whether verify names "
              "positions.next."},
             {15, M,
              "Tokens do not map one-to-one to visible characters; tokenizers differ in how "
              "many tokens a string takes, so counts need a real tokenizer run.",
              "",
              "Encode a fixed set of strings (ASCII prose, digits, accented text, emoji) with the "
              "model's tokenizer and compare characters, bytes (what a byte-level tokenizer takes) "
              "and token counts per string."},
             {16, D,
              "Turn logic should count tokens, not lines, because turn length in tokens varies "
              "widely; only token-based tracking stays consistent.",
              "By construction: the state is indexed by token, never by line; the segment map "
              "stores turns as token ranges (core/state/ledger/snapshot.h: TokenSegment) and "
              "truncate cuts at a token index (core/state/surgery/surgery.h).",
              ""},
             {17, M,
              "Re-feeding the prompt text recreates the cache, but expensively; restoring the "
              "saved state directly is faster and scales better.",
              "",
              "For states of 32 to 512 tokens, time a replay (one prefill of the token buffer) "
              "against reading and restoring the .kvsnap, and compare the two caches (max |ΔK|, "
              "max |ΔV|) to confirm that both give the same state."},
             {18, M,
              "A saved cache allows forking: one state yields several continuations, like a "
              "savegame, enabling speculative decoding, beam search and controlled experiments.",
              "",
              "Fork one state into branches continued 32 steps at temperature 1 with the same "
              "seed and with different seeds, and compare their tokens and per-step logits: "
              "same-seed branches should agree, different seeds should diverge."},
             {19, M,
              "Cache memory grows with tokens, scaling as sequence length times layer count "
              "times hidden size, so long runs may need compression or truncation.",
              "",
              "Measure the cache bytes at 16, 64 and 256 tokens and fit them against 2 x layers "
              "x length x kv_heads x head_dim x element size and against the claim's layers x "
              "length x hidden size."},
             {20, M,
              "Knowing the cache delta lets you skip tokens and fast-forward without a full "
              "replay, given a symbolic grasp of token boundaries and roles.",
              "",
              "Reuse a cached prefix for a new prompt that shares it (truncate to the shared "
              "prefix, feed only the new suffix) and compare with a full prefill of the new "
              "prompt: cache max |ΔK|, next-step KL and the time saved."},
         }},
        {"Replay vs. restoration: the illusion of memory",
         {
             {21, M,
              "Re-feeding the prompt only looks like memory: it does not rebuild the model's "
              "internal state; restoring the saved K/V is the only way to recreate it.",
              "",
              "Replay a state's token buffer in a fresh session and compare it with the restored "
              "cache layer by layer (max |ΔK|, max |ΔV|, cosine, first diverging layer) and by "
              "next-step logits (KL, top-1)."},
             {22, M,
              "Replay is slow and fragile and drifts out of sync as the prompt grows each turn; "
              "KV restoration avoids that growth and keeps the structure intact.",
              "",
              "Replay the standard state's token buffer five times and compare the rebuilt caches "
              "with each other and with the restored one (relative L2), and re-encode the decoded "
              "text to see whether replay from text gets the same ids."},
             {23, D,
              "True restoration comes from the cache, not the prompt: memory lives in attention, "
              "the text is only its surface, and the prompt can be thrown away.",
              "Holds by construction: a forward step reads the cache, the positions and the next "
              "input id, never the recorded token buffer (core/engine/session.h: feed), so a "
              "restored state continues the same whatever its buffer holds. The buffer is not "
              "thrown away all the same: verify recomputes layer-0 keys from it and names a cache "
              "it did not produce (cache.provenance), and truncate, replay and diff read it. "
              "tst_continuation continuationNeverReadsTheTokenBuffer checks that a relabelled "
              "and an empty buffer continue with the same logits bit for bit, and that verify "
              "names the relabelled one.",
              ""},
             {24, M,
              "Generation can resume from a loaded cache alone, with no prompt at all: past "
              "keys and values suffice after a full state injection.",
              "",
              "Restore a snapshot and generate 32 tokens without feeding any new token, "
              "comparing the tokens and per-step logits with the live session continued from "
              "the same point."},
             {25, N,
              "Tokens are not symbols: a string of tokens gets symbolic sense only from the memory "
              "structure and its alignment, never from its surface form.",
              "'Symbolic meaning' and 'scaffolded interpretation' have no operational "
              "definition, so no measurement on any model decides it; its measurable core, that "
              "a token's effect depends on its context, is #55.",
              ""},
             {26, M,
              "A restored cache continues flawlessly even after a machine restart: identical "
              "model, cache and seed yield identical output with no variance.",
              "Caveat: reloading the model and the file in the same process stands in for a "
              "reboot; bit-exactness across devices or kernels is not promised "
              "(core/state/verify/restore.h, tolerance profiles).",
              "Capture at token 16 of a seeded generation at temperature 1, save, reload the model "
              "from its file, restore the state with its recorded RNG state and continue to 64 "
              "tokens, comparing tokens and max |Δlogit| with the uninterrupted run."},
             {27, D,
              "When prompt and cache disagree the output turns strange (incoherent completions, "
              "conflicting references); trust the cache and align the prompt to it.",
              "Does not hold, by construction: the forward pass never reads the token buffer "
              "(#23), so a cache under another prompt's buffer continues exactly as its own "
              "prompt would, coherently; nothing strange shows in the text. The half that holds, "
              "trust the cache, is why the disagreement must be checked rather than seen: verify "
              "reports it as cache.provenance (core/state/verify). tst_continuation "
              "continuationNeverReadsTheTokenBuffer checks both.",
              ""},
             {28, M,
              "Trimming the prompt loses meaning unless the cache is trimmed to match; tokens "
              "removed from the input must also be removed from memory.",
              "",
              "Drop the last k tokens from the text but keep the full cache, and compare the "
              "continuation with a fresh run of the trimmed text and with kvscope's truncate at "
              "the same point (drift KL, first diverging token)."},
             {29, D,
              "Replay fakes continuity while the cache guarantees it: only restoration keeps "
              "attention structure and positions; replay is a fallback prone to subtle errors.",
              "Does not hold for an exact replay, by construction: a replay recomputes every "
              "key, value and position from the same tokens with the same weights "
              "(core/engine/session.h: feed), so it "
              "rebuilds the live run's attention rows up to the rounding of a batched prefill "
              "against one-token steps. tst_continuation replayRebuildsTheLiveAttention checks "
              "every layer and query head within 1e-5 and the positions exactly. Where replay "
              "really is fragile is text: #21 and #22 measure a replay against a restore and a "
              "replay from re-encoded text.",
              ""},
             {30, M,
              "The cache holds structure, not only token history: it encodes how tokens relate, "
              "not just their order, and that is where contextual understanding comes from.",
              "",
              "Feed the same final token at the same position after two different prefixes and "
              "compare its cached K/V per layer (relative ΔK, ΔV): equal everywhere would mean "
              "order only, differences above layer 0 show context encoded."},
         }},
        {"Restoration and alignment: the rules of time",
         {
             {31, M,
              "Deterministic results need three things, cache, position and seed, each "
              "controlling a different part; missing any one breaks reproducibility.",
              "",
              "From one snapshot, continue 32 seeded steps at temperature 1 with everything "
              "restored, then with the seed changed, the positions offset by one and the cache "
              "replaced by a replay, comparing each run's token agreement with the first."},
             {32, M,
              "Resuming works only when position and cache agree; a mismatch skews attention "
              "offsets, with symptoms like hallucination or sudden tone shifts.",
              "",
              "Inject the position-offset and stale-next-position faults, restore them forcibly "
              "and measure drift against the clean state (per-step KL, top-1 agreement, first "
              "diverging token over 32 steps)."},
             {33, N,
              "Injected prompts must fit the memory scaffold already in the cache; new tokens "
              "must refer to what it holds, or the dissonance makes the output incoherent.",
              "Which tokens 'fit the scaffold' and what counts as incoherent are semantic "
              "judgements the claim leaves undefined; a perplexity gap on a 260K-parameter story "
              "model would not settle them.",
              ""},
             {34, M,
              "Tokens added after a restore must take positions that continue cleanly from it; a "
              "mismatch gives fragmentary or empty attention.",
              "",
              "After a restore, feed the next token at the correct position, after a gap of 4 "
              "and 4 positions back (Session::setNextPosition), and compare its attention per "
              "head (entropy, total variation to the correct run) and its logits (KL)."},
             {35, M,
              "An incorrect position points attention at the wrong earlier tokens: a shift of a "
              "single token already ruins meaning and structure, so debugging needs token-level "
              "counts.",
              "",
              "Shift the positions by one (position-offset fault, offset 1) and measure the drift "
              "against the clean state: per-step KL, top-1 agreement and first diverging token "
              "over 32 greedy steps."},
             {36, M,
              "The cache_position counter must restart at zero for a new session; carrying it "
              "over causes invisible memory bleed.",
              "",
              "Start a new session at position n with an empty cache and compare its logits over "
              "a fresh prompt with a start at 0 (KL, max |Δlogit|), then leave the old cache in "
              "place (leaked-state fault) to separate position carry-over from cache carry-over."},
             {37, M,
              "A wrong alignment raises no error: it fails silently, and only the degraded "
              "quality of the output shows that something is off.",
              "",
              "Inject each alignment fault (position-offset, stale-next-position, "
              "truncated-cache, duplicate-bos), continue each forcibly and record whether the "
              "engine raised an error, how far the output drifted and whether verify named it."},
             {38, M,
              "Even dropout or a dtype mismatch can break a restore, since sampling or precision "
              "changes alter attention; reproducing needs every runtime setting matched.",
              "Caveat: kvscope runs no dropout at inference; the experiment decides the dtype "
              "half.",
              "Round-trip the cache through f16 and bf16 (the dtype-roundtrip fault), restore "
              "and measure drift against the f32 state (KL, max |Δlogit|, first diverging token "
              "over 32 steps)."},
             {39, D,
              "The seed steers sampling but leaves internal memory untouched: the cache fixes "
              "structure, the seed the variation, and both must be saved for exact replay.",
              "By construction: a sampler reads the last logits and returns a token id; it never "
              "sees the session (core/engine/sampler.h). The seed decides which token is drawn, "
              "and the cache then records that token's K/V like any fed token's, so the seed and "
              "the cache are both needed for an exact replay of sampled text (the snapshot "
              "records the sampler with its seed and draw count). tst_continuation "
              "cacheOnlyGrowsAndSamplersDoNotTouchIt checks that two seeds, teacher-forced on the "
              "same tokens, leave the same cache bits.",
              ""},
             {40, M,
              "Re-feeding identical tokens does not bring memory back unless the cache is set as "
              "well; replaying without the cache merely mimics continuity.",
              "",
              "Teacher-force a replayed session and the restored session on the same 32 "
              "continuation tokens and compare their per-step logits (KL, max |Δlogit|, top-1)."},
         }},
        {"Architectural truths",
         {
             {41, D,
              "The KV cache belongs to the model and is not saved by default: each pass builds "
              "it and discards it unless captured; persisting it is the developer's job.",
              "By construction, with one correction: in kvscope the cache belongs to the "
              "Session, not the model (core/engine/session.h; the model is immutable, "
              "core/engine/model.h), and it reaches disk only through an explicit capture into "
              "a Snapshot (core/state/ledger/snapshot.h).",
              ""},
             {42, D,
              "The cache lives on the model's device; restoring on another device needs an "
              "explicit memory transfer and care with dtypes.",
              "By construction: a cache the model extends is moved to the model's device and "
              "compute dtype first (core/engine/kvcache.cpp: KvCache::Impl::reserve), and a "
              "restore rebuilds the snapshot's host bytes on the model's device "
              "(core/state/verify/restore.h: cacheFromSnapshot), so the transfer is explicit in "
              "code but automatic for the user; cross-device agreement has its own tolerance "
              "profile there.",
              ""},
             {43, M,
              "A model has no memory unless it is captured: transformers are stateless between "
              "calls, and memory exists only if preserved and reinserted by hand.",
              "",
              "Run prompt B on a freshly loaded model and on the same model object after other "
              "sessions ran prompt A, and compare B's logits bitwise (max |Δlogit| = 0 means the "
              "model kept nothing between calls)."},
             {44, D,
              "Every forward pass starts a fresh memory stack, which piles up across turns until "
              "cleared or overwritten, so chat front ends must handle its growth.",
              "By construction, with one correction: a pass does not start a new stack; each feed "
              "appends its tokens' K/V, positions and mask to the "
              "session's cache once every layer succeeded (core/engine/forwardcommon.h: "
              "commitAppend); only Session::reset or a new session clears it "
              "(core/engine/session.h), and a full context stops generation (context_full).",
              ""},
             {45, M,
              "A saved cache can be reused only with the exact same model and tokenizer; "
              "changed weights, tokenizer or architecture invalidate it.",
              "Caveat: small weight deltas (a fine-tuned sibling) need a second checkpoint; the "
              "experiment uses a random-weight model of the same shape.",
              "Restore the state with another model's K/V (the foreign-cache fault) and with a "
              "swapped tokenizer (tokenizer-swapped), measure the drift against the clean state "
              "and record what verify reports for each."},
             {46, D,
              "MLP output is recomputed every time and never kept; only the attention output "
              "survives from step to step, MLPs being transient on purpose.",
              "By construction, with one correction: neither the MLP nor the attention output "
              "is stored; what persists is each layer's K and V, the attention's inputs "
              "(core/engine/kvcache.h; core/engine/llama.cpp: ffn_out and attn_out are added to "
              "the residual stream and dropped).",
              ""},
             {47, M,
              "Attention drives memory and the feed-forward path merely reacts: MLPs shape each "
              "step's logits but do not affect the long-term memory structures.",
              "",
              "Zero one layer's MLP output (an observer replacing ffn_out) during the prefill and "
              "measure how much the cached K/V of every higher layer change for the same tokens "
              "(relative ΔK, ΔV per layer), and the next-step KL."},
             {48, M,
              "Every layer keeps its own attention memory and hands nothing up: layers neither "
              "fuse nor read each other's caches and contribute independently.",
              "",
              "Zero layer 0's attention output (an observer replacing attn_out) during the "
              "prefill and measure the change of the cached K/V of layers 1 and up for the same "
              "tokens (relative ΔK, ΔV per layer), layer 0 itself being the control."},
             {49, M,
              "Models require positions that keep increasing, even with a cache: rewinding needs "
              "a reset of the whole state, and violations cause drift or incoherence.",
              "",
              "Rewind a 64-token state to 32 tokens with truncate and continue 32 greedy steps, "
              "comparing tokens and logits with a fresh run of the first 32 tokens continued the "
              "same way (KL, first diverging token)."},
             {50, D,
              "Memory survives only if captured at the right moment, just after the attention "
              "output and before the next token; late captures risk a corrupted cache.",
              "By construction in kvscope: a forward pass commits its slots only after every "
              "layer succeeded (core/engine/forwardcommon.h: commitAppend) and one thread drives "
              "a session (core/engine/session.h), so every capture between two feed() calls is "
              "consistent; there is no mid-step moment to miss. Capture timing during a "
              "generation is #71, settled the same way.",
              ""},
         }},
        {"Symbolic structure",
         {
             {51, N,
              "Context is a scaffold that attention builds and prompts only decorate; prompts "
              "cannot keep references alone, and symbolic reasoning needs text and memory aligned.",
              "'Scaffold', 'decorate' and 'symbolic reasoning' have no operational definition, "
              "and 'keeping a reference' needs a task with labelled referents; the testable part "
              "(re-fed text vs restored cache) is measured by #21 and settled by #23.",
              ""},
             {52, N,
              "Meaning cannot be injected without respecting the scaffold: tokens work only "
              "inside an intact relational structure, and misplaced ones confuse or misroute.",
              "'Meaning', 'activation' and 'relational structure' name no quantity to measure; "
              "the nearest measurable questions, a cached fragment moved elsewhere (#79) and "
              "misaligned positions (#34), are classified on their own.",
              ""},
             {53, N,
              "Symbolic tokens persist only with structural alignment: concepts must rest on a "
              "coherent attention history, or they become inert noise.",
              "'Symbolic tokens', 'concepts' and 'inert noise' name no measurable quantity; "
              "whether a concept persists needs a probe for that concept, which neither the "
              "claim nor a 4-layer story model provides.",
              ""},
             {54, D,
              "The cache behaves like a latent attention graph whose edges link near and distant "
              "tokens by attention, and the graph changes with every generated token.",
              "Half right, by construction: generating appends one K/V per layer and KV head and "
              "never rewrites an earlier slot (core/engine/kvcache.h: append only; an old slot "
              "changes only through an explicit patch, truncate or eviction), so the 'graph' "
              "gains nodes while its stored endpoints stay fixed; what changes with every token "
              "are the new query's attention weights, computed afresh (the Attention panel). "
              "tst_continuation cacheOnlyGrowsAndSamplersDoNotTouchIt checks the first 32 slots' "
              "bits "
              "after 48 more tokens.",
              ""},
             {55, M,
              "Meaning is set by position and structure, not just by the words: the same token "
              "placed in another context acts differently.",
              "",
              "Place the same token after several different prefixes and at shifted positions "
              "and compare the next-token distributions it produces (pairwise KL) and its K/V "
              "above layer 0."},
             {56, N,
              "Supersymbols can steer memory behaviour on purpose: specially engineered tokens can "
              "switch on latent structural functions in the scaffolded logic.",
              "No token and no function is named, so there is nothing to test; an existence claim "
              "about engineered triggers needs a search over inputs (or training), and finding "
              "none in a 4-layer story model would not refute it.",
              ""},
             {57, N,
              "Cache promotion keeps symbolic tokens alive across turns: reinforcing attention "
              "selectively keeps abstract referents present, giving layered, lasting memory.",
              "'Cache promotion' and 'selective attention reinforcement' are no operation of a "
              "standard cache (nor of kvscope), and 'abstract referents' need a labelled task; "
              "the measurable neighbour, what an eviction must keep, is the survival lab's "
              "(docs/SURVIVAL.md).",
              ""},
             {58, D,
              "Stale structure decays out of the cache unless protected: as context grows the "
              "oldest K/V get evicted, and only snapshots or reinsertion prevent it.",
              "Not by itself: a plain cache keeps every slot until the context is full "
              "(core/engine/kvcache.h appends and never drops; generation stops with "
              "'context_full'). Slots are lost only through an eviction policy a runtime "
              "chooses, which kvscope applies explicitly (survive: sink-window, h2o, random, "
              "...) and measures in the survival lab (docs/SURVIVAL.md: what each policy costs "
              "in KL at each budget). tst_continuation cacheOnlyGrowsAndSamplersDoNotTouchIt "
              "checks "
              "that the cache holds every generated token.",
              ""},
             {59, D,
              "Attention is routing with the cache as its record: each step does a lookup into "
              "everything stored, so the past is re-read in full every time.",
              "By construction: each new query attends over every cached slot [0, past + T) "
              "(core/engine/forwardcommon.h: attend), so every decode step reads all stored keys "
              "and values; the attention view shows each query's row over all slots "
              "(widgets/panels/attentionpanel.h).",
              ""},
             {60, N,
              "Without symbolic rules memory degrades into noise: tokens must fit a symbolic "
              "context, or attention amplifies irrelevant or decayed information.",
              "'Symbolic rules' are undefined, and telling irrelevant from relevant information "
              "needs a labelled task; no measurement on one model decides it.",
              ""},
         }},
        {"Control and sovereignty",
         {
             {61, M,
              "The model trusts its cache completely, even when it is wrong: a faulty or "
              "tampered cache gives silent failures rather than explicit errors.",
              "",
              "Continue from a cache with one layer corrupted (corrupt-layer, noise and zeros) "
              "and from another model's cache (foreign-cache), recording whether the forward "
              "pass raises anything and how far the output moves (KL, first diverging token)."},
             {62, D,
              "Memory can be loaded with no prompt for silent recall: with no new tokens the cache "
              "alone sets the current state, continuing without any replay.",
              "Holds by construction: the cache and the last logits are all a forward step and "
              "the sampler read (core/engine/session.h), so a session built from them with an "
              "empty token buffer continues like the original. tst_continuation "
              "continuationNeverReadsTheTokenBuffer checks the same logits bit for bit over 32 "
              "greedy steps. #24 measures the restore that puts them there.",
              ""},
             {63, M,
              "The cache can be partly overwritten layer by layer; such scoped edits modify the "
              "live state surgically and can serve symbolic patches or dynamic control.",
              "",
              "Patch KV head 0 of one layer at a position range from another snapshot, for every "
              "layer in turn, check with diff that nothing outside that scope changed, and measure "
              "the next-step KL per patched layer."},
             {64, M,
              "A misaligned cache keeps running with no crash or warning; it only yields "
              "distorted output, degraded reasoning and hallucination.",
              "",
              "Continue forcibly from position-offset states with offsets 1, 4 and 16, confirm "
              "that generation completes without an error, and measure the degradation (max KL and "
              "first diverging token over 32 greedy steps)."},
             {65, M,
              "The cache is the model's only view of the world; change the cache and the "
              "model's worldview changes with it.",
              "",
              "Replace the whole cache of prompt A by that of prompt B (same length), keeping A's "
              "token buffer and next input, and measure the KL of the next-token distributions "
              "to B's and to A's over 16 teacher-forced steps."},
             {66, M,
              "New prompt tokens are always read through the cached history: none is processed "
              "alone, and earlier keys and positions influence each choice.",
              "",
              "Feed the same suffix after two different cached histories and compare its "
              "next-token distributions (KL) and the share of attention the suffix puts on the "
              "cached history versus on itself."},
             {67, M,
              "Live chat works only on top of memory scaffolding: a coherent session requires "
              "restored state and managed turns, otherwise it is synthetic rather than stateful.",
              "",
              "Run a three-turn chat twice, once keeping the cache between turns and once "
              "re-feeding the whole transcript every turn, and compare the replies token by "
              "token and the time per turn."},
             {68, M,
              "Attention can be modulated by editing only the memory: with the prompt unchanged, "
              "a changed memory shifts the output, steering the model at runtime.",
              "",
              "Patch one layer's K/V from another prompt's state and feed the same new tokens to "
              "the patched and the original state, comparing each head's attention (total "
              "variation) and the next-token KL."},
             {69, M,
              "K/V can be steered while the tokens stay fixed: identical text with different "
              "cached K/V follows another path, the memory serving as an invisible frame.",
              "",
              "Perturb the K/V of the same text with noise of growing strength (corrupt-layer, "
              "scale 0.01 to 1), token buffer unchanged, and measure the first step where greedy "
              "generation departs from the clean run."},
             {70, N,
              "Supersymbols can reshape memory structure mid-stream: tokens placed right can carry "
              "control signals that intervene live in how the model reasons.",
              "No token and no control signal is named, so there is nothing to test; like #56 it "
              "asserts that engineered triggers exist, which a search on a 4-layer story model "
              "could neither confirm in general nor refute.",
              ""},
         }},
        {"Advanced mechanics and edge behavior",
         {
             {71, D,
              "Capturing the cache early prevents drift in generation: divergence grows the longer "
              "the capture waits, so snapshot right after important completions.",
              "Does not hold, by construction: a capture copies the cache's bits and the "
              "sampler's RNG state, and save, load and restore keep them bit for bit "
              "(core/state/ledger/snapshot.h, core/state/verify/restore.h), so a capture "
              "continues exactly whenever it is taken; what matters is that it is taken. "
              "tst_continuation captureAtAnyStepRestoresBitExact checks captures at steps 0, 16 "
              "and 48 of a seeded run, through a file. Drift from a lossy store is #38.",
              ""},
             {72, N,
              "Zero-copy saves are fast when .cpu().detach() is skipped; serialising straight "
              "from the GPU avoids the round trip but needs a device-aware restore.",
              "About a PyTorch serialisation path, not the model: kvscope's snapshot writer always "
              "copies K/V to the host (core/engine/kvcache.h: rawKey), and the small models run "
              "on the CPU, where there is no device copy to skip; a GPU timing would measure one "
              "library's I/O on one machine.",
              ""},
             {73, M,
              "Damage to one cache layer distorts everything above it, since upper layers rest on "
              "lower ones and errors travel up; precision and layout must be kept exactly.",
              "",
              "Corrupt layer l's cache (corrupt-layer, noise), feed 8 new tokens and compare "
              "their K/V below, at and above l with the clean run (relative ΔK, ΔV per layer), "
              "and the output drift (KL)."},
             {74, M,
              "Rotary and absolute position schemes must match between save and use: a different "
              "scheme aligns attention differently, and a mismatch ghosts or fragments it.",
              "",
              "Rotate the cached keys with a wrong RoPE theta (the wrong-rope-theta fault) and "
              "measure the drift against the clean state (max KL, first diverging token over 32 "
              "greedy steps) and whether verify names positions.rope."},
             {75, M,
              "Truncation quietly drops cache content and breaks alignment: cutting the input "
              "removes needed state, so prompt edits must keep the cache in step.",
              "",
              "Truncate a state with kvscope's truncate and with the truncated-cache fault "
              "(cache cut, positions and mask kept), verify both and compare their continuations "
              "with a fresh run of the kept tokens (KL, first diverging token)."},
             {76, M,
              "Models never flag a broken memory and carry on regardless; the failure surfaces "
              "only as incoherent text, so external checksums or diagnostics are required.",
              "",
              "Run the fault lab on a clean state and record for every fault that the engine "
              "continued without an error, the drift it caused, and whether verify (checksums "
              "and alignment checks) caught it."},
             {77, M,
              "Restoring the wrong cache looks like hallucination: the model mentions people or "
              "events absent from the prompt, a memory misalignment, not prompt confusion.",
              "Caveat: 'hallucination' is measured by a proxy, the tokens the output takes from "
              "the wrong cache's prompt.",
              "Restore the cache of prompt A under prompt B's token buffer, generate 64 greedy "
              "tokens and count those that occur in A's prompt but not in B's, against a control "
              "run of B's own cache."},
             {78, M,
              "Memory leaks when the cache is not reset between samples: past state carries over "
              "unless cleared, so reset unless deliberately continuing.",
              "",
              "Run prompt B in a session still holding prompt A's cache (the leaked-state fault) "
              "and in a fresh session, and compare B's next-token distributions (KL) and greedy "
              "continuations (first diverging token)."},
             {79, M,
              "Cache fragments can be reused as attention blocks: logical modules of earlier "
              "context can be saved and re-injected as plug-in memory components.",
              "",
              "Splice a cached fragment of one state into another at a different position (keys "
              "re-rotated) and compare with recomputing the spliced text in place (the splice "
              "report's per-layer drift and next-step KL)."},
             {80, N,
              "The cache is the dialogue itself and the rest is surface text: text shows what was "
              "said, the cache what was understood, and owning memory means owning the "
              "conversation.",
              "A summary in metaphor: 'what is understood' has no measurable counterpart; that "
              "the cache drives the continuation holds by construction (#23), and that editing "
              "it steers is measured by #65 and #68.",
              ""},
         }},
    }};
    return kTiers;
}

} // namespace

std::string className(InsightClass c) {
    switch (c) {
    case InsightClass::Measurable:
        return "measurable";
    case InsightClass::Definitional:
        return "definitional";
    case InsightClass::NotTestable:
        return "not-testable";
    }
    return "unknown";
}

const std::vector<Insight>& registry() {
    static const std::vector<Insight> kRegistry = [] {
        std::vector<Insight> all;
        const auto& ts = tiers();
        for (std::size_t t = 0; t < ts.size(); ++t)
            for (const Row& r : ts[t].rows)
                all.push_back({r.number, static_cast<int>(t) + 1, ts[t].name, r.claim, r.cls,
                               r.note, r.experiment});
        return all;
    }();
    return kRegistry;
}

const Insight* findInsight(int number) {
    const auto& all = registry();
    auto it = std::find_if(all.begin(), all.end(),
                           [number](const Insight& i) { return i.number == number; });
    return it == all.end() ? nullptr : &*it;
}

std::vector<std::string> tierNames() {
    std::vector<std::string> names;
    for (const Tier& t : tiers())
        names.emplace_back(t.name);
    return names;
}

} // namespace kvscope::insights
