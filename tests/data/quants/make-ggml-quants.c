// Development-only generator of ggml-quants.gguf (tests/tst_quants.cpp): ggml quantizes a
// fixed 3 x 512 tensor to each type and dequantizes it again with its own kernels; kvscope must
// read the quantized tensors back to exactly those floats. Not built with kvscope. To remake
// the file, clone llama.cpp's source (the node-llama-cpp npm package carries it as
// llama/gitRelease.bundle), build its ggml libraries, then
//   cc -O2 make-ggml-quants.c -Illama.cpp/ggml/include build/ggml/src/libggml.a \
//      build/ggml/src/libggml-cpu.a build/ggml/src/libggml-base.a -lpthread -lm -lstdc++ \
//      -o make-ggml-quants && ./make-ggml-quants ggml-quants.gguf
#include "ggml.h"
#include "gguf.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

#define NE0 512
#define NE1 3
#define N (NE0*NE1)

int main(int argc, char ** argv) {
    const char * out = argc > 1 ? argv[1] : "ggml-quants.gguf";
    static float src[N];
    for (uint32_t i = 0; i < N; i++) {
        double x = sin(0.37*i) * (1.0 + (i % 97) / 13.0) + ((uint32_t)(i*2654435761u) % 1000) / 1000.0 - 0.5;
        src[i] = (float) x;
    }
    // row 2: outliers every 61st element (of the row), zero run at flat elements 1100..1163
    for (int j = 0; j < NE0; j += 61) src[2*NE0 + j] *= 25.0f;
    for (int i = 1100; i <= 1163; i++) src[i] = 0.0f;

    const enum ggml_type types[] = {
        GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0,
        GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,
        GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS, GGML_TYPE_F16, GGML_TYPE_BF16,
    };
    const int nt = sizeof(types)/sizeof(types[0]);

    size_t mem = ggml_tensor_overhead() * (2*nt + 8) + N*sizeof(float)*(2*nt + 2) + 1024*1024;
    struct ggml_init_params ip = { mem, NULL, false };
    struct ggml_context * ctx = ggml_init(ip);
    struct gguf_context * g = gguf_init_empty();
    gguf_set_val_str(g, "general.name", "kvscope-quant-reference");
    gguf_set_val_str(g, "kvscope.src_formula",
        "x=sin(0.37*i)*(1+(i%97)/13.0)+((i*2654435761u)%1000)/1000.0-0.5; row2[j%61==0]*=25; x[1100..1163]=0");

    struct ggml_tensor * ts = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, NE0, NE1);
    ggml_set_name(ts, "src");
    memcpy(ts->data, src, sizeof(src));
    gguf_add_tensor(g, ts);

    printf("%-8s %4s %5s %6s %9s %13s %13s\n", "name", "id", "blck", "bytes", "row_bytes", "max_abs_err", "rmse");
    for (int k = 0; k < nt; k++) {
        enum ggml_type t = types[k];
        const char * name = ggml_type_name(t);
        if (ggml_quantize_requires_imatrix(t)) { printf("%-8s SKIPPED: requires imatrix\n", name); continue; }
        ggml_quantize_init(t);
        struct ggml_tensor * tq = ggml_new_tensor_2d(ctx, t, NE0, NE1);
        char nm[64];
        snprintf(nm, sizeof nm, "q.%s", name);
        ggml_set_name(tq, nm);
        size_t wrote = ggml_quantize_chunk(t, src, tq->data, 0, NE1, NE0, NULL);
        if (wrote != ggml_nbytes(tq)) { fprintf(stderr, "%s: size mismatch %zu vs %zu\n", name, wrote, ggml_nbytes(tq)); return 1; }
        const struct ggml_type_traits * tr = ggml_get_type_traits(t);
        if (!tr->to_float) { fprintf(stderr, "%s: no to_float\n", name); return 1; }
        struct ggml_tensor * tr_ = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, NE0, NE1);
        snprintf(nm, sizeof nm, "ref.%s", name);
        ggml_set_name(tr_, nm);
        float * ref = (float *) tr_->data;
        for (int r = 0; r < NE1; r++) {
            tr->to_float((const char *) tq->data + r*tq->nb[1], ref + r*NE0, NE0);
        }
        double maxe = 0, se = 0;
        for (int i = 0; i < N; i++) { double e = fabs((double)ref[i] - src[i]); if (e > maxe) maxe = e; se += e*e; }
        printf("%-8s %4d %5lld %6zu %9zu %13.9g %13.9g\n", name, (int) t, (long long) ggml_blck_size(t),
               ggml_type_size(t), ggml_row_size(t, NE0), maxe, sqrt(se/N));
        gguf_add_tensor(g, tq);
        gguf_add_tensor(g, tr_);
    }
    if (!gguf_write_to_file(g, out, false)) { fprintf(stderr, "write failed\n"); return 1; }
    printf("wrote %s (%lld tensors, alignment %zu)\n", out, (long long) gguf_get_n_tensors(g), gguf_get_alignment(g));
    gguf_free(g);
    ggml_free(ctx);
    ggml_quantize_free();
    return 0;
}
