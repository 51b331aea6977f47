// The guard model's prompt, request and answer (see guard_model.h).
#include "server/guard_model.h"

#include <algorithm>
#include <cctype>

#include "core/logging.h"

namespace lancet::server {
namespace {

using Clock = std::chrono::steady_clock;

std::string trim_lower(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  std::string out(s.substr(b, e - b));
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::vector<std::string_view> nonempty_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t nl = std::min(text.find('\n', pos), text.size());
    const std::string_view line = text.substr(pos, nl - pos);
    if (!trim_lower(line).empty()) lines.push_back(line);
    pos = nl + 1;
  }
  return lines;
}

// Llama Guard 3's hazard categories (its model card's taxonomy).
constexpr const char* kCategories[] = {
    "S1: Violent Crimes.",     "S2: Non-Violent Crimes.",  "S3: Sex Crimes.",
    "S4: Child Exploitation.", "S5: Defamation.",          "S6: Specialized Advice.",
    "S7: Privacy.",            "S8: Intellectual Property.", "S9: Indiscriminate Weapons.",
    "S10: Hate.",              "S11: Self-Harm.",          "S12: Sexual Content.",
    "S13: Elections.",         "S14: Code Interpreter Abuse."};

// The verdict's form (Llama Guard 3's): "safe", or "unsafe" and a line of categories S1-S14.
constexpr const char* kAnswerGrammar = R"g(root ::= "safe" | "unsafe" "\n" cat ("," " "? cat){0,13}
cat ::= "S" [1-9] | "S1" [0-4])g";

// The user and assistant turns with text content.
nlohmann::ordered_json text_turns(const nlohmann::ordered_json& conversation) {
  nlohmann::ordered_json turns = nlohmann::ordered_json::array();
  if (!conversation.is_array()) return turns;
  for (const auto& m : conversation) {
    if (!m.is_object() || !m.contains("role") || !m.contains("content") || !m["content"].is_string()) continue;
    const std::string role = m["role"].is_string() ? m["role"].get<std::string>() : "";
    if (role != "user" && role != "assistant") continue;
    turns.push_back({{"role", role}, {"content", m["content"]}});
  }
  return turns;
}

// Keeps the last `keep` bytes of s, from a character boundary.
std::string utf8_tail(const std::string& s, size_t keep) {
  if (keep >= s.size()) return s;
  size_t from = s.size() - keep;
  while (from < s.size() && (static_cast<unsigned char>(s[from]) & 0xC0) == 0x80) ++from;
  return s.substr(from);
}

}  // namespace

const char* verdict_name(GuardVerdict::Kind k) {
  switch (k) {
    case GuardVerdict::Kind::kSafe: return "safe";
    case GuardVerdict::Kind::kUnsafe: return "unsafe";
    case GuardVerdict::Kind::kUnknown: break;
  }
  return "unknown";
}

GuardVerdict parse_guard_answer(std::string_view answer) {
  GuardVerdict v;
  v.answer = std::string(answer.substr(0, 200));
  const std::vector<std::string_view> lines = nonempty_lines(answer);
  if (lines.empty()) return v;
  const std::string first = trim_lower(lines[0]);
  if (first == "safe") {
    v.kind = GuardVerdict::Kind::kSafe;
  } else if (first == "unsafe") {
    v.kind = GuardVerdict::Kind::kUnsafe;
    if (lines.size() > 1) {
      std::string_view cats = lines[1];
      size_t pos = 0;
      while (pos <= cats.size()) {
        const size_t comma = std::min(cats.find(',', pos), cats.size());
        std::string c(cats.substr(pos, comma - pos));
        c.erase(0, c.find_first_not_of(" \t\r"));
        c.erase(c.find_last_not_of(" \t\r") + 1);
        if (!c.empty() && c.size() <= 32) v.categories.push_back(c);
        pos = comma + 1;
      }
    }
  }
  return v;
}

