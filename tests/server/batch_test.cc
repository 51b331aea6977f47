// The Files and Batch APIs without weights: the file store (create, list, content, delete,
// reopen, bad purpose, empty, oversized, unknown and malformed ids), the line formats (every
// kind of bad line), the batch state machine and its JSON, the runner and the manager over an
// Engine with a fake model (results in input order, bad lines and failed requests in the
// error file, a cancel that ends a running batch without a restart, unknown ids, list paging),
// and the HTTP routes in process (multipart uploads as the openai client sends them, error
// envelopes).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/async_engine.h"
#include "server/batch_job.h"
#include "server/batch_lines.h"
#include "server/batch_manager.h"
#include "server/batch_runner.h"
#include "server/file_store.h"
#include "server/http_server.h"
#include "server/httplib_include.h"
#include "server/serving_model.h"
#include "test_paths.h"
#include "token_id_model.h"

namespace lancet::server {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct FakeStack {
  testing::MillisecondSuccessorModel executor;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<AsyncEngine> async;
  std::unique_ptr<testing::TokenIdServingModel> model;
  FakeStack() {
    EngineConfig ec;
    ec.scheduler = {.max_num_batched_tokens = 256, .max_num_seqs = 16, .max_model_len = 4096};
    engine = std::make_unique<Engine>(ec, &executor);
    async = std::make_unique<AsyncEngine>(engine.get());
    model = std::make_unique<testing::TokenIdServingModel>(async.get());
  }
};

std::string completion_line(const std::string& id, int first_token, int max_tokens) {
  return json{{"custom_id", id},
              {"method", "POST"},
              {"url", "/v1/completions"},
              {"body", {{"prompt", {first_token, first_token + 1}}, {"max_tokens", max_tokens}, {"temperature", 0}}}}
      .dump();
}

std::string chat_text_line(const std::string& id, const std::string& text) {
  return json{{"custom_id", id},
              {"method", "POST"},
              {"url", "/v1/chat/completions"},
              {"body", {{"messages", json::array({{{"role", "user"}, {"content", text}}})}, {"max_tokens", 2}}}}
      .dump();
}

std::vector<json> parse_jsonl(const std::string& text) {
  std::vector<json> out;
  for (const NumberedLine& l : split_jsonl(text)) out.push_back(json::parse(l.text));
  return out;
}

std::unique_ptr<FileStore> open_store(const std::string& dir, size_t max_bytes = 1 << 20) {
  auto s = FileStore::open(FileStoreConfig{dir, max_bytes});
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? std::move(*s) : nullptr;
}

// ---- FileStore ----

TEST(FileStore, CreateGetListContentRemoveAndReopen) {
  const std::string dir = testing::make_temp_dir() + "/files";
  auto store = open_store(dir);
  ASSERT_TRUE(store);
  auto a = store->create("in.jsonl", "batch", "line1\nline2\n");
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_TRUE(is_file_id(a->id));
  EXPECT_EQ(a->bytes, 12);
  auto b = store->create("out.jsonl", "batch_output", "x");
  ASSERT_TRUE(b.ok());
  EXPECT_NE(a->id, b->id);
  EXPECT_EQ(*store->content(a->id), "line1\nline2\n");
  EXPECT_EQ(store->list().size(), 2u);
  ASSERT_EQ(store->list("batch").size(), 1u);
  EXPECT_EQ(store->list("batch")[0].id, a->id);
  const Json j = file_json(*a);
  EXPECT_EQ(j["object"], "file");
  EXPECT_EQ(j["bytes"], 12);
  EXPECT_EQ(j["filename"], "in.jsonl");
  EXPECT_EQ(j["purpose"], "batch");
  EXPECT_GT(j["created_at"].get<int64_t>(), 0);
  // A restart finds the files again.
  store.reset();
  store = open_store(dir);
  ASSERT_TRUE(store->get(a->id).ok());
  EXPECT_EQ(store->get(a->id)->filename, "in.jsonl");
  EXPECT_EQ(*store->content(b->id), "x");
  EXPECT_TRUE(store->remove(a->id).ok());
  EXPECT_EQ(store->get(a->id).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->remove(a->id).code(), StatusCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(dir + "/" + a->id));
}

TEST(FileStore, RejectsBadPurposeEmptyOversizedAndUnknownIds) {
  auto store = open_store(testing::make_temp_dir() + "/files", /*max_bytes=*/100);
  ASSERT_TRUE(store);
  EXPECT_EQ(store->create("a.jsonl", "fine-tune", "x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->create("a.jsonl", "batch", "").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->create("", "batch", "x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->create("a.jsonl", "batch", std::string(101, 'x')).status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(store->create("a.jsonl", "batch", std::string(100, 'x')).ok());
  for (const char* id : {"file-abc", "../../etc/passwd", "file-../x", ""})
    EXPECT_EQ(store->content(id).status().code(), StatusCode::kNotFound) << id;
  EXPECT_FALSE(is_file_id("file-../x"));
  EXPECT_EQ(FileStore::open(FileStoreConfig{"", 1}).status().code(), StatusCode::kInvalidArgument);
}

// ---- Lines ----

TEST(BatchLines, ParsesGoodLinesAndNamesEveryBadOne) {
  RequestLimits limits;
  BatchLine bl;
  ASSERT_FALSE(parse_batch_line(completion_line("r1", 5, 3), "/v1/completions", limits, &bl));
  EXPECT_EQ(bl.custom_id, "r1");
  EXPECT_EQ(bl.url, "/v1/completions");
  EXPECT_EQ(json::parse(bl.body)["max_tokens"], 3);
  // Any batch endpoint when the batch names none (run-batch).
  ASSERT_FALSE(parse_batch_line(completion_line("r1", 5, 3), "", limits, &bl));
  const std::pair<std::string, std::string> bad[] = {
      {"not json", "invalid_json"},
      {"[1,2]", "invalid_json"},
      {R"({"method":"POST","url":"/v1/completions","body":{}})", "missing_custom_id"},
      {R"({"custom_id":"x","method":"GET","url":"/v1/completions","body":{}})", "invalid_method"},
      {R"({"custom_id":"x","method":"POST","body":{}})", "invalid_url"},
      {R"({"custom_id":"x","method":"POST","url":"/v1/chat/completions","body":{}})", "mismatched_endpoint"},
      {R"({"custom_id":"x","method":"POST","url":"/v1/completions","body":3})", "invalid_body"},
      {R"({"custom_id":"x","method":"POST","url":"/v1/completions","body":{"stream":true}})", "invalid_body"},
  };
  for (const auto& [line, code] : bad) {
    auto e = parse_batch_line(line, "/v1/completions", limits, &bl);
    ASSERT_TRUE(e) << line;
    EXPECT_EQ(e->code, code) << line;
  }
  auto e = parse_batch_line(R"({"custom_id":"x","method":"POST","url":"/v1/embeddings","body":{}})", "", limits, &bl);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code, "invalid_url");
  EXPECT_EQ(e->custom_id, "x");
  const json err = json::parse(line_error_line(*e));
  EXPECT_EQ(err["custom_id"], "x");
  EXPECT_TRUE(err["response"].is_null());
  EXPECT_EQ(err["error"]["code"], "invalid_url");
  const json ok = json::parse(response_line("r1", 200, "req_1", Json{{"a", 1}}));
  EXPECT_EQ(ok["response"]["status_code"], 200);
  EXPECT_EQ(ok["response"]["request_id"], "req_1");
  EXPECT_EQ(ok["response"]["body"]["a"], 1);
  EXPECT_TRUE(ok["error"].is_null());
  EXPECT_EQ(ok["id"].get<std::string>().rfind("batch_req_", 0), 0u);
}

TEST(BatchLines, SplitSkipsBlankLinesAndKeepsNumbers) {
  auto lines = split_jsonl("a\r\n\n  \nb\nc");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].text, "a");
  EXPECT_EQ(lines[1].number, 4);
  EXPECT_EQ(lines[2].text, "c");
  EXPECT_TRUE(split_jsonl("\n\n").empty());
}

