// Continues a llama.cpp sequence state in llama.cpp itself (through the npm package
// node-llama-cpp, a development tool: never a dependency of kvscope or of its CI).
// usage: node continue.mjs MODEL.gguf STATE.ggsq PENDING_TOKEN N [CONTEXT_OPTIONS_JSON]
// Loads the state into a fresh context, feeds PENDING_TOKEN and prints, as JSON, the N greedy
// tokens llama.cpp produces after it: {"tokens": [...], "restored": <tokens in the state>}.
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
const [modelPath, statePath, pending, n, options] = process.argv.slice(2);
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath});
const ctx = await model.createContext(
    Object.assign({contextSize: 512, sequences: 1}, options ? JSON.parse(options) : {}));
const seq = ctx.getSequence();
await seq.loadStateFromFile(statePath, {acceptRisk: true});
const restored = seq.contextTokens.length;
const out = [];
for await (const t of seq.evaluate([Number(pending)], {temperature: 0})) {
    out.push(t);
    if (out.length >= Number(n)) break;
}
await ctx.dispose();
console.log(JSON.stringify({tokens: out, restored}));
