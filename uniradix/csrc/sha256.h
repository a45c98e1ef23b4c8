/* SHA-256 (FIPS 180-4) over whole, already padded messages.
 *
 * The callers hash short messages they assemble themselves (a 32-byte prior digest and one
 * page of tokens), so the interface is a buffer with room for the padding: the message is
 * padded in place and compressed in one call, with no streaming context.
 *
 * Two compression functions compute the same thing: a portable one, and on x86-64 CPUs with
 * the SHA extensions (`sha_ni`) one built on them, chosen once at start-up
 * (`sha256_select`). */
#ifndef UNIRADIX_SHA256_H
#define UNIRADIX_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_DIGEST_BYTES 32
#define SHA256_BLOCK_BYTES 64

/* Runs the compression function over `num_blocks` 64-byte blocks, updating `state`. */
typedef void (*sha256_compress_fn)(uint32_t state[8], const uint8_t *blocks, size_t num_blocks);

/* Bytes a buffer needs to hold a `len`-byte message and its padding. */
size_t sha256_padded_len(size_t len);

/* Digest of the `len` bytes at `buf`, which must have room for `sha256_padded_len(len)`
 * bytes: the padding is written after the message (the buffer is scratch afterwards). */
void sha256_padded_digest(uint8_t *buf, size_t len, uint8_t out[SHA256_DIGEST_BYTES],
                          sha256_compress_fn compress);

/* The portable compression function (always available). */
void sha256_compress_portable(uint32_t state[8], const uint8_t *blocks, size_t num_blocks);

/* The fastest compression function this CPU runs, and its name ("sha_ni" or "portable"). */
sha256_compress_fn sha256_select(const char **name);

#endif
