#include "host/processes/run_token.hpp"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <memory>
#include <stdexcept>

namespace mnistdp {

namespace {

[[noreturn]] void fail(const char* what) {
  char text[256] = "no detail";
  ERR_error_string_n(ERR_get_error(), text, sizeof text);
  throw std::runtime_error(fmt::format("TCP rendezvous: OpenSSL {}: {}", what, text));
}

}  // namespace

Nonce fresh_nonce() {
  Nonce nonce{};
  if (RAND_bytes(nonce.data(), static_cast<int>(nonce.size())) != 1) fail("RAND_bytes");
  return nonce;
}

Proof prove(const std::string& token, std::string_view purpose,
            std::initializer_list<std::span<const std::uint8_t>> parts) {
  const std::unique_ptr<EVP_MAC, decltype(&EVP_MAC_free)> mac(EVP_MAC_fetch(nullptr, "HMAC", nullptr),
                                                              EVP_MAC_free);
  if (!mac) fail("EVP_MAC_fetch(HMAC)");
  const std::unique_ptr<EVP_MAC_CTX, decltype(&EVP_MAC_CTX_free)> context(EVP_MAC_CTX_new(mac.get()),
                                                                          EVP_MAC_CTX_free);
  if (!context) fail("EVP_MAC_CTX_new");
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", digest, 0),
                               OSSL_PARAM_construct_end()};
  const auto* key = reinterpret_cast<const unsigned char*>(token.data());
  if (EVP_MAC_init(context.get(), key, token.size(), params) != 1) fail("EVP_MAC_init");
  if (EVP_MAC_update(context.get(), reinterpret_cast<const unsigned char*>(purpose.data()), purpose.size()) !=
      1)
    fail("EVP_MAC_update");
  for (const std::span<const std::uint8_t> part : parts)
    if (EVP_MAC_update(context.get(), part.data(), part.size()) != 1) fail("EVP_MAC_update");
  Proof proof{};
  std::size_t length = 0;
  if (EVP_MAC_final(context.get(), proof.data(), &length, proof.size()) != 1 || length != proof.size())
    fail("EVP_MAC_final");
  return proof;
}

bool same_proof(const Proof& a, const Proof& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace mnistdp