// ---- State machine ----

TEST(BatchJob, StateMachineAllowsOpenAiTransitionsOnly) {
  using S = BatchStatus;
  BatchJob b;
  b.created_at = 100;
  EXPECT_TRUE(b.transition(S::kInProgress, 101).ok());
  EXPECT_FALSE(b.transition(S::kCompleted, 102).ok());  // finalizing first
  EXPECT_TRUE(b.transition(S::kFinalizing, 103).ok());
  EXPECT_TRUE(b.transition(S::kCompleted, 104).ok());
  EXPECT_FALSE(b.transition(S::kCancelling, 105).ok());
  EXPECT_EQ(b.transition(S::kCancelling, 105).code(), StatusCode::kFailedPrecondition);
  const Json j = batch_json(b);
  EXPECT_EQ(j["object"], "batch");
  EXPECT_EQ(j["status"], "completed");
  EXPECT_EQ(j["in_progress_at"], 101);
  EXPECT_EQ(j["finalizing_at"], 103);
  EXPECT_EQ(j["completed_at"], 104);
  EXPECT_TRUE(j["cancelled_at"].is_null());
  EXPECT_TRUE(j["output_file_id"].is_null());
  EXPECT_EQ(j["expires_at"], 100 + 86400);
  for (const char* k : {"total", "completed", "failed"}) EXPECT_TRUE(j["request_counts"].contains(k));
  BatchJob c;
  EXPECT_TRUE(c.transition(S::kCancelling, 1).ok());
  EXPECT_FALSE(c.transition(S::kInProgress, 2).ok());
  EXPECT_TRUE(c.transition(S::kCancelled, 3).ok());
  EXPECT_TRUE(batch_status_final(c.status));
  BatchJob f;
  EXPECT_TRUE(f.transition(S::kFailed, 1).ok());
  EXPECT_FALSE(f.transition(S::kInProgress, 2).ok());
}

