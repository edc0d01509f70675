#!/usr/bin/env python3
"""kvscope against llama2.c's run.c on the same checkpoint: decode and prefill speed.

usage: bench-vs-runc.py --run PATH/TO/run [--cli build/app/cli/kvscope-cli] [--work DIR]
                        [--threads 1,2] [--repeats 3] [--prefill 512] [--decode 256]
                        [--huge-pages] [--json]

`run` is llama2.c's run.c (MIT, one C file), built by whoever runs this, e.g.
    gcc -Ofast -fopenmp -march=native run.c -lm -o run
It is not part of kvscope. The checkpoint is a random-weight model in the shape of llama2.c's
stories110M (12 layers, dim 768, 32,000 tokens, 438 MB of f32), written by kvscope-cli
(random-model --shape stories110m, then convert --to llama2c) with a synthetic 32,000-entry
tokenizer.bin for run.c; it is made once in --work and reused.

Both programs run as whole processes, in alternation, with the same thread count (run.c:
OMP_NUM_THREADS, kvscope: KVSCOPE_THREADS), greedy. Each rate is a difference of two runs
so start-up and load cancel out:
  decode  = (decode - 32) forward passes / (time of a decode-step run - time of a 32-step run)
  prefill = prompt tokens / (time with the prompt and 1 step - time with BOS and 1 step)
run.c feeds a prompt one token at a time; kvscope runs it as one batch. Medians of --repeats.
Both read the weights from the file's mapping; --huge-pages runs kvscope with its flag of that
name (the weights copied onto huge pages at load).
Prints the ratios kvscope / run.c (> 1: kvscope is faster).
"""
import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import time

VOCAB = 32000


def write_tokenizer(path):
    """A llama2.c tokenizer.bin of VOCAB entries: <unk> <s> </s>, the 256 byte tokens, the
    printable ASCII characters, then filler pieces nobody types. No piece merges two
    characters, so run.c encodes text one token per character (after its " " prefix)."""
    pieces = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    pieces += [chr(c) for c in range(32, 127)]
    while len(pieces) < VOCAB:
        pieces.append("\u2581w%d" % len(pieces))
    with open(path, "wb") as f:
        f.write(struct.pack("<i", max(len(p.encode()) for p in pieces)))
        for p in pieces:
            b = p.encode()
            f.write(struct.pack("<fi", 0.0, len(b)))
            f.write(b)
    return {p: i for i, p in enumerate(pieces)}


def prepare(cli, work):
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "model.bin")
    if not os.path.exists(model):
        hf = os.path.join(work, "hf")
        subprocess.run([cli, "random-model", "--shape", "stories110m", "--dtype", "f32",
                        "-o", hf, "--force"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([cli, "convert", "-m", hf, "--to", "llama2c", "-o", model, "--force"],
                       check=True, stdout=subprocess.DEVNULL)
    ids = write_tokenizer(os.path.join(work, "tokenizer.bin"))
    return model, ids


def timed(argv, env):
    t0 = time.perf_counter()
    r = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (r.returncode, " ".join(argv), r.stderr[-2000:]))
    return dt, r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", required=True, help="llama2.c run binary")
    ap.add_argument("--cli", default="build/app/cli/kvscope-cli")
    ap.add_argument("--work", default="/tmp/kvscope-vs-runc")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--decode", type=int, default=256)
    ap.add_argument("--huge-pages", action="store_true",
                    help="run kvscope with --huge-pages (weights copied onto huge pages)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    a = ap.parse_args()
    model, ids = prepare(a.cli, a.work)
    tok = os.path.join(a.work, "tokenizer.bin")

    # The prompt: "a" repeated; run.c encodes it as " " + one token per character, after BOS.
    chars = a.prefill - 2
    prompt_text = "a" * chars
    prompt_ids = [1, ids[" "]] + [ids["a"]] * chars  # BOS + what run.c's bpe_encode makes

    def runc(env, steps, text=None):
        argv = [a.run, model, "-z", tok, "-t", "0", "-n", str(steps)]
        if text:
            argv += ["-i", text]
        return timed(argv, env)[0]

    def kv(env, steps, prompt):
        dt, out = timed([a.cli, "generate", "-m", model, "--prompt-ids",
                         ",".join(map(str, prompt)), "-n", str(steps), "--temperature", "0",
                         "--json"] + (["--huge-pages"] if a.huge_pages else []), env)
        made = len(json.loads(out)["tokens"])
        if made != steps:
            sys.exit("kvscope stopped after %d of %d tokens (greedy reached BOS/EOS): "
                     "use another --decode" % (made, steps))
        return dt

    results = []
    for threads in [int(t) for t in a.threads.split(",")]:
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), KVSCOPE_THREADS=str(threads))
        samples = {k: [] for k in ("r_short", "r_long", "r_bos", "r_prompt",
                                   "k_short", "k_long", "k_bos", "k_prompt")}
        runc(env, 2), kv(env, 2, [1])  # warm the page cache
        for _ in range(a.repeats):
            # forward passes: run.c does `steps`; kvscope with a 1-token prompt and -n K does K.
            samples["r_short"].append(runc(env, 32))
            samples["k_short"].append(kv(env, 32, [1]))
            samples["r_long"].append(runc(env, a.decode))
            samples["k_long"].append(kv(env, a.decode, [1]))
            samples["r_bos"].append(runc(env, 1))
            samples["k_bos"].append(kv(env, 1, [1]))
            samples["r_prompt"].append(runc(env, a.prefill, prompt_text))
            samples["k_prompt"].append(kv(env, 1, prompt_ids))
        m = {k: statistics.median(v) for k, v in samples.items()}
        steps = a.decode - 32
        r_dec = steps / (m["r_long"] - m["r_short"])
        k_dec = steps / (m["k_long"] - m["k_short"])
        r_pre = (a.prefill - 1) / (m["r_prompt"] - m["r_bos"])
        k_pre = (a.prefill - 1) / (m["k_prompt"] - m["k_bos"])
        results.append({"threads": threads, "runc_decode_tps": r_dec, "kvscope_decode_tps": k_dec,
                        "decode_ratio": k_dec / r_dec, "runc_prefill_tps": r_pre,
                        "kvscope_prefill_tps": k_pre, "prefill_ratio": k_pre / r_pre,
                        "runc_startup_s": m["r_bos"], "kvscope_startup_s": m["k_bos"]})
        if not a.json:
            print("threads %d: decode  run.c %6.1f tok/s  kvscope %6.1f tok/s  -> %.2fx"
                  % (threads, r_dec, k_dec, k_dec / r_dec))
            print("           prefill run.c %6.1f tok/s  kvscope %6.1f tok/s  -> %.2fx  "
                  "(%d tokens)" % (r_pre, k_pre, k_pre / r_pre, a.prefill))
            print("           start-up + load + 1 token: run.c %.2f s, kvscope %.2f s"
                  % (m["r_bos"], m["k_bos"]))
            sys.stdout.flush()
    if a.json:
        print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
