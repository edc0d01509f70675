// usage: deq IN.gguf [OUT.gguf]
// Lists every tensor's ggml type; with OUT, writes a twin with identical metadata where every
// non-F32 tensor is replaced by F32 from ggml's own to_float of the stored data.
#include "ggml.h"
#include "gguf.h"
#include <stdio.h>
#include <string.h>

int main(int argc, char ** argv) {
    if (argc < 2) { fprintf(stderr, "usage: deq IN.gguf [OUT.gguf]\n"); return 2; }
    struct ggml_context * cin = NULL;
    struct gguf_init_params gp = { false, &cin };
    struct gguf_context * gin = gguf_init_from_file(argv[1], gp);
    if (!gin) { fprintf(stderr, "cannot read %s\n", argv[1]); return 1; }
    int64_t nt = gguf_get_n_tensors(gin);
    size_t tot = 0;
    for (int64_t i = 0; i < nt; i++) {
        struct ggml_tensor * t = ggml_get_tensor(cin, gguf_get_tensor_name(gin, i));
        tot += ggml_nelements(t) * sizeof(float) + ggml_tensor_overhead();
        printf("%-28s %-5s ne=[%lld,%lld] bytes=%zu\n", t->name, ggml_type_name(t->type),
               (long long) t->ne[0], (long long) t->ne[1], ggml_nbytes(t));
    }
    if (argc < 3) return 0;
    struct ggml_init_params ip = { tot + 1024*1024, NULL, false };
    struct ggml_context * cout = ggml_init(ip);
    struct gguf_context * gout = gguf_init_empty();
    gguf_set_kv(gout, gin);
    for (int64_t i = 0; i < nt; i++) {
        struct ggml_tensor * t = ggml_get_tensor(cin, gguf_get_tensor_name(gin, i));
        struct ggml_tensor * o = ggml_new_tensor(cout, GGML_TYPE_F32, ggml_n_dims(t), t->ne);
        ggml_set_name(o, t->name);
        if (t->type == GGML_TYPE_F32) {
            memcpy(o->data, t->data, ggml_nbytes(t));
        } else {
            const struct ggml_type_traits * tr = ggml_get_type_traits(t->type);
            int64_t nrows = ggml_nrows(t);
            for (int64_t r = 0; r < nrows; r++)
                tr->to_float((const char *) t->data + r * t->nb[1], (float *) o->data + r * t->ne[0], t->ne[0]);
        }
        gguf_add_tensor(gout, o);
    }
    if (!gguf_write_to_file(gout, argv[2], false)) { fprintf(stderr, "write failed\n"); return 1; }
    printf("wrote %s\n", argv[2]);
    return 0;
}
