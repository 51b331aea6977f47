// SHA-256 through OpenSSL's EVP interface: file integrity (lancet verify) and prefix-cache keys.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace lancet {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t n);
  Sha256Digest finish();

 private:
  void* ctx_;  // EVP_MD_CTX*
};

Sha256Digest sha256(const void* data, size_t n);
inline Sha256Digest sha256(std::string_view s) { return sha256(s.data(), s.size()); }
std::string to_hex(const Sha256Digest& d);
StatusOr<Sha256Digest> sha256_file(const std::string& path);

}  // namespace lancet
