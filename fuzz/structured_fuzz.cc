// libFuzzer target for structured outputs' untrusted inputs: a JSON schema (guided_json,
// response_format), a regex (guided_regex) or a GBNF grammar (guided_grammar) compiles or fails
// with a Status, and a compiled grammar's matcher takes any bytes after it without crashing; a
// token mask over a small vocabulary agrees with feeding each token's bytes. Input: one
// selector byte (mod 3: 0 schema, 1 regex, 2 grammar), the schema, pattern or grammar up to the
// first NUL, then the bytes to match.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "structured/gbnf_grammar.h"
#include "structured/json_schema_compiler.h"
#include "structured/matcher.h"
#include "structured/token_mask.h"

using namespace lancet::structured;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view all(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t nul = all.find('\0');
  const std::string_view spec = all.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos ? std::string_view() : all.substr(nul + 1);
  std::unique_ptr<Grammar> g;
  if (data[0] % 3 == 0) {
    auto schema = nlohmann::ordered_json::parse(spec.begin(), spec.end(), nullptr, /*allow_exceptions=*/false);
    if (schema.is_discarded()) return 0;
    auto c = compile_json_schema(schema);
    if (!c.ok()) return 0;
    g = std::move(c).value();
  } else if (data[0] % 3 == 1) {
    auto c = regex_grammar(spec);
    if (!c.ok()) return 0;
    g = std::move(c).value();
  } else {
    auto c = gbnf_grammar(spec);
    if (!c.ok()) return 0;
    g = std::move(c).value();
  }
  static const TokenTrie trie({"", "{", "}", "\"", ":", ",", " ", "[", "]", "a", "ab", "1", "-", ".", "0", "true",
                               "null", "\"a\":", "\\", "\xc3\xa9", "\xc3", "12", "e", "x"});
  Matcher m(g.get());
  for (size_t i = 0; i < text.size() && i < 256; ++i) {
    std::vector<uint32_t> mask;
    compute_token_mask(m, trie, &mask);
    for (int32_t id = 1; id < trie.vocab_size(); ++id) {
      Matcher c = m;
      const bool ok = c.feed(trie.token_bytes(id));
      if (ok != ((mask[static_cast<size_t>(id) >> 5] >> (id & 31) & 1) != 0)) std::abort();
    }
    (void)m.feed(static_cast<uint8_t>(text[i]));
    (void)m.complete();
    (void)m.done();
  }
  return 0;
}