std::string guard_task_text(const nlohmann::ordered_json& conversation) {
  const nlohmann::ordered_json turns = text_turns(conversation);
  const bool agent_last = !turns.empty() && turns.back()["role"] == "assistant";
  const std::string who = agent_last ? "Agent" : "User";
  std::string t = "Task: Check if there is unsafe content in '" + who +
                  "' messages in conversations according our safety policy with the below categories.\n\n"
                  "<BEGIN UNSAFE CONTENT CATEGORIES>\n";
  for (const char* c : kCategories) t += std::string(c) + "\n";
  t += "<END UNSAFE CONTENT CATEGORIES>\n\n<BEGIN CONVERSATION>\n\n";
  for (const auto& m : turns)
    t += (m["role"] == "user" ? "User: " : "Agent: ") + m["content"].get<std::string>() + "\n\n";
  t += "<END CONVERSATION>\n\nProvide your safety assessment for ONLY THE LAST " + who +
       " message in the above conversation:\n - First line must read 'safe' or 'unsafe'.\n"
       " - If unsafe, a second line must include a comma-separated list of violated categories.";
  return t;
}

GuardModel::GuardModel(ServingModel* model, GuardModelConfig config)
    : model_(model), config_(config), name_(model->name()) {
  const nlohmann::ordered_json probe = {{{"role", "user"}, {"content", "probe"}}};
  if (model_->has_chat_template()) {
    auto ids = model_->encode_chat(probe, ChatEnding{});
    if (ids.ok()) template_is_guard_ = trim_lower(model_->decode(*ids)).find("unsafe") != std::string::npos;
  }
}

StatusOr<std::vector<int32_t>> GuardModel::encode(const nlohmann::ordered_json& turns) const {
  if (template_is_guard_) return model_->encode_chat(turns, ChatEnding{});
  const std::string task = guard_task_text(turns);
  if (model_->has_chat_template())
    return model_->encode_chat(nlohmann::ordered_json::array({{{"role", "user"}, {"content", task}}}), ChatEnding{});
  return model_->encode(task + "\n", /*add_special_tokens=*/true);
}

StatusOr<GuardVerdict> GuardModel::classify(const nlohmann::ordered_json& conversation) const {
  const Clock::time_point t0 = Clock::now();
  nlohmann::ordered_json turns = text_turns(conversation);
  if (turns.empty()) return InvalidArgument("guard model: nothing to classify (no user or assistant text)");
  const int64_t room = model_->max_model_len() - config_.max_answer_tokens;
  auto ids = encode(turns);
  // Too long for the guard's context: the last turn alone, then its tail, halved until it fits.
  for (int tries = 0; ids.ok() && static_cast<int64_t>(ids->size()) > room && tries < 40; ++tries) {
    if (turns.size() > 1) {
      turns = nlohmann::ordered_json::array({turns.back()});
    } else {
      const std::string text = turns[0]["content"].get<std::string>();
      if (text.size() <= 1) break;
      turns[0]["content"] = utf8_tail(text, text.size() / 2);
    }
    ids = encode(turns);
  }
  if (!ids.ok()) return ids.status();
  if (static_cast<int64_t>(ids->size()) > room)
    return OutOfRange("guard model: its context (" + std::to_string(model_->max_model_len()) +
                      " tokens) cannot hold the task");
  GenerationRequest req;
  req.prompt = std::move(*ids);
  req.params.temperature = 0;
  req.params.max_tokens = config_.max_answer_tokens;
  // The answer is held to the verdict's form, so that any model gives a readable one.
  if (structured::ConstraintCache* so = model_->structured_outputs()) {
    structured::OutputFormat f;
    f.kind = structured::OutputFormat::Kind::kGrammar;
    f.grammar = kAnswerGrammar;
    auto c = so->constraint(f);
    if (!c.ok()) return c.status();
    req.params.constraint = *c;
  }
  auto stream = model_->engine().submit(req);
  if (!stream.ok()) return stream.status();
  const Clock::time_point deadline =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(config_.timeout_s));
  std::string answer;
  for (;;) {
    TokenEvent ev;
    const RequestStream::Wait w = (*stream)->next_until(&ev, deadline);
    if (w == RequestStream::Wait::kEnded) break;
    if (w == RequestStream::Wait::kTimedOut) {
      (*stream)->cancel();
      return ResourceExhausted("guard model: no answer within " + std::to_string(config_.timeout_s) + " s");
    }
    answer += ev.text;
    // The verdict is in once the first line is "safe", or the categories' line has ended.
    const auto lines = nonempty_lines(answer);
    const bool ended_line = !answer.empty() && answer.back() == '\n';
    if ((lines.size() == 1 && ended_line && trim_lower(lines[0]) == "safe") || lines.size() > 2 ||
        (lines.size() == 2 && ended_line)) {
      (*stream)->cancel();
      break;
    }
  }
  GuardVerdict v = parse_guard_answer(answer);
  v.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return v;
}

}  // namespace lancet::server
