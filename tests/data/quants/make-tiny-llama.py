#!/usr/bin/env python3
"""Writes the Hugging Face folder tiny-q4_k_m.gguf was made from (see README.md): a random
llama of 2 layers, dim 256, 4 heads / 2 KV heads of 64, FFN 512, 4,096 tokens (the demo
model's tokenizer), tied embeddings, f32. Rows of 256 and 512 are whole K-quant blocks, so
llama-quantize's Q4_K_M gives real Q4_K / Q6_K matrices. Pure Python (no numpy).
usage: make-tiny-llama.py OUT_DIR"""
import array
import json
import os
import random
import struct
import sys

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
random.seed(2026)
C, F, L, H, KV, D, V = 256, 512, 2, 4, 2, 64, 4096
config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": C,
          "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H,
          "num_key_value_heads": KV, "head_dim": D, "max_position_embeddings": 256,
          "vocab_size": V, "hidden_act": "silu", "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
          "tie_word_embeddings": True, "bos_token_id": 0, "eos_token_id": 1,
          "torch_dtype": "float32"}
with open(os.path.join(out, "config.json"), "w") as f:
    json.dump(config, f, indent=1)


def normal(n, std):
    return array.array("f", (random.gauss(0, std) for _ in range(n)))


def ones(n):
    return array.array("f", [1.0] * n)


tensors = {"model.embed_tokens.weight": ([V, C], normal(V * C, 0.5)),
           "model.norm.weight": ([C], ones(C))}
for l in range(L):
    p = "model.layers.%d." % l
    tensors[p + "input_layernorm.weight"] = ([C], ones(C))
    tensors[p + "post_attention_layernorm.weight"] = ([C], ones(C))
    tensors[p + "self_attn.q_proj.weight"] = ([H * D, C], normal(H * D * C, 0.08))
    tensors[p + "self_attn.k_proj.weight"] = ([KV * D, C], normal(KV * D * C, 0.08))
    tensors[p + "self_attn.v_proj.weight"] = ([KV * D, C], normal(KV * D * C, 0.08))
    tensors[p + "self_attn.o_proj.weight"] = ([C, H * D], normal(H * D * C, 0.08))
    tensors[p + "mlp.gate_proj.weight"] = ([F, C], normal(F * C, 0.08))
    tensors[p + "mlp.up_proj.weight"] = ([F, C], normal(F * C, 0.08))
    tensors[p + "mlp.down_proj.weight"] = ([C, F], normal(F * C, 0.06))

# safetensors: an 8-byte header length, the JSON header (padded with spaces), the data.
header, blobs, offset = {}, [], 0
for name in sorted(tensors):
    shape, data = tensors[name]
    b = data.tobytes()
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(b)]}
    offset += len(b)
    blobs.append(b)
text = json.dumps(header).encode()
text += b" " * ((8 - len(text) % 8) % 8)
with open(os.path.join(out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(text)))
    f.write(text)
    for b in blobs:
        f.write(b)