TEST(BatchJob, CreateRequestIsValidated) {
  RequestLimits limits;
  BatchCreateRequest r;
  EXPECT_FALSE(parse_batch_create(
      R"({"input_file_id":"file-1","endpoint":"/v1/chat/completions","completion_window":"24h","metadata":{"k":"v"}})",
      limits, &r));
  EXPECT_EQ(r.metadata["k"], "v");
  const std::pair<const char*, const char*> bad[] = {
      {R"({"endpoint":"/v1/completions","completion_window":"24h"})", "input_file_id"},
      {R"({"input_file_id":"f","endpoint":"/v1/embeddings","completion_window":"24h"})", "endpoint"},
      {R"({"input_file_id":"f","endpoint":"/v1/completions","completion_window":"1h"})", "completion_window"},
      {R"({"input_file_id":"f","endpoint":"/v1/completions","completion_window":"24h","metadata":{"k":1}})", "metadata"},
      {R"({"input_file_id":"f","endpoint":"/v1/completions","completion_window":"24h","metadata":[]})", "metadata"},
  };
  for (const auto& [body, param] : bad) {
    BatchCreateRequest x;
    auto e = parse_batch_create(body, limits, &x);
    ASSERT_TRUE(e) << body;
    EXPECT_EQ(e->status, 400);
    EXPECT_EQ(e->param, param) << body;
  }
}

// ---- Runner and manager over a fake engine ----

