#include "promptbuilder.h"

#include "chat/template.h"
#include "tokenizer/tokenizer.h"

#include <QRegularExpression>
#include <QStringList>

namespace kvscope::widgets {

namespace {

BuiltPrompt idsFromText(const QString& text) {
    BuiltPrompt out;
    const QStringList parts =
        text.split(QRegularExpression(QStringLiteral("[\\s,]+")), Qt::SkipEmptyParts);
    for (const QString& p : parts) {
        bool ok = false;
        const int id = p.toInt(&ok);
        if (!ok || id < 0) {
            out.error = QStringLiteral("This model has no tokenizer: type token ids separated by "
                                       "spaces (\"%1\" is not one).")
                            .arg(p);
            out.ids.clear();
            return out;
        }
        out.ids.push_back(id);
    }
    out.segments.assign(out.ids.size(), QStringLiteral("prompt"));
    return out;
}

QString segmentLabel(const kvscope::chat::Segment& s) {
    if (s.kind == "message")
        return QString::fromStdString(s.role);
    if (s.kind == "generation_prompt")
        return QStringLiteral("generation prompt");
    return QString::fromStdString(s.kind);
}

} // namespace

BuiltPrompt buildPrompt(const PromptRequest& request,
                        const std::shared_ptr<const kvscope::tok::Tokenizer>& tokenizer) {
    if (!tokenizer)
        return idsFromText(request.text);
    BuiltPrompt out;
    if (!request.chat) {
        out.ids = tokenizer->encode(request.text.toStdString());
        out.segments.assign(out.ids.size(), QStringLiteral("prompt"));
        return out;
    }
    const auto source = tokenizer->chatTemplate();
    if (!source) {
        out.error = QStringLiteral("This tokenizer ships no chat template; use a raw prompt.");
        return out;
    }
    auto tmpl = kvscope::chat::Template::parse(*source, "chat_template");
    if (!tmpl) {
        out.error = QString::fromStdString(tmpl.message());
        return out;
    }
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (!request.system.trimmed().isEmpty())
        messages.push_back({{"role", "system"}, {"content", request.system.toStdString()}});
    messages.push_back({{"role", "user"}, {"content", request.user.toStdString()}});
    kvscope::chat::RenderOptions options;
    options.addGenerationPrompt = true;
    if (auto bos = tokenizer->bosId())
        options.extraVariables["bos_token"] = tokenizer->tokenText(*bos);
    if (auto eos = tokenizer->eosId())
        options.extraVariables["eos_token"] = tokenizer->tokenText(*eos);
    auto rendered = tmpl.value().renderWithSegments(messages, options);
    if (!rendered) {
        out.error = QString::fromStdString(rendered.message());
        return out;
    }
    const auto& r = rendered.value();
    out.ids = tokenizer->encode(r.text, {.addSpecialTokens = false});
    // Attribute each token to the segment holding its first byte (decoded offsets).
    std::size_t offset = 0;
    int32_t prev = -1;
    std::size_t seg = 0;
    for (int32_t id : out.ids) {
        while (seg + 1 < r.segments.size() && offset >= r.segments[seg].end)
            ++seg;
        out.segments.push_back(r.segments.empty() ? QStringLiteral("prompt")
                                                  : segmentLabel(r.segments[seg]));
        offset += tokenizer->decodeNext(prev, id).size();
        prev = id;
    }
    return out;
}

} // namespace kvscope::widgets
