// Answer: one result of a request on the engine thread (requests.h), of any view type. The
// engine thread sends every result as an Answer through one signal (EngineWorker::answered,
// LedgerController::answered); a view picks the type it shows with
// LedgerController::onAnswer<View>() instead of a signal of its own per operation.
#pragma once

#include <QMetaType>

#include <memory>
#include <typeindex>
#include <typeinfo>

namespace kvscope::widgets {

class Answer {
public:
    Answer() = default;
    template <class View> static Answer of(std::shared_ptr<const View> view) {
        Answer a;
        a.m_type = typeid(View);
        a.m_view = std::move(view);
        return a;
    }
    template <class View> static Answer of(std::shared_ptr<View> view) {
        return of(std::shared_ptr<const View>(std::move(view)));
    }
    // The view when it is a View; null when the answer is of another type.
    template <class View> std::shared_ptr<const View> as() const {
        if (m_type != typeid(View))
            return nullptr;
        return std::static_pointer_cast<const View>(m_view);
    }

private:
    std::type_index m_type = typeid(void);
    std::shared_ptr<const void> m_view;
};

} // namespace kvscope::widgets

Q_DECLARE_METATYPE(kvscope::widgets::Answer)
