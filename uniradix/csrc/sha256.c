/* SHA-256 (FIPS 180-4): padding, a portable compression function and one on the x86 SHA
 * extensions. See sha256.h. */
#include "sha256.h"

#include <string.h>

/* FIPS 180-4 §4.2.2: the first 32 bits of the fractional parts of the cube roots of the
 * first 64 primes (generated with integer cube roots, checked by the tests against hashlib). */
static const uint32_t ROUND_CONSTANTS[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u,
    0xab1c5ed5u, 0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu,
    0x9bdc06a7u, 0xc19bf174u, 0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu,
    0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau, 0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u,
    0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u, 0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu,
    0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u, 0xa2bfe8a1u, 0xa81a664bu,
    0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u, 0x19a4c116u,
    0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u,
    0xc67178f2u,
};

/* §5.3.3: the first 32 bits of the fractional parts of the square roots of the first 8
 * primes. */
static const uint32_t INITIAL_STATE[8] = {
    0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
    0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u,
};

static uint32_t load_be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static void store_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t rotr(uint32_t x, unsigned n) { return x >> n | x << (32 - n); }

size_t sha256_padded_len(size_t len) {
    /* The message, the 0x80 byte, then zeros up to 8 bytes short of a block boundary, then
     * the message length in bits (64-bit big-endian). */
    return (len + 1 + 8 + SHA256_BLOCK_BYTES - 1) / SHA256_BLOCK_BYTES * SHA256_BLOCK_BYTES;
}

void sha256_padded_digest(uint8_t *buf, size_t len, uint8_t out[SHA256_DIGEST_BYTES],
                          sha256_compress_fn compress) {
    size_t total = sha256_padded_len(len);
    uint64_t bits = (uint64_t)len * 8;
    uint32_t state[8];
    buf[len] = 0x80;
    memset(buf + len + 1, 0, total - len - 1 - 8);
    store_be32(buf + total - 8, (uint32_t)(bits >> 32));
    store_be32(buf + total - 4, (uint32_t)bits);
    memcpy(state, INITIAL_STATE, sizeof state);
    compress(state, buf, total / SHA256_BLOCK_BYTES);
    for (int i = 0; i < 8; i++) store_be32(out + 4 * i, state[i]);
}

/* §6.2.2, one block at a time, the schedule computed up front. */
void sha256_compress_portable(uint32_t state[8], const uint8_t *blocks, size_t num_blocks) {
    uint32_t w[64];
    for (; num_blocks; num_blocks--, blocks += SHA256_BLOCK_BYTES) {
        for (int t = 0; t < 16; t++) w[t] = load_be32(blocks + 4 * t);
        for (int t = 16; t < 64; t++) {
            uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
            uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
            w[t] = w[t - 16] + s0 + w[t - 7] + s1;
        }
        uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
        uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
        for (int t = 0; t < 64; t++) {
            uint32_t big_s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
            uint32_t choose = (e & f) ^ (~e & g);
            uint32_t t1 = h + big_s1 + choose + ROUND_CONSTANTS[t] + w[t];
            uint32_t big_s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
            uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
            h = g;
            g = f;
            f = e;
            e = d + t1;
            d = c;
            c = b;
            b = a;
            a = t1 + big_s0 + majority;
        }
        state[0] += a;
        state[1] += b;
        state[2] += c;
        state[3] += d;
        state[4] += e;
        state[5] += f;
        state[6] += g;
        state[7] += h;
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>

#define SHA_TARGET __attribute__((target("sha,ssse3,sse4.1")))

/* The SHA extensions keep the eight working variables in two registers, A B E F and C D G H
 * (A, C in the top lane; the lowest lane is F, H). `sha256rnds2` runs two rounds from
 * (CDGH, ABEF, the two rounds' W + K in the low lanes) and returns the new ABEF; the new
 * CDGH is the ABEF from before those two rounds. Four rounds are therefore two calls with
 * the roles of the registers swapped in between, which leaves `abef` and `cdgh` named right.
 * `sha256msg1` / `sha256msg2` compute the schedule four words at a time:
 *   w[t..t+3] = msg2(msg1(w[t-16..t-13], w[t-12..]) + w[t-7..t-4], w[t-4..t-1]). */
#define FOUR_ROUNDS(words, group)                                                         \
    do {                                                                                  \
        __m128i wk_ = _mm_add_epi32(                                                      \
            (words), _mm_loadu_si128((const __m128i *)&ROUND_CONSTANTS[4 * (group)]));     \
        cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk_);                                    \
        abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(wk_, 0x0E));           \
    } while (0)

