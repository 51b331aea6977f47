// API-key check (see auth.h).
#include "server/auth.h"

#include "core/sha256.h"

namespace lancet::server {

bool constant_time_equal(std::string_view a, std::string_view b) {
  // Compare fixed-size digests with an OR of XORs, so neither the length nor the position of
  // the first mismatch shows in the timing.
  const Sha256Digest da = sha256(a), db = sha256(b);
  unsigned diff = 0;
  for (size_t i = 0; i < da.size(); ++i) diff |= static_cast<unsigned>(da[i] ^ db[i]);
  return diff == 0;
}

bool authorized(std::string_view header, const std::string& expected) {
  if (expected.empty()) return true;
  constexpr std::string_view kBearer = "Bearer ";
  std::string_view token;
  if (header.size() >= kBearer.size() && header.substr(0, kBearer.size()) == kBearer)
    token = header.substr(kBearer.size());
  return constant_time_equal(token, expected);
}

}  // namespace lancet::server