TEST(BatchRunner, ResultsInInputOrderWithBadLinesAndFailedRequestsInTheErrorFile) {
  FakeStack stack;
  std::string input;
  for (int i = 0; i < 12; ++i) input += completion_line("req-" + std::to_string(i), i, 4) + "\n";
  input += "{oops\n";                                                                               // bad JSON
  input += completion_line("too-long", 1, 100000) + "\n";                                          // 400 from the request path
  input += R"({"custom_id":"chat","method":"POST","url":"/v1/completions","body":{"prompt":[1],"max_tokens":-1}})" "\n";
  BatchRunConfig cfg;
  cfg.max_concurrency = 3;
  auto prepared = prepare_batch(input, "/v1/completions", cfg);
  ASSERT_TRUE(prepared.ok()) << prepared.status().to_string();
  BatchRunner runner(stack.model.get(), cfg);
  int64_t progress_calls = 0;
  const BatchResult r = runner.run(*prepared, nullptr, [&](const BatchCounts&) { ++progress_calls; });
  EXPECT_EQ(r.counts.total, 15);
  EXPECT_EQ(r.counts.completed, 12);
  EXPECT_EQ(r.counts.failed, 3);
  EXPECT_FALSE(r.cancelled);
  EXPECT_EQ(progress_calls, 1 + 14);
  const auto out = parse_jsonl(r.output);
  ASSERT_EQ(out.size(), 12u);
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(out[i]["custom_id"], "req-" + std::to_string(i));
    EXPECT_EQ(out[i]["response"]["status_code"], 200);
    const json& body = out[i]["response"]["body"];
    EXPECT_EQ(body["object"], "text_completion");
    EXPECT_EQ(body["usage"]["completion_tokens"], 4);
  }
  const auto errs = parse_jsonl(r.errors);
  ASSERT_EQ(errs.size(), 3u);
  EXPECT_TRUE(errs[0]["custom_id"].is_null());
  EXPECT_EQ(errs[0]["error"]["code"], "invalid_json");
  EXPECT_EQ(errs[1]["custom_id"], "too-long");
  EXPECT_EQ(errs[1]["response"]["status_code"], 400);
  EXPECT_EQ(errs[1]["response"]["body"]["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(errs[2]["response"]["status_code"], 400);
  EXPECT_EQ(parse_jsonl(r.all).size(), 15u);
  EXPECT_EQ(stack.async->stats().num_running, 0);
}

// The guard model (--guard-model) classifies every batch request once it is loaded: an unsafe
// verdict is that line's 400 content_filter in the error file; while the guard is still
// loading (null) the lines run.
class UnsafeGuard : public GuardModel {
 public:
  StatusOr<GuardVerdict> classify(const nlohmann::ordered_json& conversation) const override {
    ++asked;
    GuardVerdict v;
    v.kind = conversation.dump().find("[1]") != std::string::npos ? GuardVerdict::Kind::kSafe
                                                                   : GuardVerdict::Kind::kUnsafe;
    if (v.kind == GuardVerdict::Kind::kUnsafe) v.categories = {"S2"};
    return v;
  }
  mutable std::atomic<int> asked{0};
};

TEST(BatchRunner, GuardModelClassifiesEachRequestOnceLoaded) {
  FakeStack stack;
  UnsafeGuard guard;
  const GuardModel* loaded = nullptr;
  BatchRunConfig cfg;
  cfg.guard_model = [&] { return loaded; };
  std::string input;
  for (int i = 0; i < 4; ++i) input += chat_text_line("c" + std::to_string(i), i == 1 ? "[1]" : "tell me") + "\n";
  auto prepared = prepare_batch(input, "/v1/chat/completions", cfg);
  ASSERT_TRUE(prepared.ok()) << prepared.status().to_string();
  BatchRunner runner(stack.model.get(), cfg);
  const BatchResult before = runner.run(*prepared, nullptr, nullptr);
  EXPECT_EQ(before.counts.failed, 4) << "without a tokenizer the fake model refuses chat: "
                                        "nothing was filtered while the guard was loading";
  for (const json& e : parse_jsonl(before.errors))
    EXPECT_NE(e["response"]["body"]["error"]["code"], "content_filter") << e.dump();
  EXPECT_EQ(guard.asked.load(), 0);
  loaded = &guard;
  const BatchResult after = runner.run(*prepared, nullptr, nullptr);
  EXPECT_EQ(guard.asked.load(), 4);
  const auto errs = parse_jsonl(after.errors);
  ASSERT_EQ(errs.size(), 4u);
  int filtered = 0;
  for (const json& e : errs) {
    if (e["response"]["body"]["error"]["code"] != "content_filter") continue;
    ++filtered;
    EXPECT_EQ(e["response"]["status_code"], 400);
    EXPECT_NE(e["response"]["body"]["error"]["message"].get<std::string>().find("S2"), std::string::npos);
  }
  EXPECT_EQ(filtered, 3) << after.errors;
}

TEST(BatchRunner, WholeInputFailsOnlyWhenEmptyOrTooLong) {
  BatchRunConfig cfg;
  cfg.max_lines = 2;
  EXPECT_EQ(prepare_batch("\n\n", "/v1/completions", cfg).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(prepare_batch("a\nb\nc\n", "/v1/completions", cfg).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(prepare_batch("a\n", "/v1/embeddings", cfg).status().code(), StatusCode::kInvalidArgument);
  auto p = prepare_batch("a\nb\n", "/v1/completions", cfg);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->parsed.size(), 2u);
}

class BatchManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = open_store(testing::make_temp_dir() + "/files");
    BatchRunConfig cfg;
    cfg.max_concurrency = 2;
    manager_ = std::make_unique<BatchManager>(store_.get(), cfg, [this] { return stack_.model.get(); });
  }
  std::string upload(const std::string& content) {
    auto f = store_->create("in.jsonl", "batch", content);
    EXPECT_TRUE(f.ok());
    return f->id;
  }
  std::string create_body(const std::string& file_id) {
    return json{{"input_file_id", file_id}, {"endpoint", "/v1/completions"}, {"completion_window", "24h"}}.dump();
  }
  FakeStack stack_;
  std::unique_ptr<FileStore> store_;
  std::unique_ptr<BatchManager> manager_;
  RequestLimits limits_;
};

