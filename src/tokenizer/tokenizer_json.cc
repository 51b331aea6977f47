// Loading a Tokenizer from a Hugging Face tokenizer.json (BPE model, byte-level). Supported:
// model BPE (vocab, merges as "a b" strings or [a, b] pairs, ignore_merges), no normalizer,
// pre_tokenizer Sequence / Split(Regex|String, Isolated) / ByteLevel / Digits, decoder
// ByteLevel, added_tokens, and TemplateProcessing's leading special token as BOS. Anything else
// is reported as Unimplemented naming the field, never silently approximated.
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_state.h"

namespace lancet {
namespace {

using json = nlohmann::json;

std::string type_of(const json& j) {
  if (j.is_object() && j.contains("type") && j["type"].is_string()) return j["type"];
  return "";
}

bool bool_field(const json& j, const char* key, bool def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  return j[key].is_boolean() ? j[key].get<bool>() : def;
}

// Escapes a literal for use inside a regex (Split with a String pattern).
std::string regex_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out += '\\';
    out += c;
  }
  return out;
}

Status parse_pre_tokenizer(const json& j, const std::string& where, TokenizerSpec* spec) {
  if (j.is_null()) return OkStatus();
  const std::string type = type_of(j);
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array()) {
      return InvalidArgument(where + ".pretokenizers: expected an array");
    }
    for (size_t i = 0; i < j["pretokenizers"].size(); ++i) {
      RETURN_IF_ERROR(parse_pre_tokenizer(j["pretokenizers"][i],
                                          where + ".pretokenizers[" + std::to_string(i) + "]",
                                          spec));
    }
    return OkStatus();
  }
  if (type == "Split") {
    const json& pat = j.value("pattern", json());
    std::string regex;
    if (pat.is_object() && pat.contains("Regex") && pat["Regex"].is_string()) {
      regex = pat["Regex"];
    } else if (pat.is_object() && pat.contains("String") && pat["String"].is_string()) {
      regex = regex_escape(pat["String"]);
    } else {
      return InvalidArgument(where + ".pattern: expected {\"Regex\": ...} or {\"String\": ...}");
    }
    const std::string behavior = j.value("behavior", std::string("Isolated"));
    if (behavior != "Isolated") {
      return Unimplemented(where + ".behavior: only Isolated is supported, got " + behavior);
    }
    if (bool_field(j, "invert", false)) return Unimplemented(where + ".invert: true not supported");
    spec->split_patterns.push_back(regex);
    return OkStatus();
  }
  if (type == "ByteLevel") {
    spec->byte_level_pre = true;
    if (bool_field(j, "add_prefix_space", false)) {
      return Unimplemented(where + ".add_prefix_space: true not supported");
    }
    if (bool_field(j, "use_regex", true)) spec->split_patterns.emplace_back(kGpt2Pattern);
    return OkStatus();
  }
  if (type == "Digits") {
    spec->split_patterns.emplace_back(bool_field(j, "individual_digits", false)
                                          ? kDigitsIndividualPattern
                                          : kDigitsContiguousPattern);
    return OkStatus();
  }
  return Unimplemented(where + ": pre-tokenizer type '" + type + "' is not supported");
}

// Finds TemplateProcessing (alone or inside a Sequence) and takes the special token that
// precedes $A in `single` as BOS.
Status parse_post_processor(const json& j, const std::string& where, TokenizerSpec* spec) {
  if (j.is_null()) return OkStatus();
  const std::string type = type_of(j);
  if (type == "Sequence" && j.contains("processors") && j["processors"].is_array()) {
    for (size_t i = 0; i < j["processors"].size(); ++i) {
      RETURN_IF_ERROR(parse_post_processor(
          j["processors"][i], where + ".processors[" + std::to_string(i) + "]", spec));
    }
    return OkStatus();
  }
  if (type != "TemplateProcessing") return OkStatus();  // ByteLevel etc. only adjust offsets
  const json& single = j.value("single", json::array());
  const json& specials = j.value("special_tokens", json::object());
  for (const json& item : single) {
    if (item.contains("Sequence")) break;
    if (!item.contains("SpecialToken")) continue;
    const std::string name = item["SpecialToken"].value("id", std::string());
    if (!specials.contains(name) || !specials[name].contains("ids") ||
        !specials[name]["ids"].is_array() || specials[name]["ids"].empty()) {
      return InvalidArgument(where + ": special token '" + name + "' has no ids");
    }
    spec->ids.bos = specials[name]["ids"][0].get<int32_t>();
    spec->add_bos_default = true;
    break;
  }
  return OkStatus();
}

