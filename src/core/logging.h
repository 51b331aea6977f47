// Minimal leveled logging to stderr. Level set once at start (--log-level) or by tests.
#pragma once

#include <sstream>
#include <string>

namespace lancet {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kOff = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
void log_message(LogLevel level, const char* file, int line, const std::string& msg);

}  // namespace lancet

#define LANCET_LOG(level, expr)                                                           \
  do {                                                                                    \
    if (static_cast<int>(level) >= static_cast<int>(::lancet::log_level())) {             \
      std::ostringstream _oss;                                                            \
      _oss << expr;                                                                       \
      ::lancet::log_message(level, __FILE__, __LINE__, _oss.str());                       \
    }                                                                                     \
  } while (0)
#define LOG_DEBUG(expr) LANCET_LOG(::lancet::LogLevel::kDebug, expr)
#define LOG_INFO(expr) LANCET_LOG(::lancet::LogLevel::kInfo, expr)
#define LOG_WARN(expr) LANCET_LOG(::lancet::LogLevel::kWarning, expr)
#define LOG_ERROR(expr) LANCET_LOG(::lancet::LogLevel::kError, expr)
