// Greedy generation by llama.cpp itself (node-llama-cpp; a development tool only).
// usage: node generate.mjs MODEL.gguf PROMPT N
// Prints {"prompt_tokens": [BOS, ...llama.cpp's tokens of PROMPT], "tokens": [N greedy ids],
// "text": their text}.
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
const [modelPath, prompt, n] = process.argv.slice(2);
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath});
const ctx = await model.createContext({contextSize: 256, sequences: 1});
const seq = ctx.getSequence();
const ids = [model.tokens.bos, ...model.tokenize(prompt)];
const out = [];
for await (const t of seq.evaluate(ids, {temperature: 0})) {
    out.push(t);
    if (out.length >= Number(n)) break;
}
await ctx.dispose();
console.log(JSON.stringify({prompt_tokens: ids, tokens: out, text: model.detokenize(out)}));
