// The subcommands of the lancet binary; one file per command, dispatched from main.cc.
// Each takes the arguments after the command name (argv[0] is the command) and returns the
// process exit status: 0 ok, 1 failure, 2 usage error.
#pragma once

namespace lancet::cli {

int cmd_version(int argc, char** argv);
int cmd_inspect(int argc, char** argv);
int cmd_verify(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_generate(int argc, char** argv);
int cmd_run(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_detokenize(int argc, char** argv);
int cmd_chat_template(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_run_batch(int argc, char** argv);
int cmd_bench_serve(int argc, char** argv);
int cmd_quantize(int argc, char** argv);
int cmd_merge_lora(int argc, char** argv);
int cmd_eval_precision(int argc, char** argv);
int cmd_eval_needle(int argc, char** argv);
int cmd_doc(int argc, char** argv);

}  // namespace lancet::cli

// Defined in src/cli/eval_logits_cmd.cc.
int cmd_eval_logits(int argc, char** argv);