TEST_F(BatchManagerTest, RunsToCompletedWithOutputAndErrorFiles) {
  std::string input;
  for (int i = 0; i < 6; ++i) input += completion_line("c" + std::to_string(i), i, 3) + "\n";
  input += "garbage\n";
  BatchJob b;
  ASSERT_FALSE(manager_->create(create_body(upload(input)), limits_, &b));
  EXPECT_EQ(b.status, BatchStatus::kValidating);
  ASSERT_TRUE(manager_->wait_final(b.id, 30));
  ASSERT_FALSE(manager_->get(b.id, &b));
  EXPECT_EQ(b.status, BatchStatus::kCompleted);
  EXPECT_EQ(b.counts.total, 7);
  EXPECT_EQ(b.counts.completed, 6);
  EXPECT_EQ(b.counts.failed, 1);
  EXPECT_GT(b.completed_at, 0);
  EXPECT_GT(b.in_progress_at, 0);
  auto out = store_->content(b.output_file_id);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(parse_jsonl(*out).size(), 6u);
  EXPECT_EQ(store_->get(b.output_file_id)->purpose, "batch_output");
  auto err = store_->content(b.error_file_id);
  ASSERT_TRUE(err.ok());
  EXPECT_EQ(parse_jsonl(*err).size(), 1u);
}

TEST_F(BatchManagerTest, EmptyInputFailsTheBatch) {
  BatchJob b;
  ASSERT_FALSE(manager_->create(create_body(upload("\n\n")), limits_, &b));
  ASSERT_TRUE(manager_->wait_final(b.id, 10));
  ASSERT_FALSE(manager_->get(b.id, &b));
  EXPECT_EQ(b.status, BatchStatus::kFailed);
  EXPECT_EQ(batch_json(b)["errors"]["data"][0]["code"], "invalid_input_file");
}

