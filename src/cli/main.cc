// lancet command-line entry point: dispatches to one file per subcommand (commands.h).
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/commands.h"

namespace {

struct Command {
  const char* name;
  int (*fn)(int, char**);
  const char* help;
};

const Command kCommands[] = {
    {"eval-logits", cmd_eval_logits, "compare logits and greedy output with golden references"},
    {"inspect", lancet::cli::cmd_inspect, "print a model's architecture, dims, dtypes and memory"},
    {"verify", lancet::cli::cmd_verify, "check a model's files (SHA-256) and tensors"},
    {"run", lancet::cli::cmd_run, "chat with a model in the terminal"},
    {"generate", lancet::cli::cmd_generate, "generate a completion for one prompt"},
    {"bench", lancet::cli::cmd_bench, "benchmarks: latency, throughput, serve"},
    {"tokenize", lancet::cli::cmd_tokenize, "encode text from stdin into token ids"},
    {"detokenize", lancet::cli::cmd_detokenize, "decode a JSON id list from stdin"},
    {"chat-template", lancet::cli::cmd_chat_template, "render JSON messages from stdin with the chat template"},
    {"serve", lancet::cli::cmd_serve, "serve a model over the OpenAI-compatible HTTP API"},
    {"run-batch", lancet::cli::cmd_run_batch, "run a Batch API input file (JSONL) offline"},
    {"quantize", lancet::cli::cmd_quantize, "convert a checkpoint to FP8 (compressed-tensors layout)"},
    {"merge-lora", lancet::cli::cmd_merge_lora, "merge a PEFT LoRA adapter into a checkpoint's weights"},
    {"eval-needle", lancet::cli::cmd_eval_needle, "needle-in-a-haystack long-context test"},
    {"doc", lancet::cli::cmd_doc, "answer from a PDF or text document: summarize, ask, extract"},
    {"eval-precision", lancet::cli::cmd_eval_precision, "compare FP8 weights / KV cache with the reference precision"},
    {"version", lancet::cli::cmd_version, "print the version and the backends compiled in"},
};

void usage(FILE* out) {
  std::fprintf(out, "usage: lancet <command> [options]\n\ncommands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-14s %s\n", c.name, c.help);
  std::fprintf(out, "\n`lancet <command> --help` describes a command's options.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "--version" || cmd == "-V") cmd = "version";
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    usage(stdout);
    return 0;
  }
  for (const Command& c : kCommands) {
    if (cmd == c.name) return c.fn(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "lancet: unknown command '%s'\n\n", cmd.c_str());
  usage(stderr);
  return 2;
}