/* `oldest` (w[t-16..t-13]) becomes w[t..t+3]. */
#define NEXT_WORDS(oldest, older, old, newest)                                            \
    (oldest) = _mm_sha256msg2_epu32(                                                      \
        _mm_add_epi32(_mm_sha256msg1_epu32((oldest), (older)),                            \
                      _mm_alignr_epi8((newest), (old), 4)),                               \
        (newest))

SHA_TARGET static void compress_sha_ni(uint32_t state[8], const uint8_t *blocks,
                                       size_t num_blocks) {
    /* Big-endian words: reverse the bytes of each 32-bit lane. */
    const __m128i byte_swap = _mm_set_epi8(12, 13, 14, 15, 8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3);
    __m128i abef = _mm_set_epi32((int)state[0], (int)state[1], (int)state[4], (int)state[5]);
    __m128i cdgh = _mm_set_epi32((int)state[2], (int)state[3], (int)state[6], (int)state[7]);
    for (; num_blocks; num_blocks--, blocks += SHA256_BLOCK_BYTES) {
        const __m128i *in = (const __m128i *)blocks;
        __m128i abef_before = abef, cdgh_before = cdgh;
        __m128i w0 = _mm_shuffle_epi8(_mm_loadu_si128(in + 0), byte_swap);
        __m128i w1 = _mm_shuffle_epi8(_mm_loadu_si128(in + 1), byte_swap);
        __m128i w2 = _mm_shuffle_epi8(_mm_loadu_si128(in + 2), byte_swap);
        __m128i w3 = _mm_shuffle_epi8(_mm_loadu_si128(in + 3), byte_swap);
        FOUR_ROUNDS(w0, 0);
        FOUR_ROUNDS(w1, 1);
        FOUR_ROUNDS(w2, 2);
        FOUR_ROUNDS(w3, 3);
        for (int group = 4; group < 16; group += 4) {
            NEXT_WORDS(w0, w1, w2, w3);
            FOUR_ROUNDS(w0, group);
            NEXT_WORDS(w1, w2, w3, w0);
            FOUR_ROUNDS(w1, group + 1);
            NEXT_WORDS(w2, w3, w0, w1);
            FOUR_ROUNDS(w2, group + 2);
            NEXT_WORDS(w3, w0, w1, w2);
            FOUR_ROUNDS(w3, group + 3);
        }
        abef = _mm_add_epi32(abef, abef_before);
        cdgh = _mm_add_epi32(cdgh, cdgh_before);
    }
    uint32_t lanes[4];
    _mm_storeu_si128((__m128i *)lanes, abef); /* lanes: F, E, B, A */
    state[0] = lanes[3];
    state[1] = lanes[2];
    state[4] = lanes[1];
    state[5] = lanes[0];
    _mm_storeu_si128((__m128i *)lanes, cdgh); /* lanes: H, G, D, C */
    state[2] = lanes[3];
    state[3] = lanes[2];
    state[6] = lanes[1];
    state[7] = lanes[0];
}

static int cpu_has_sha_ni(void) {
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
    int ssse3 = (ecx >> 9) & 1, sse41 = (ecx >> 19) & 1;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return 0;
    return ssse3 && sse41 && ((ebx >> 29) & 1);
}

sha256_compress_fn sha256_select(const char **name) {
    if (cpu_has_sha_ni()) {
        *name = "sha_ni";
        return compress_sha_ni;
    }
    *name = "portable";
    return sha256_compress_portable;
}
#else
sha256_compress_fn sha256_select(const char **name) {
    *name = "portable";
    return sha256_compress_portable;
}
#endif
