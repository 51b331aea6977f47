// SHA-256 wrapper over OpenSSL EVP.
#include "core/sha256.h"

#include <openssl/evp.h>

#include <cstdio>
#include <memory>
#include <vector>

namespace lancet {

namespace {

// The digest, fetched from the provider once: with EVP_sha256() every EVP_DigestInit_ex fetches
// it again, which costs more than hashing a prefix-cache key (one per block of 16 tokens).
const EVP_MD* sha256_md() {
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
  static const EVP_MD* md = [] {
    const EVP_MD* fetched = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    return fetched ? fetched : EVP_sha256();
  }();
  return md;
#else
  return EVP_sha256();
#endif
}

}  // namespace

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), sha256_md(), nullptr);
}
Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256::update(const void* data, size_t n) {
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, n);
}

Sha256Digest Sha256::finish() {
  Sha256Digest d{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), d.data(), &len);
  return d;
}

Sha256Digest sha256(const void* data, size_t n) {
  Sha256 h;
  h.update(data, n);
  return h.finish();
}

std::string to_hex(const Sha256Digest& d) {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  s.reserve(64);
  for (uint8_t b : d) {
    s.push_back(kHex[b >> 4]);
    s.push_back(kHex[b & 15]);
  }
  return s;
}

StatusOr<Sha256Digest> sha256_file(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return IoError("cannot open " + path);
  Sha256 h;
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) h.update(buf.data(), n);
  if (std::ferror(f.get())) return IoError("read error in " + path);
  return h.finish();
}

}  // namespace lancet
