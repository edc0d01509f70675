#include "llamacppbody.h"

#include <stdexcept>

namespace kvscope::hostile {

namespace {

constexpr std::uint32_t kGgsq = 0x67677371u, kGgsn = 0x6767736eu;

void appendBytes(Bytes& out, const Bytes& b) {
    out.insert(out.end(), b.begin(), b.end());
}

// The file header before the body: magic, version, n_token, tokens.
Bytes header(std::uint32_t magic, std::uint32_t version, const std::vector<std::int32_t>& tokens) {
    Bytes b;
    appendLE<std::uint32_t>(b, magic);
    appendLE<std::uint32_t>(b, version);
    appendLE<std::uint32_t>(b, static_cast<std::uint32_t>(tokens.size()));
    for (std::int32_t t : tokens)
        appendLE<std::int32_t>(b, t);
    return b;
}

} // namespace

Bytes StateBody::bytes() const {
    Bytes b;
    appendLE<std::uint32_t>(b, nStream);
    appendLE<std::uint32_t>(b, static_cast<std::uint32_t>(cells.size()));
    for (const auto& c : cells) {
        appendLE<std::int32_t>(b, c.pos);
        appendLE<std::uint32_t>(b, static_cast<std::uint32_t>(c.seqIds.size()));
        for (std::int32_t s : c.seqIds)
            appendLE<std::int32_t>(b, s);
    }
    appendLE<std::uint32_t>(b, vTrans);
    appendLE<std::uint32_t>(b, static_cast<std::uint32_t>(keys.size()));
    for (const auto* records : {&keys, &values})
        for (const auto& r : *records) {
            appendLE<std::int32_t>(b, r.type);
            appendLE<std::uint64_t>(b, r.rowSize);
            appendBytes(b, r.data);
        }
    return b;
}

StateBody StateBody::parse(const Bytes& f, std::size_t at) {
    StateBody s;
    auto need = [&](std::size_t n) {
        if (at + n > f.size())
            throw std::runtime_error("llama.cpp state base: truncated body");
    };
    need(8);
    s.nStream = getLE<std::uint32_t>(f, at);
    const std::uint32_t cells = getLE<std::uint32_t>(f, at + 4);
    at += 8;
    for (std::uint32_t i = 0; i < cells; ++i) {
        need(8);
        StateCell c;
        c.pos = getLE<std::int32_t>(f, at);
        const std::uint32_t n = getLE<std::uint32_t>(f, at + 4);
        at += 8;
        need(4 * std::size_t{n});
        c.seqIds.clear();
        for (std::uint32_t k = 0; k < n; ++k, at += 4)
            c.seqIds.push_back(getLE<std::int32_t>(f, at));
        s.cells.push_back(std::move(c));
    }
    need(8);
    s.vTrans = getLE<std::uint32_t>(f, at);
    const std::uint32_t layers = getLE<std::uint32_t>(f, at + 4);
    at += 8;
    if (s.vTrans != 0)
        throw std::runtime_error("llama.cpp state base: transposed V is not supported here");
    for (auto* records : {&s.keys, &s.values})
        for (std::uint32_t l = 0; l < layers; ++l) {
            need(12);
            StateRecord r;
            r.type = getLE<std::int32_t>(f, at);
            r.rowSize = getLE<std::uint64_t>(f, at + 4);
            at += 12;
            const std::size_t n = static_cast<std::size_t>(r.rowSize) * cells;
            need(n);
            r.data.assign(f.begin() + static_cast<std::ptrdiff_t>(at),
                          f.begin() + static_cast<std::ptrdiff_t>(at + n));
            at += n;
            records->push_back(std::move(r));
        }
    return s;
}

void StateBody::cutRows(std::uint64_t bytes) {
    for (auto* records : {&keys, &values})
        for (auto& r : *records) {
            Bytes cut;
            for (std::size_t c = 0; c < cells.size(); ++c)
                cut.insert(cut.end(), r.data.begin() + static_cast<std::ptrdiff_t>(c * r.rowSize),
                           r.data.begin() + static_cast<std::ptrdiff_t>(c * r.rowSize + bytes));
            r.rowSize = bytes;
            r.data = std::move(cut);
        }
}

StateParts StateParts::fromGgsq(const Bytes& f) {
    StateParts p;
    const std::uint32_t n = getLE<std::uint32_t>(f, 8);
    for (std::uint32_t i = 0; i < n; ++i)
        p.tokens.push_back(getLE<std::int32_t>(f, 12 + 4 * std::size_t{i}));
    p.body = StateBody::parse(f, 12 + 4 * std::size_t{n});
    return p;
}

Bytes ggsqFile(const std::vector<std::int32_t>& tokens, const StateBody& body,
               std::uint32_t version) {
    Bytes b = header(kGgsq, version, tokens);
    appendBytes(b, body.bytes());
    return b;
}

Bytes ggsnFile(const std::vector<std::int32_t>& tokens, const StateBody& body,
               const std::string& arch, std::uint32_t version) {
    Bytes b = header(kGgsn, version, tokens);
    appendLE<std::uint32_t>(b, static_cast<std::uint32_t>(arch.size()));
    b.insert(b.end(), arch.begin(), arch.end());
    appendBytes(b, body.bytes());
    return b;
}

Bytes SlotBlob::words() const {
    Bytes b;
    appendLE<std::int32_t>(b, marker);
    appendLE<std::uint32_t>(b, version);
    appendLE<std::uint32_t>(b, static_cast<std::uint32_t>(tokens.size()));
    for (std::int32_t t : tokens)
        appendLE<std::int32_t>(b, t);
    appendLE<std::uint32_t>(b, mediaCount);
    for (std::uint32_t s : mediaStarts)
        appendLE<std::uint32_t>(b, s);
    for (const auto& m : media) {
        appendLE<std::uint32_t>(b, static_cast<std::uint32_t>(m.size()));
        appendBytes(b, m);
    }
    while (b.size() % 4)
        b.push_back(0);
    return b;
}

Bytes slotFile(const SlotBlob& blob, const StateBody& body) {
    return slotFileWords(blob.words(), body);
}

Bytes slotFileWords(const Bytes& w, const StateBody& body) {
    Bytes b;
    appendLE<std::uint32_t>(b, kGgsq);
    appendLE<std::uint32_t>(b, 3);
    appendLE<std::uint32_t>(b, static_cast<std::uint32_t>(w.size() / 4));
    appendBytes(b, w);
    appendBytes(b, body.bytes());
    return b;
}

} // namespace kvscope::hostile
