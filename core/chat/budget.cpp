#include "chat/budget.h"

namespace kvscope::chat {

namespace {
thread_local Budget* t_current = nullptr;
} // namespace

void Budget::stepsUsedUp() const {
    throw LimitError("the step budget of " + std::to_string(m_limits.maxSteps) +
                     " was used up (a loop or macro fans out)");
}

void Budget::checkString(std::size_t bytes) const {
    if (bytes > m_limits.maxStringBytes)
        throw LimitError("a string value exceeds the limit of " +
                         std::to_string(m_limits.maxStringBytes) + " bytes");
}

void Budget::checkItems(std::size_t items) const {
    if (items > m_limits.maxItems)
        throw LimitError("a list or dict exceeds the limit of " +
                         std::to_string(m_limits.maxItems) + " items");
}

void Budget::acquire(std::size_t bytes) {
    if (bytes > m_limits.maxMemoryBytes || m_live > m_limits.maxMemoryBytes - bytes)
        throw LimitError("the values built hold more than " +
                         std::to_string(m_limits.maxMemoryBytes) + " bytes (the memory budget)");
    m_live += bytes;
    if (m_live > m_peak)
        m_peak = m_live;
}

Budget* Budget::current() {
    return t_current;
}

Budget::Install::Install(Budget& budget) : m_previous(t_current) {
    t_current = &budget;
}

Budget::Install::~Install() {
    t_current = m_previous;
}

Budget::Hold::Hold(std::size_t bytes) : m_budget(t_current), m_bytes(bytes) {
    if (m_budget)
        m_budget->acquire(bytes);
}

Budget::Hold::~Hold() {
    if (m_budget)
        m_budget->release(m_bytes);
}

} // namespace kvscope::chat
