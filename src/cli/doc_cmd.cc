// `lancet doc summarize|ask|extract`: a PDF or text document answered through the model: the
// text is cut into sentence-aligned numbered context blocks (documents/), the prompt (rules,
// blocks, task) is rendered with the chat template and checked to fit --max-model-len (what
// does not fit is reported, nothing is cut), then generated (documents/document_answer.h). The
// answer's citations are checked against the blocks; `extract` samples the answer under the
// schema (structured outputs) and validates its JSON against it.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "cli/commands.h"
#include "cli/parse_args.h"
#include "cli/runtime_flags.h"
#include "core/logging.h"
#include "documents/document_answer.h"
#include "runtime/runtime.h"
#include "server/serving_model.h"
#include "structured/output_format.h"

namespace lancet::cli {
namespace {

using documents::DocTask;

int fail(const Status& s) {
  std::fprintf(stderr, "lancet doc: %s\n", s.message().c_str());
  return 1;
}

StatusOr<nlohmann::json> read_schema(const std::string& path) {
  std::ifstream f(path);
  if (!f) return NotFound("cannot open schema " + path);
  std::stringstream s;
  s << f.rdbuf();
  nlohmann::json j = nlohmann::json::parse(s.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(path + ": a JSON Schema is one JSON object");
  return j;
}

// The answer's text, generated greedily from the rendered prompt.
StatusOr<std::string> generate(Runtime& rt, const std::vector<int32_t>& prompt, const SamplingParams& sp) {
  GenerationRequest req;
  req.prompt = prompt;
  req.params = sp;
  ASSIGN_OR_RETURN(auto stream, rt.async_engine().submit(req));
  std::string text;
  TokenEvent ev;
  while (stream->next(&ev)) text += ev.text;
  return text;
}

}  // namespace

int cmd_doc(int argc, char** argv) {
  CLI::App app{"Answer from a document (PDF or text): summarize, ask QUESTION, extract SCHEMA.json", "lancet doc"};
  RuntimeConfig rc;
  rc.max_num_seqs = 1;
  SamplingParams sp;
  sp.temperature = 0.0f;
  sp.max_tokens = 256;
  std::string task, question, schema_path, file;
  int64_t block_tokens = 128;
  add_runtime_flags(app, &rc);
  app.add_option("task", task, "summarize, ask or extract")->required();
  app.add_option("file", file, "the document: a PDF or a UTF-8 text file")->required();
  app.add_option("--question,-q", question, "ask: the question");
  app.add_option("--schema", schema_path, "extract: a JSON Schema file the answer must follow");
  app.add_option("--max-tokens", sp.max_tokens, "the answer's budget")->capture_default_str();
  app.add_option("--block-tokens", block_tokens, "the largest context block, in tokens")->capture_default_str();
  if (const int parsed = parse_args(app, argc, argv); parsed >= 0) return parsed;
  nlohmann::json schema;
  if (task == "extract" && !schema_path.empty()) {
    auto sc = read_schema(schema_path);
    if (!sc.ok()) return fail(sc.status());
    schema = std::move(*sc);
  }
  if (task == "ask" && question.empty()) return std::fprintf(stderr, "lancet doc: ask needs --question\n"), 2;
  if (task == "extract" && schema_path.empty()) return std::fprintf(stderr, "lancet doc: extract needs --schema\n"), 2;
  auto req = documents::make_doc_request(task, question, std::move(schema));
  if (!req.ok()) return std::fprintf(stderr, "lancet doc: %s\n", req.status().message().c_str()), 2;
  set_log_level(LogLevel::kWarning);
  auto doc = documents::load_document(file);  // before the model loads: a bad file fails at once
  if (!doc.ok()) return fail(doc.status());
  auto rt = Runtime::create(rc);
  if (!rt.ok()) return fail(rt.status());
  Runtime& r = **rt;
  if (!r.tokenizer()) return fail(InvalidArgument("the model has no tokenizer"));
  // The server's adapter of the runtime: its chat encoding and its structured-output grammars.
  const std::unique_ptr<server::ServingModel> model = server::make_runtime_model(&r);
  documents::DocModel dm;
  dm.count_tokens = [&](const std::string& t) { return static_cast<int64_t>(r.tokenizer()->encode(t).size()); };
  dm.encode_chat = [&](const nlohmann::ordered_json& m) { return model->encode_chat(m, server::ChatEnding{}); };
  dm.max_model_len = r.max_model_len();
  auto prompt = documents::build_document_prompt(*doc, *req, block_tokens, sp.max_tokens, dm);
  if (!prompt.ok()) return fail(prompt.status().with_context(file));
  if (req->task == DocTask::kExtract) {
    // The answer is held to the schema while it is sampled (structured outputs).
    structured::OutputFormat fmt;
    fmt.kind = structured::OutputFormat::Kind::kJsonSchema;
    fmt.schema = nlohmann::ordered_json::parse(req->schema.dump());
    auto c = model->structured_outputs()->constraint(fmt);
    if (!c.ok()) return fail(c.status().with_context(schema_path));
    sp.constraint = *c;
  }
  auto answer = generate(r, prompt->ids, sp);
  if (!answer.ok()) return fail(answer.status());
  bool ok = true;
  const nlohmann::json j =
      documents::document_result(prompt->blocks, *answer, *req, static_cast<int64_t>(prompt->ids.size()), &ok);
  std::printf("%s\n", j.dump().c_str());
  return ok ? 0 : 1;
}

}  // namespace lancet::cli
