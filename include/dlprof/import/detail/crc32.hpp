// dlprof/import/detail/crc32.hpp: gzip's CRC-32, as zlib's crc32_z computes it, folded 64 bytes
// at a time with carry-less multiplication (PCLMULQDQ) where the CPU has it. zlib 1.2's own CRC
// takes 15% of reading a gzip trace (2 GB/s here); folding runs at memory speed. The method and
// constants are Intel's ("Fast CRC Computation for Generic Polynomials Using PCLMULQDQ", 2009),
// as Linux's crc32-pclmul uses them for the reflected polynomial 0xEDB88320.
#pragma once

#include <zlib.h>

#include <cstddef>
#include <cstdint>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#  include <immintrin.h>
#  define DLPROF_CRC32_FOLDING_ 1
#else
#  define DLPROF_CRC32_FOLDING_ 0
#endif

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail::json {

#if DLPROF_CRC32_FOLDING_
/// x * (the two halves of k), the halves' products added: 128 bits folded over 128 to 512 more.
__attribute__((target("pclmul,sse4.1"))) inline __m128i crc32_fold_step(__m128i x, __m128i k) noexcept {
  return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11));
}

__attribute__((target("pclmul,sse4.1"))) inline __m128i crc32_load(const unsigned char* p) noexcept {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

/// The CRC register (not inverted) after `size` bytes at `data`; size >= 64, a multiple of 16.
__attribute__((target("pclmul,sse4.1"))) inline std::uint32_t crc32_fold(std::uint32_t crc, const unsigned char* data,
                                                                         std::size_t size) noexcept {
  // x^(4*128+32) and x^(4*128-32) mod P (reflected), then x^(128+32) and x^(128-32), x^64, and
  // Barrett's P and mu.
  const __m128i k1k2 = _mm_set_epi64x(0x1c6e41596, 0x154442bd4);
  const __m128i k3k4 = _mm_set_epi64x(0x0ccaa009e, 0x1751997d0);
  const __m128i k5 = _mm_set_epi64x(0, 0x163cd6124);
  const __m128i poly_mu = _mm_set_epi64x(0x1F7011641, 0x1DB710641);
  const __m128i mask32 = _mm_set_epi32(0, 0, 0, -1);

  __m128i x1 = _mm_xor_si128(crc32_load(data), _mm_cvtsi32_si128(static_cast<int>(crc)));
  __m128i x2 = crc32_load(data + 16);
  __m128i x3 = crc32_load(data + 32);
  __m128i x4 = crc32_load(data + 48);
  data += 64;
  size -= 64;
  for (; size >= 64; data += 64, size -= 64) {
    x1 = _mm_xor_si128(crc32_fold_step(x1, k1k2), crc32_load(data));
    x2 = _mm_xor_si128(crc32_fold_step(x2, k1k2), crc32_load(data + 16));
    x3 = _mm_xor_si128(crc32_fold_step(x3, k1k2), crc32_load(data + 32));
    x4 = _mm_xor_si128(crc32_fold_step(x4, k1k2), crc32_load(data + 48));
  }
  x1 = _mm_xor_si128(crc32_fold_step(x1, k3k4), x2);
  x1 = _mm_xor_si128(crc32_fold_step(x1, k3k4), x3);
  x1 = _mm_xor_si128(crc32_fold_step(x1, k3k4), x4);
  for (; size >= 16; data += 16, size -= 16) x1 = _mm_xor_si128(crc32_fold_step(x1, k3k4), crc32_load(data));

  // 128 bits to 64, to 32, then Barrett's reduction to the remainder.
  x1 = _mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x10), _mm_srli_si128(x1, 8));
  x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, mask32), k5, 0x00), _mm_srli_si128(x1, 4));
  __m128i reduced = _mm_clmulepi64_si128(_mm_and_si128(x1, mask32), poly_mu, 0x10);
  reduced = _mm_clmulepi64_si128(_mm_and_si128(reduced, mask32), poly_mu, 0x00);
  return static_cast<std::uint32_t>(_mm_extract_epi32(_mm_xor_si128(reduced, x1), 1));
}
#endif

/// zlib's crc32_z(crc, data, size): the CRC-32 of gzip, continuing from `crc` (0 to start).
inline std::uint32_t crc32(std::uint32_t crc, const unsigned char* data, std::size_t size) noexcept {
#if DLPROF_CRC32_FOLDING_
  static const bool kFolding = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  if (kFolding && size >= 128) {
    // zlib's bytewise CRC up to a 16-byte boundary and for the tail; folding in between.
    const std::size_t head = (16 - reinterpret_cast<std::uintptr_t>(data) % 16) % 16;
    crc = static_cast<std::uint32_t>(crc32_z(crc, data, head));
    const std::size_t body = (size - head) & ~std::size_t{15};
    crc = ~crc32_fold(~crc, data + head, body);
    return static_cast<std::uint32_t>(crc32_z(crc, data + head + body, size - head - body));
  }
#endif
  return static_cast<std::uint32_t>(crc32_z(crc, data, size));
}

}  // namespace detail::json
DLPROF_END_NAMESPACE

#undef DLPROF_CRC32_FOLDING_
