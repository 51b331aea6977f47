// `lancet doc summarize|ask|extract`: a PDF or text document answered through the model: the
// text is cut into sentence-aligned numbered context blocks (documents/), the prompt (rules,
// blocks, task) is rendered with the chat template and checked to fit --max-model-len (what
// does not fit is reported, nothing is cut), then generated. The answer's citations are checked
// against the blocks; `extract` parses and validates the answer's JSON against the schema.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "cli/commands.h"
#include "cli/parse_args.h"
#include "cli/runtime_flags.h"
#include "core/logging.h"
#include "documents/document_prompt.h"
#include "documents/document_text.h"
#include "documents/sentence_blocks.h"
#include "runtime/runtime.h"

namespace lancet::cli {
namespace {

using documents::ContextBlock;
using documents::DocRequest;
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

// The result object: blocks, answer, citations (each checked), and for extract the JSON.
nlohmann::json result(const std::vector<ContextBlock>& blocks, const std::string& answer, const DocRequest& req,
                      int64_t prompt_tokens, bool* ok) {
  nlohmann::json j;
  j["blocks"] = nlohmann::json::array();
  for (const ContextBlock& b : blocks)
    j["blocks"].push_back({{"id", b.id}, {"page", b.page}, {"tokens", b.tokens}, {"text", b.text}});
  j["prompt_tokens"] = prompt_tokens;
  j["answer"] = answer;
  std::vector<int> cited = documents::cited_blocks(answer), unknown;
  for (int id : cited)
    if (id < 1 || id > static_cast<int>(blocks.size())) unknown.push_back(id);
  j["cited_blocks"] = cited;
  j["unknown_cited_blocks"] = unknown;  // cited ids that are no block of the document
  *ok = true;
  if (req.task == DocTask::kExtract) {
    auto v = documents::extract_json(answer, req.schema);
    j["valid"] = v.ok();
    if (v.ok()) j["json"] = *v; else j["error"] = v.status().message();
    *ok = v.ok();
  }
  return j;
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
  DocRequest req;
  if (task == "summarize") req.task = DocTask::kSummarize;
  else if (task == "ask") req.task = DocTask::kAsk, req.question = question;
  else if (task == "extract") req.task = DocTask::kExtract;
  else return std::fprintf(stderr, "lancet doc: the task is summarize, ask or extract, not '%s'\n", task.c_str()), 2;
  if ((req.task == DocTask::kAsk && question.empty()) || (req.task == DocTask::kExtract && schema_path.empty()))
    return std::fprintf(stderr, "lancet doc: %s needs %s\n", task.c_str(), task == "ask" ? "--question" : "--schema"), 2;
  if (req.task == DocTask::kExtract) {
    auto schema = read_schema(schema_path);
    if (!schema.ok()) return fail(schema.status());
    req.schema = std::move(*schema);
  }
  set_log_level(LogLevel::kWarning);
  auto doc = documents::load_document(file);  // before the model loads: a bad file fails at once
  if (!doc.ok()) return fail(doc.status());
  auto rt = Runtime::create(rc);
  if (!rt.ok()) return fail(rt.status());
  Runtime& r = **rt;
  if (!r.tokenizer()) return fail(InvalidArgument("the model has no tokenizer"));
  auto count = [&](const std::string& t) { return static_cast<int64_t>(r.tokenizer()->encode(t).size()); };
  auto blocks = documents::make_blocks(doc->pages, block_tokens, count);
  if (!blocks.ok()) return fail(blocks.status());
  if (blocks->empty()) return fail(InvalidArgument(file + ": no text found"));
  ChatTemplateOptions opt;
  opt.add_generation_prompt = true;
  auto prompt_tokens = [&](const nlohmann::ordered_json& m) -> StatusOr<int64_t> {
    ASSIGN_OR_RETURN(auto ids, r.encode_chat(m, opt));
    return static_cast<int64_t>(ids.size());
  };
  if (Status st = documents::check_fits(*blocks, req, sp.max_tokens, r.max_model_len(), prompt_tokens); !st.ok())
    return fail(st);
  auto ids = r.encode_chat(documents::document_messages(*blocks, req), opt);
  if (!ids.ok()) return fail(ids.status());
  auto answer = generate(r, *ids, sp);
  if (!answer.ok()) return fail(answer.status());
  bool ok = true;
  const nlohmann::json j = result(*blocks, *answer, req, static_cast<int64_t>(ids->size()), &ok);
  std::printf("%s\n", j.dump().c_str());
  return ok ? 0 : 1;
}

}  // namespace lancet::cli