Status parse_model(const json& m, TokenizerSpec* spec) {
  if (!m.is_object()) return InvalidArgument("model: expected an object");
  const std::string type = type_of(m);
  if (!type.empty() && type != "BPE") {
    return Unimplemented("model.type: only BPE is supported, got " + type);
  }
  if (bool_field(m, "byte_fallback", false)) return Unimplemented("model.byte_fallback: true");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (m.contains(key) && m[key].is_string() && !m[key].get<std::string>().empty()) {
      return Unimplemented(std::string("model.") + key + " is not supported");
    }
  }
  if (m.contains("dropout") && m["dropout"].is_number() && m["dropout"].get<double>() > 0) {
    return Unimplemented("model.dropout > 0 is not supported");
  }
  spec->ignore_merges = bool_field(m, "ignore_merges", false);
  if (!m.contains("vocab") || !m["vocab"].is_object()) {
    return InvalidArgument("model.vocab: expected an object");
  }
  spec->vocab.reserve(m["vocab"].size());
  for (const auto& [text, id] : m["vocab"].items()) {
    if (!id.is_number_integer()) return InvalidArgument("model.vocab['" + text + "']: not an id");
    spec->vocab.emplace_back(text, id.get<int32_t>());
  }
  const json& merges = m.value("merges", json::array());
  if (!merges.is_array()) return InvalidArgument("model.merges: expected an array");
  spec->merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& e = merges[i];
    if (e.is_string()) {
      const std::string& s = e.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        return InvalidArgument("model.merges[" + std::to_string(i) + "]: expected 'a b', got '" +
                               s + "'");
      }
      spec->merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      spec->merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    } else {
      return InvalidArgument("model.merges[" + std::to_string(i) + "]: expected a pair");
    }
  }
  return OkStatus();
}

void guess_end_ids(TokenizerSpec* spec) {
  for (const AddedToken& t : spec->added) {
    if (t.content == "<|eot_id|>" || t.content == "<|im_end|>" || t.content == "<|eom_id|>") {
      if (spec->ids.eot < 0) spec->ids.eot = t.id;
    }
    if (t.content == "<|end_of_text|>" || t.content == "<|endoftext|>" || t.content == "</s>") {
      if (spec->ids.eos < 0) spec->ids.eos = t.id;
    }
  }
  if (spec->ids.eos < 0) spec->ids.eos = spec->ids.eot;
}

StatusOr<Tokenizer> parse(const json& root, const std::string& source) {
  TokenizerSpec spec;
  spec.source = source;
  auto fail = [&](const Status& s) { return s.with_context(source); };
  if (!root.is_object()) return InvalidArgument(source + ": expected a JSON object");
  if (root.contains("normalizer") && !root["normalizer"].is_null()) {
    return Unimplemented(source + ": normalizer '" + type_of(root["normalizer"]) +
                         "' is not supported");
  }
  if (!root.contains("model")) return InvalidArgument(source + ": no 'model'");
  if (Status s = parse_model(root["model"], &spec); !s.ok()) return fail(s);
  if (Status s = parse_pre_tokenizer(root.value("pre_tokenizer", json()), "pre_tokenizer", &spec);
      !s.ok()) {
    return fail(s);
  }
  if (!spec.byte_level_pre) {
    // Without it HF feeds raw characters to BPE; this implementation is byte-level only.
    return Unimplemented(source + ": pre_tokenizer has no ByteLevel step (only byte-level BPE "
                         "is supported)");
  }
  const json& decoder = root.value("decoder", json());
  if (!decoder.is_null() && type_of(decoder) != "ByteLevel") {
    return Unimplemented(source + ": decoder '" + type_of(decoder) +
                         "' is not supported (only ByteLevel)");
  }
  const json& added = root.value("added_tokens", json::array());
  for (size_t i = 0; i < added.size(); ++i) {
    const json& a = added[i];
    if (!a.is_object() || !a.contains("id") || !a.contains("content") ||
        !a["id"].is_number_integer() || !a["content"].is_string()) {
      return InvalidArgument(source + ": added_tokens[" + std::to_string(i) +
                             "]: expected id and content");
    }
    AddedToken t;
    t.id = a["id"].get<int32_t>();
    t.content = a["content"].get<std::string>();
    t.special = bool_field(a, "special", false);
    t.lstrip = bool_field(a, "lstrip", false);
    t.rstrip = bool_field(a, "rstrip", false);
    t.single_word = bool_field(a, "single_word", false);
    t.normalized = bool_field(a, "normalized", false);
    spec.added.push_back(std::move(t));
  }
  if (Status s = parse_post_processor(root.value("post_processor", json()), "post_processor",
                                      &spec);
      !s.ok()) {
    return fail(s);
  }
  guess_end_ids(&spec);
  return build_tokenizer(std::move(spec));
}

}  // namespace

StatusOr<Tokenizer> Tokenizer::from_json_string(std::string_view text, const std::string& source) {
  json root = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return InvalidArgument(source + ": not valid JSON");
  try {
    return parse(root, source);
  } catch (const json::exception& e) {
    // A field of the wrong JSON type deep inside (e.g. a string where an id belongs).
    return InvalidArgument(source + ": " + e.what());
  }
}

StatusOr<Tokenizer> Tokenizer::from_json_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound(path + ": cannot open tokenizer file");
  std::stringstream ss;
  ss << f.rdbuf();
  return from_json_string(ss.str(), path);
}

}  // namespace lancet
