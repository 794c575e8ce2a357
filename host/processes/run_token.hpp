#pragma once
// The run's shared secret, which admits a process to the TCP rendezvous (tcp_rendezvous.hpp), and the proofs
// made from it. A rank proves that it holds the token by an HMAC-SHA256 of the other side's fresh nonce, so
// that the token itself never crosses the wire and a proof seen once is worth nothing in another rendezvous.
// The cryptography is OpenSSL's.
#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

namespace mnistdp {

using Nonce = std::array<std::uint8_t, 32>;
using Proof = std::array<std::uint8_t, 32>;

// 32 bytes from OpenSSL's generator, seeded by the operating system. Throws std::runtime_error if it fails.
Nonce fresh_nonce();

// HMAC-SHA256 under `token` of `purpose` (which says what the proof is for, so that a proof made for one
// message is no proof for another) followed by each of `parts`.
Proof prove(const std::string& token, std::string_view purpose,
            std::initializer_list<std::span<const std::uint8_t>> parts);

// Compares in a time that does not depend on where the proofs differ.
bool same_proof(const Proof& a, const Proof& b);

}  // namespace mnistdp
