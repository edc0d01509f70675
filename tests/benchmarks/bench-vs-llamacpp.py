#!/usr/bin/env python3
"""kvscope against llama.cpp on the same GGUF files: decode and prefill speed, peak memory.

usage: bench-vs-llamacpp.py --nlc DIR [--cli build-release/app/cli/kvscope-cli] [--work DIR]
                            [--shapes smollm2-135m,llama-3.2-1b] [--types f32,f16,bf16,q8_0,q4_k_m]
                            [--quantize PATH/TO/llama-quantize] [--gguf FILE]...
                            [--threads 1,2] [--repeats 3] [--prefill 256] [--decode 128]
                            [--openblas-default] [--json]

llama.cpp is the npm package node-llama-cpp (its prebuilt CPU library), installed in --nlc by
`npm install node-llama-cpp` in a scratch folder: a development tool, never a dependency of
kvscope, its build or its tests (CI does not run this). With --quantize (llama.cpp's own
llama-quantize; README.md's "Quantized models" says how to build it from the package's source
bundle in a scratch folder) the quantized files are made by it from the f32 file; without it,
by `kvscope-cli convert`, whose quantized types are llama-quantize's bytes.

The models: random weights in real shapes (`kvscope-cli random-model`, with the bundled demo
model's byte-level BPE tokenizer so that llama.cpp can tokenize), written as GGUF by
`kvscope-cli convert --to gguf --out-dtype TYPE` (f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k,
q4_k_m, q5_k_m), quantized types by llama-quantize from the f32 file when --quantize is given; or
the files given with --gguf (an 8B file made once, say). Both engines run the same token ids: BOS, then a fixed
id sequence.

Whole runs alternate between the engines (medians of --repeats). kvscope: decode = (N + 32 - 32)
tokens / (time of a 1-token prompt generating N + 32 - the same generating 32); prefill = (P - 1)
/ (time of a P-token prompt generating 1 - a 1-token prompt generating 1): start-up and load
cancel. llama.cpp: timed inside its process (prefill: one batch of P ids; decode: N greedy
tokens after the first). Peak memory: each process's maximum resident set (wait4), the largest
over the runs.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEMO_TOKENIZER = os.path.join(HERE, "..", "..", "resources", "demo-model", "tokenizer.json")

# The llama.cpp side, written into --work at run time: load, one prefill batch, N greedy tokens.
LLAMA_JS = r"""
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
const [model, threads, ids, decode] = [process.argv[2], Number(process.argv[3]),
                                       JSON.parse(process.argv[4]), Number(process.argv[5])];
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const m = await llama.loadModel({modelPath: model});
const ctx = await m.createContext({contextSize: Math.max(512, ids.length + decode + 8),
                                   sequences: 1, threads, batchSize: Math.max(512, ids.length)});
const seq = ctx.getSequence();
let t = performance.now();
await seq.evaluateWithoutGeneratingNewTokens(ids);
const prefill = (performance.now() - t) / 1000;
let n = 0, first = 0;
for await (const tok of seq.evaluate([ids[ids.length - 1]], {temperature: 0})) {
  if (n === 0) first = performance.now();
  if (++n > decode) break;
}
console.log(JSON.stringify({prefill_s: prefill, decode_s: (performance.now() - first) / 1000,
                            decoded: n - 1}));
await ctx.dispose(); await m.dispose();
"""


def run(argv, env, cwd=None):
    """Runs argv; returns (seconds, stdout, peak RSS in MB)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd)
    # Both pipes at once (llama-quantize fills stderr while stdout waits), then the child's
    # resource use, which only wait4 reports.
    out, err = [], []
    readers = [threading.Thread(target=lambda f=f, b=b: b.append(f.read()))
               for f, b in ((p.stdout, out), (p.stderr, err))]
    for r in readers:
        r.start()
    for r in readers:
        r.join()
    _, status, usage = os.wait4(p.pid, 0)
    dt = time.perf_counter() - t0
    out, err = out[0], err[0]
    if status != 0:
        sys.exit("%s failed:\n%s" % (" ".join(argv[:3]), err.decode(errors="replace")[-2000:]))
    return dt, out.decode(), usage.ru_maxrss / 1024.0