TEST_F(BatchManagerTest, CancelEndsARunningBatchAndItsRequests) {
  std::string input;
  for (int i = 0; i < 20; ++i) input += completion_line("long" + std::to_string(i), i, 3000) + "\n";
  BatchJob b;
  ASSERT_FALSE(manager_->create(create_body(upload(input)), limits_, &b));
  // Wait until it runs.
  for (int i = 0; i < 500; ++i) {
    ASSERT_FALSE(manager_->get(b.id, &b));
    if (b.status == BatchStatus::kInProgress && stack_.async->stats().num_running > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(b.status, BatchStatus::kInProgress);
  const auto t0 = Clock::now();
  ASSERT_FALSE(manager_->cancel(b.id, &b));
  EXPECT_EQ(b.status, BatchStatus::kCancelling);
  ASSERT_TRUE(manager_->wait_final(b.id, 5));
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
  ASSERT_FALSE(manager_->get(b.id, &b));
  EXPECT_EQ(b.status, BatchStatus::kCancelled);
  EXPECT_GT(b.cancelled_at, 0);
  EXPECT_LT(b.counts.completed, 20);
  // The aborted requests left the engine.
  for (int i = 0; i < 100 && stack_.async->stats().num_running > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(stack_.async->stats().num_running, 0);
  EXPECT_EQ(stack_.async->stats().num_free_blocks, stack_.async->stats().num_blocks);
  // A cancelled batch cannot be cancelled again; the manager keeps working.
  auto again = manager_->cancel(b.id, &b);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 409);
  BatchJob next;
  ASSERT_FALSE(manager_->create(create_body(upload(completion_line("after", 1, 2))), limits_, &next));
  ASSERT_TRUE(manager_->wait_final(next.id, 10));
  ASSERT_FALSE(manager_->get(next.id, &next));
  EXPECT_EQ(next.status, BatchStatus::kCompleted);
}

TEST_F(BatchManagerTest, UnknownIdsAndBadFilesAreErrors) {
  BatchJob b;
  auto e = manager_->get("batch_nope", &b);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 404);
  e = manager_->cancel("batch_nope", &b);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 404);
  e = manager_->create(create_body("file-0123"), limits_, &b);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 404);
  EXPECT_EQ(e->param, "input_file_id");
  auto out = store_->create("o.jsonl", "batch_output", "x");
  e = manager_->create(create_body(out->id), limits_, &b);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
}

TEST_F(BatchManagerTest, ListIsNewestFirstWithLimitAndAfter) {
  const std::string file = upload(completion_line("a", 1, 1));
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    BatchJob b;
    ASSERT_FALSE(manager_->create(create_body(file), limits_, &b));
    ids.push_back(b.id);
  }
  bool more = false;
  auto page = manager_->list(2, "", &more);
  ASSERT_EQ(page.size(), 2u);
  EXPECT_EQ(page[0].id, ids[4]);
  EXPECT_EQ(page[1].id, ids[3]);
  EXPECT_TRUE(more);
  page = manager_->list(10, ids[3], &more);
  ASSERT_EQ(page.size(), 3u);
  EXPECT_EQ(page[0].id, ids[2]);
  EXPECT_FALSE(more);
  for (const auto& id : ids) ASSERT_TRUE(manager_->wait_final(id, 10));
}

// ---- HTTP ----

class BatchHttp : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerConfig cfg;
    cfg.port = 0;
    cfg.max_concurrent_requests = 4;
    cfg.batch_dir = testing::make_temp_dir() + "/batches";
    cfg.max_file_bytes = 4096;
    server_ = std::make_unique<HttpServer>(cfg);
    ASSERT_TRUE(server_->bind().ok());
    server_->set_model(stack_.model.get());
    thread_ = std::thread([this] { server_->run(); });
    cli_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    for (int i = 0; i < 200 && !cli_->Get("/health"); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  void TearDown() override {
    server_->stop();
    thread_.join();
  }
  httplib::Result upload(const std::string& content, const std::string& purpose = "batch") {
    httplib::MultipartFormDataItems items = {{"purpose", purpose, "", ""},
                                             {"file", content, "input.jsonl", "application/octet-stream"}};
    return cli_->Post("/v1/files", items);
  }
  static void expect_envelope(const httplib::Result& r, int status, const std::string& what) {
    ASSERT_TRUE(r) << what;
    EXPECT_EQ(r->status, status) << what << ": " << r->body;
    const json j = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.contains("error")) << what << ": " << r->body;
    EXPECT_TRUE(j["error"]["message"].is_string()) << what;
    EXPECT_TRUE(j["error"]["code"].is_string()) << what;
  }
  FakeStack stack_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  std::unique_ptr<httplib::Client> cli_;
};

