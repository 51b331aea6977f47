// The vocabulary as a byte trie, in preorder: node i's children follow it and its subtree
// ends at nodes[i].end, so one walk visits every shared prefix once and skips a rejected
// subtree in one jump (token_mask.h). Token bytes are the real bytes a token decodes to
// (tokenizer/Tokenizer::token_bytes: byte-level BPE already mapped back); a token with no
// bytes (special and control tokens) is in no node and never allowed by a grammar.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lancet::structured {

class TokenTrie {
 public:
  struct Node {
    uint32_t end = 0;        // one past the last node of this subtree
    uint32_t tok_begin = 0;  // tokens whose bytes end here: token_ids()[tok_begin, tok_end)
    uint32_t tok_end = 0;
    uint8_t byte = 0;
  };

  // token_bytes: [vocab], the bytes of each id ("" = never allowed).
  explicit TokenTrie(std::vector<std::string> token_bytes);

  int64_t vocab_size() const { return static_cast<int64_t>(bytes_.size()); }
  int32_t longest_token() const { return longest_; }  // bytes
  std::string_view token_bytes(int32_t id) const;
  // Node 0 is the root (no byte).
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& token_ids() const { return ids_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<Node> nodes_;
  std::vector<int32_t> ids_;
  int32_t longest_ = 0;
};

}  // namespace lancet::structured
