// Writes a tiny random llama-architecture GGUF (all F32) for reference logits.
// Deterministic: xorshift64* seeded with 0x1234567887654321, uniform in [-0.08,0.08] for
// matrices, norms = 1 + uniform[-0.02,0.02]. Tensors generated in the order listed below.
#include "ggml.h"
#include "gguf.h"
#include <stdio.h>
#include <stdint.h>
#include <string.h>

static uint64_t st = 0x1234567887654321ULL;
static double urand(void) { // [0,1)
    st ^= st >> 12; st ^= st << 25; st ^= st >> 27;
    return (double)((st * 2685821657736338717ULL) >> 11) * (1.0 / 9007199254740992.0);
}

static struct ggml_context * ctx;
static struct gguf_context * g;

static void add(const char * name, int64_t ne0, int64_t ne1, int is_norm) {
    struct ggml_tensor * t = ne1 ? ggml_new_tensor_2d(ctx, GGML_TYPE_F32, ne0, ne1)
                                 : ggml_new_tensor_1d(ctx, GGML_TYPE_F32, ne0);
    ggml_set_name(t, name);
    float * d = (float *) t->data;
    int64_t n = ggml_nelements(t);
    for (int64_t i = 0; i < n; i++) {
        double u = 2.0 * urand() - 1.0;
        d[i] = is_norm ? (float)(1.0 + 0.02 * u) : (float)(0.08 * u);
    }
    gguf_add_tensor(g, t);
}

int main(int argc, char ** argv) {
    const char * out = argc > 1 ? argv[1] : "tiny-f32.gguf";
    const int E = 256, V = 256, L = 1, F = 256, H = 4, HKV = 2, HD = E / H;
    struct ggml_init_params ip = { 64u*1024*1024, NULL, false };
    ctx = ggml_init(ip);
    g = gguf_init_empty();
    gguf_set_val_str(g, "general.architecture", "llama");
    gguf_set_val_str(g, "general.name", "tiny-random-llama");
    gguf_set_val_u32(g, "general.file_type", 0); // ALL_F32
    gguf_set_val_u32(g, "llama.context_length", 256);
    gguf_set_val_u32(g, "llama.embedding_length", E);
    gguf_set_val_u32(g, "llama.block_count", L);
    gguf_set_val_u32(g, "llama.feed_forward_length", F);
    gguf_set_val_u32(g, "llama.attention.head_count", H);
    gguf_set_val_u32(g, "llama.attention.head_count_kv", HKV);
    gguf_set_val_u32(g, "llama.rope.dimension_count", HD);
    gguf_set_val_f32(g, "llama.rope.freq_base", 10000.0f);
    gguf_set_val_f32(g, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    gguf_set_val_u32(g, "llama.vocab_size", V);
    gguf_set_val_str(g, "tokenizer.ggml.model", "none");

    add("token_embd.weight", E, V, 0);
    char nm[64];
    for (int l = 0; l < L; l++) {
#define T(s, a, b, n) snprintf(nm, sizeof nm, "blk.%d." s, l); add(nm, a, b, n);
        T("attn_norm.weight", E, 0, 1);
        T("attn_q.weight", E, H*HD, 0);
        T("attn_k.weight", E, HKV*HD, 0);
        T("attn_v.weight", E, HKV*HD, 0);
        T("attn_output.weight", H*HD, E, 0);
        T("ffn_norm.weight", E, 0, 1);
        T("ffn_gate.weight", E, F, 0);
        T("ffn_up.weight", E, F, 0);
        T("ffn_down.weight", F, E, 0);
    }
    add("output_norm.weight", E, 0, 1);
    add("output.weight", E, V, 0);
    if (!gguf_write_to_file(g, out, false)) { fprintf(stderr, "write failed\n"); return 1; }
    printf("wrote %s: %lld tensors\n", out, (long long) gguf_get_n_tensors(g));
    gguf_free(g); ggml_free(ctx);
    return 0;
}