def make_models(a, env):
    files = []
    for shape in [s for s in a.shapes.split(",") if s]:
        hf = os.path.join(a.work, shape + "-hf")
        if not os.path.exists(os.path.join(hf, "config.json")):
            run([a.cli, "random-model", "--shape", shape, "-o", hf, "--dtype", "f32",
                 "--tokenizer", DEMO_TOKENIZER, "--force"], env)
        f32 = os.path.join(a.work, shape + "-f32.gguf")
        for t in a.types.split(","):
            out = os.path.join(a.work, "%s-%s.gguf" % (shape, t))
            if not os.path.exists(out):
                if t in ("f32", "f16", "bf16") or not a.quantize:
                    run([a.cli, "convert", "-m", hf, "--to", "gguf", "--out-dtype", t, "-o", out],
                        env)
                else:
                    if not os.path.exists(f32):
                        run([a.cli, "convert", "-m", hf, "--to", "gguf", "-o", f32], env)
                    run([a.quantize, f32, out, t.upper(), "2"], env)
            files.append(out)
    return files + a.gguf


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nlc", required=True, help="folder where node-llama-cpp is installed")
    ap.add_argument("--cli", default="build-release/app/cli/kvscope-cli")
    ap.add_argument("--work", default="/tmp/kvscope-bench-llamacpp")
    ap.add_argument("--shapes", default="smollm2-135m")
    ap.add_argument("--types", default="f32,f16,bf16,q8_0,q4_k_m")
    ap.add_argument("--quantize", help="llama.cpp's llama-quantize (else kvscope-cli convert)")
    ap.add_argument("--gguf", action="append", default=[], help="a GGUF file to compare on")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prefill", type=int, default=256)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--openblas-default", action="store_true",
                    help="run kvscope without OPENBLAS_CORETYPE, so that OpenBLAS picks the "
                         "CPU's own kernels")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    a.cli = os.path.abspath(a.cli)
    os.makedirs(a.work, exist_ok=True)
    js = os.path.join(a.nlc, "kvscope-bench-llamacpp.mjs")
    with open(js, "w") as f:
        f.write(LLAMA_JS)
    files = make_models(a, dict(os.environ))
    # libtorch's BLAS (OpenBLAS on Debian) runs kvscope's float prefill GEMMs and the prompt's
    # attention; an OPENBLAS_CORETYPE in the environment pins its kernels (llama.cpp does not
    # use it). Said once, and in every JSON row.
    blas = "(OpenBLAS's own choice)" if a.openblas_default else os.environ.get(
        "OPENBLAS_CORETYPE", "(OpenBLAS's own choice)")
    if not a.json:
        print("kvscope's OpenBLAS kernels: %s" % blas)
    ids = [1] + [(i * 7919 + 1) % 4000 + 50 for i in range(a.prefill - 1)]
    results = []
    for model in files:
        for threads in [int(t) for t in a.threads.split(",")]:
            env = dict(os.environ, OMP_NUM_THREADS=str(threads), KVSCOPE_THREADS=str(threads))
            if a.openblas_default:
                env.pop("OPENBLAS_CORETYPE", None)

            def kv(prompt, steps):
                dt, out, r = run([a.cli, "generate", "-m", model, "--prompt-ids",
                                  ",".join(map(str, prompt)), "-n", str(steps), "--temperature",
                                  "0", "--json"], env)
                made = len(json.loads(out)["tokens"])
                if made != steps:
                    sys.exit("kvscope stopped after %d of %d tokens (greedy reached EOS): use "
                             "another --decode" % (made, steps))
                return dt, out, r

            def lc():
                _, out, rss = run(["node", js, os.path.abspath(model), str(threads),
                                   json.dumps(ids), str(a.decode)], env, cwd=a.nlc)
                r = json.loads(out.strip().splitlines()[-1])
                return r["decoded"] / r["decode_s"], (len(ids)) / r["prefill_s"], rss

            s = {k: [] for k in ("k_short", "k_long", "k_bos", "k_prompt", "l_dec", "l_pre")}
            rss = {"kvscope": 0.0, "llama.cpp": 0.0}
            kv([1], 2), lc()  # warm the page cache
            for _ in range(a.repeats):
                for key, prompt, steps in (("k_short", [1], 32), ("k_long", [1], 32 + a.decode),
                                           ("k_bos", [1], 1), ("k_prompt", ids, 1)):
                    dt, _, r = kv(prompt, steps)
                    s[key].append(dt)
                    rss["kvscope"] = max(rss["kvscope"], r)
                dec, pre, r = lc()
                s["l_dec"].append(dec)
                s["l_pre"].append(pre)
                rss["llama.cpp"] = max(rss["llama.cpp"], r)
            m = {k: statistics.median(v) for k, v in s.items()}
            k_dec = a.decode / (m["k_long"] - m["k_short"])
            k_pre = (a.prefill - 1) / (m["k_prompt"] - m["k_bos"])
            row = {"model": os.path.basename(model), "mb": os.path.getsize(model) / 1e6,
                   "threads": threads, "kvscope_decode_tps": k_dec, "llamacpp_decode_tps": m["l_dec"],
                   "decode_ratio": k_dec / m["l_dec"], "kvscope_prefill_tps": k_pre,
                   "llamacpp_prefill_tps": m["l_pre"], "prefill_ratio": k_pre / m["l_pre"],
                   "kvscope_peak_mb": rss["kvscope"], "llamacpp_peak_mb": rss["llama.cpp"],
                   "openblas_coretype": blas}
            results.append(row)
            if not a.json:
                print("%-28s %7.1f MB  t=%d  decode %6.1f vs %6.1f tok/s = %.2fx   prefill %6.1f "
                      "vs %6.1f = %.2fx   peak RSS %5.0f vs %5.0f MB"
                      % (row["model"], row["mb"], threads, k_dec, m["l_dec"], row["decode_ratio"],
                         k_pre, m["l_pre"], row["prefill_ratio"], rss["kvscope"],
                         rss["llama.cpp"]))
                sys.stdout.flush()
    if a.json:
        print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
