// Development-only generator of quant-edges.gguf (tests/tst_quants.cpp): 8 rows of 256 floats,
// each a case where a quantizer takes an unusual path, and ggml's quantization of them to
// each type kvscope writes, by ggml_quantize_chunk without an importance matrix (what
// llama-quantize runs). kvscope's quantizers must produce exactly these bytes. Not built
// with kvscope. Build ggml from llama.cpp's source (see make-ggml-quants.c), then
//   cc -O2 make-quant-edges.c -Illama.cpp/ggml/include -Lllama.cpp/build/bin -lggml-base \
//      -lm -Wl,-rpath,llama.cpp/build/bin -o make-quant-edges && ./make-quant-edges quant-edges.gguf
#include "ggml.h"
#include "gguf.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

#define NE0 256
#define NE1 8
#define N (NE0*NE1)

int main(int argc, char ** argv) {
    const char * out = argc > 1 ? argv[1] : "quant-edges.gguf";
    static float src[N];
    for (int j = 0; j < NE0; j++) {
        const float s = sinf(0.71f*j) + 0.3f*cosf(2.3f*j);
        src[0*NE0 + j] = j < 128 ? 0.0f : (j / 16) % 2 ? 0.5f : 0.0f; // zero half, flat sub-blocks
        src[1*NE0 + j] = 0.01f + fabsf(s);                            // all positive
        src[2*NE0 + j] = -0.02f - 2.0f*fabsf(s);                      // all negative
        src[3*NE0 + j] = (j < 128 ? 1e-6f : 1e-9f) * s;               // scales below fp16's range
        src[4*NE0 + j] = 6.0e4f * s;                                  // near fp16's largest
        src[5*NE0 + j] = roundf(4.0f*s) / 4.0f;                       // few levels: rounding ties
        src[6*NE0 + j] = j % 16 == 5 ? 100.0f*s : 0.01f*s;            // one spike per 16
        src[7*NE0 + j] = (j % 2 ? 1.0f : -1.0f) * (1.0f + (j % 7));   // alternating signs
    }
    const enum ggml_type types[] = {
        GGML_TYPE_Q4_0, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0,
        GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,
    };
    const int nt = sizeof(types)/sizeof(types[0]);
    struct ggml_init_params ip = { ggml_tensor_overhead()*(nt + 2) + N*sizeof(float)*(nt + 2), NULL, false };
    struct ggml_context * ctx = ggml_init(ip);
    struct gguf_context * g = gguf_init_empty();
    gguf_set_val_str(g, "general.name", "kvscope-quant-edges");
    struct ggml_tensor * ts = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, NE0, NE1);
    ggml_set_name(ts, "src");
    memcpy(ts->data, src, sizeof(src));
    gguf_add_tensor(g, ts);
    for (int k = 0; k < nt; k++) {
        struct ggml_tensor * tq = ggml_new_tensor_2d(ctx, types[k], NE0, NE1);
        char nm[64];
        snprintf(nm, sizeof nm, "q.%s", ggml_type_name(types[k]));
        ggml_set_name(tq, nm);
        if (ggml_quantize_chunk(types[k], src, tq->data, 0, NE1, NE0, NULL) != ggml_nbytes(tq)) return 1;
        gguf_add_tensor(g, tq);
    }
    if (!gguf_write_to_file(g, out, false)) { fprintf(stderr, "write failed\n"); return 1; }
    printf("wrote %s\n", out);
    return 0;
}
