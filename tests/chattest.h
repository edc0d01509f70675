// Helpers shared by the chat-template suites (tst_chat, tst_chatengine).
#pragma once

#include <QByteArray>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>

namespace chattest {

// A UTC calendar time, weekday and day of the year filled in.
inline std::tm calendar(int year, int month, int day, int hour, int minute) {
    std::tm t{};
    t.tm_year = year - 1900;
    t.tm_mon = month - 1;
    t.tm_mday = day;
    t.tm_hour = hour;
    t.tm_min = minute;
    const std::time_t secs = timegm(&t); // normalizes tm_wday / tm_yday
    gmtime_r(&secs, &t);
    return t;
}

// The clock set A's reference renderings and the engine cases were made with, as the test data
// records it.
inline const std::tm kSetANow = calendar(2024, 7, 26, 12, 0);

inline std::string s(const QByteArray& b) {
    return b.toStdString();
}

// Where two renderings first differ, with 40 bytes of context before it, as JSON strings.
inline std::string firstDifference(const std::string& got, const std::string& want) {
    std::size_t i = 0;
    while (i < got.size() && i < want.size() && got[i] == want[i])
        ++i;
    const auto ctx = [&](const std::string& x) {
        return nlohmann::ordered_json(x.substr(i > 40 ? i - 40 : 0, 100)).dump();
    };
    return "first difference at byte " + std::to_string(i) + "\n  got:  " + ctx(got) +
           "\n  want: " + ctx(want);
}

} // namespace chattest