TEST_F(BatchHttp, FilesAndBatchesRoundTrip) {
  std::string input;
  for (int i = 0; i < 5; ++i) input += completion_line("h" + std::to_string(i), i, 2) + "\n";
  auto up = upload(input);
  ASSERT_TRUE(up);
  ASSERT_EQ(up->status, 200) << up->body;
  const json file = json::parse(up->body);
  EXPECT_EQ(file["object"], "file");
  EXPECT_EQ(file["purpose"], "batch");
  EXPECT_EQ(file["filename"], "input.jsonl");
  EXPECT_EQ(file["bytes"], input.size());
  const std::string fid = file["id"];
  auto got = cli_->Get("/v1/files/" + fid);
  ASSERT_TRUE(got);
  EXPECT_EQ(json::parse(got->body)["id"], fid);
  auto content = cli_->Get("/v1/files/" + fid + "/content");
  ASSERT_TRUE(content);
  EXPECT_EQ(content->body, input);
  auto list = cli_->Get("/v1/files");
  ASSERT_TRUE(list);
  EXPECT_EQ(json::parse(list->body)["data"].size(), 1u);

  auto created = cli_->Post("/v1/batches",
                            json{{"input_file_id", fid}, {"endpoint", "/v1/completions"}, {"completion_window", "24h"},
                                 {"metadata", {{"job", "nightly"}}}}
                                .dump(),
                            "application/json");
  ASSERT_TRUE(created);
  ASSERT_EQ(created->status, 200) << created->body;
  json b = json::parse(created->body);
  EXPECT_EQ(b["object"], "batch");
  EXPECT_EQ(b["metadata"]["job"], "nightly");
  const std::string bid = b["id"];
  for (int i = 0; i < 300 && b["status"] != "completed"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    b = json::parse(cli_->Get("/v1/batches/" + bid)->body);
  }
  ASSERT_EQ(b["status"], "completed") << b.dump();
  EXPECT_EQ(b["request_counts"]["completed"], 5);
  EXPECT_TRUE(b["error_file_id"].is_null());
  auto out = cli_->Get("/v1/files/" + b["output_file_id"].get<std::string>() + "/content");
  ASSERT_TRUE(out);
  EXPECT_EQ(parse_jsonl(out->body).size(), 5u);
  auto batches = cli_->Get("/v1/batches?limit=1");
  ASSERT_TRUE(batches);
  const json bl = json::parse(batches->body);
  EXPECT_EQ(bl["object"], "list");
  EXPECT_EQ(bl["data"][0]["id"], bid);
  EXPECT_EQ(bl["has_more"], false);
  // Cancelling a completed batch is a conflict.
  expect_envelope(cli_->Post("/v1/batches/" + bid + "/cancel", "", "application/json"), 409, "cancel completed");
  auto del = cli_->Delete("/v1/files/" + fid);
  ASSERT_TRUE(del);
  EXPECT_EQ(json::parse(del->body)["deleted"], true);
  expect_envelope(cli_->Get("/v1/files/" + fid), 404, "deleted file");
}

TEST_F(BatchHttp, BadUploadsAndUnknownIdsGetEnvelopes) {
  expect_envelope(upload("x", "fine-tune"), 400, "wrong purpose");
  expect_envelope(upload(std::string(5000, 'x')), 413, "oversized");
  httplib::MultipartFormDataItems no_file = {{"purpose", "batch", "", ""}};
  expect_envelope(cli_->Post("/v1/files", no_file), 400, "missing file part");
  httplib::MultipartFormDataItems no_purpose = {{"file", "x", "a.jsonl", ""}};
  expect_envelope(cli_->Post("/v1/files", no_purpose), 400, "missing purpose part");
  expect_envelope(cli_->Post("/v1/files", "{}", "application/json"), 400, "not multipart");
  expect_envelope(cli_->Get("/v1/files/file-0000"), 404, "unknown file");
  expect_envelope(cli_->Get("/v1/files/file-0000/content"), 404, "unknown file content");
  expect_envelope(cli_->Delete("/v1/files/file-0000"), 404, "unknown file delete");
  expect_envelope(cli_->Get("/v1/batches/batch_0000"), 404, "unknown batch");
  expect_envelope(cli_->Post("/v1/batches/batch_0000/cancel", "", "application/json"), 404, "unknown batch cancel");
  expect_envelope(cli_->Post("/v1/batches", R"({"input_file_id":"file-00","endpoint":"/v1/completions","completion_window":"24h"})",
                             "application/json"),
                  404, "batch of an unknown file");
  expect_envelope(cli_->Post("/v1/batches", "{}", "application/json"), 400, "empty batch body");
  expect_envelope(cli_->Get("/v1/batches?limit=0"), 400, "bad limit");
}

}  // namespace
}  // namespace lancet::server
