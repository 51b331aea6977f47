// Command-line parsing with the exit status docs/CLI.md promises: --help prints its text and is
// 0, a parse error prints CLI11's message and is 2 (a usage error), never CLI11's own codes.
#pragma once

#include <CLI/CLI.hpp>

#include <utility>

namespace lancet::cli {

// -1 when parsing succeeded (the command goes on); otherwise the status the command returns.
// args: (argc, argv), or a vector of arguments in CLI11's reversed order.
template <typename... Args>
int parse_args(CLI::App& app, Args&&... args) {
  try {
    app.parse(std::forward<Args>(args)...);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return -1;
}

}  // namespace lancet::cli
