// The logit lens's projection and the direct logit attribution (unembed.h).
#include "engine/unembed.h"

#include "engine/forwardcommon.h"
#include "engine/tensorconv.h"

#include <cmath>
#include <string>

namespace kvscope {

namespace {

// A float row as a CPU float64 tensor; `what` names it in the error for a wrong width.
at::Tensor row64(const std::vector<float>& v, int64_t width, const std::string& what) {
    if (static_cast<int64_t>(v.size()) != width)
        throw KvError("attribution: " + what + " has " + std::to_string(v.size()) +
                      " values, the model's " + std::to_string(width));
    return at::from_blob(const_cast<float*>(v.data()), {width}, at::kFloat).to(at::kDouble);
}

at::Tensor cpu64(const at::Tensor& t) {
    return t.to(at::kCPU).to(at::kDouble);
}

// 1 / sqrt(mean(x^2) + eps): the scale an RMSNorm multiplies x by.
double rmsScale(const at::Tensor& x, double eps) {
    return 1.0 / std::sqrt(x.pow(2).mean().item<double>() + eps);
}

} // namespace

Result<HostTensor> unembedResidual(const Model& model, const HostTensor& resid) {
    return catchToResult([&]() -> HostTensor {
        const Model::Impl& m = model.impl();
        if (resid.shape.size() != 2 || resid.shape[1] != m.config.dim || resid.shape[0] < 1 ||
            static_cast<int64_t>(resid.data.size()) != resid.numel())
            throw KvError("logit lens: a residual of shape " + shapeText(resid.shape) +
                          " where [rows, " + std::to_string(m.config.dim) + "] was expected");
        at::NoGradGuard noGrad;
        const at::Tensor x = fromHost(resid).to(m.device).to(m.dtype);
        return toHost(headLogits(m, x, nullptr));
    });
}

double LogitAttribution::sum() const {
    double s = embedding + normBias;
    for (const auto& layer : heads)
        for (double h : layer)
            s += h;
    for (double b : attnBias)
        s += b;
    for (double v : mlp)
        s += v;
    return s;
}

Result<LogitAttribution> attributeLogit(const Model& model, const ResidualParts& parts,
                                        int32_t token) {
    return catchToResult([&]() -> LogitAttribution {
        const Model::Impl& m = model.impl();
        const auto& c = m.config;
        const int64_t C = c.dim, H = c.nHeads, D = c.headDim, L = c.nLayers;
        if (token < 0 || token >= c.vocabSize)
            throw KvError("attribution: token " + std::to_string(token) +
                          " is outside the vocabulary 0.." + std::to_string(c.vocabSize - 1));
        if (static_cast<int64_t>(parts.heads.size()) != L ||
            static_cast<int64_t>(parts.mlp.size()) != L)
            throw KvError("attribution: parts of " + std::to_string(parts.heads.size()) +
                          " attention and " + std::to_string(parts.mlp.size()) +
                          " MLP layers for a model of " + std::to_string(L));
        at::NoGradGuard noGrad;
        LogitAttribution r;
        r.token = token;
        const at::Tensor x = row64(parts.final, C, "the final residual");

        // The head's own numbers for this row: what the parts must add up to.
        {
            const at::Tensor xr =
                fromHost(HostTensor{{1, C}, parts.final}).to(m.device).to(m.dtype);
            const at::Tensor pre = vocabularyLogits(m, xr);
            r.preCapLogit = pre[0][token].item<double>();
            r.logit = c.finalSoftcap > 0
                          ? std::tanh(r.preCapLogit / c.finalSoftcap) * c.finalSoftcap
                          : r.preCapLogit;
        }

        // u: the direction a part's vector is read along, with the final norm's scale frozen.
        const at::Tensor id = at::full(
            {1}, int64_t{token}, at::TensorOptions().dtype(at::kLong).device(m.lmHead.t.device()));
        const at::Tensor w = cpu64(matrixRows(m.lmHead, id)).view({C});
        const at::Tensor gamma = cpu64(m.finalNorm);
        at::Tensor u;
        if (m.arch->layerNorm) {
            const at::Tensor centred = x - x.mean();
            r.normScale = rmsScale(centred, c.normEps); // 1/sqrt(var + eps), biased variance
            u = r.normScale * gamma * w;
            u = u - u.mean();
            r.normBias =
                m.finalNormBias.defined() ? (cpu64(m.finalNormBias) * w).sum().item<double>() : 0.0;
        } else {
            r.normScale = rmsScale(x, c.normEps);
            u = r.normScale * gamma * w;
        }

        const at::Tensor embed = row64(parts.embed, C, "the embedding");
        r.embedding = (embed * u).sum().item<double>();
        at::Tensor rebuilt = embed.clone(); // the final residual from the parts, for residualError
        r.heads.assign(static_cast<size_t>(L), std::vector<double>(static_cast<size_t>(H), 0.0));
        r.attnBias.assign(static_cast<size_t>(L), 0.0);
        r.mlp.assign(static_cast<size_t>(L), 0.0);
        for (int64_t l = 0; l < L; ++l) {
            const LayerWeights& lw = m.layers[static_cast<size_t>(l)];
            const std::string layer = " of layer " + std::to_string(l);
            const at::Tensor z = row64(parts.heads[size_t(l)], H * D, "attn_heads" + layer);
            const at::Tensor wo = cpu64(widenMatrix(lw.wo)); // [C, H*D], one layer at a time
            const at::Tensor bo = lw.bo.defined() ? cpu64(lw.bo) : at::zeros({C}, at::kDouble);
            at::Tensor attn = at::mv(wo, z) + bo; // this layer's attention output, pre-norm
            at::Tensor ul = u;
            if (lw.postAttnNorm.defined()) {
                // Gemma: the block's output is RMS-normed; freeze that scale as well.
                const at::Tensor f = rmsScale(attn, c.normEps) * cpu64(lw.postAttnNorm);
                attn = attn * f;
                ul = u * f;
            }
            // Head h's contribution: z_h · (W_O[:, h] ^T ul) — the output projection read
            // backwards along ul once per layer instead of once per head.
            const at::Tensor g = (at::mv(wo.t(), ul) * z).view({H, D}).sum(1);
            for (int64_t h = 0; h < H; ++h)
                r.heads[size_t(l)][size_t(h)] = g[h].item<double>();
            r.attnBias[size_t(l)] = (bo * ul).sum().item<double>();
            const at::Tensor mlp = row64(parts.mlp[size_t(l)], C, "ffn_out" + layer);
            r.mlp[size_t(l)] = (mlp * u).sum().item<double>();
            rebuilt = rebuilt + attn + mlp;
        }
        r.residualError = (rebuilt - x).abs().max().item<double>();
        return r;
    });
}

} // namespace kvscope
