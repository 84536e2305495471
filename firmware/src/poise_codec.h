/* poise wire protocol: framing (COBS, CRC-16/XMODEM, header) and a byte-wise stream decoder.
 *
 * wire frame = COBS(header || payload || crc16_le) || 0x00, header = <BBHI (version, type, seq,
 * timestamp_us), little-endian. See docs/protocol.md. C99, no dynamic allocation.
 */
#ifndef POISE_CODEC_H
#define POISE_CODEC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define POISE_PROTOCOL_VERSION 1u
#define POISE_HEADER_SIZE 8u
#define POISE_CRC_SIZE 2u
#define POISE_MAX_PAYLOAD 240u
#define POISE_MAX_RAW (POISE_HEADER_SIZE + POISE_MAX_PAYLOAD + POISE_CRC_SIZE) /* 250 */
#define POISE_MAX_ENCODED (POISE_MAX_RAW + (POISE_MAX_RAW + 253u) / 254u)   /* 251 */
#define POISE_MAX_WIRE (POISE_MAX_ENCODED + 1u)                            /* 252 */

enum poise_status_code {
    POISE_OK = 0,
    POISE_ERR_COBS = -1,
    POISE_ERR_LENGTH = -2,
    POISE_ERR_CRC = -3,
    POISE_ERR_TYPE = -4,
    POISE_ERR_MALFORMED = -5,
    POISE_ERR_VERSION = -6
};

typedef struct {
    uint8_t version;
    uint8_t type;
    uint16_t seq;
    uint32_t timestamp_us;
} poise_header_t;

/* CRC-16/XMODEM: poly 0x1021, init 0, no reflection, no final xor. */
uint16_t poise_crc16(const uint8_t *data, size_t n);
/* CRC-32 (IEEE, as zlib.crc32): pass 0 to start, the previous result to continue. */
uint32_t poise_crc32(uint32_t crc, const uint8_t *data, size_t n);

/* COBS-encode n bytes into out (capacity >= n + n / 254 + 1); returns the encoded length. */
size_t poise_cobs_encode(const uint8_t *in, size_t n, uint8_t *out);
/* COBS-decode; returns POISE_OK and the length in *out_len, or POISE_ERR_COBS/LENGTH. */
int poise_cobs_decode(const uint8_t *in, size_t n, uint8_t *out, size_t cap, size_t *out_len);

/* Encode one wire frame (delimiter included) into out (capacity >= POISE_MAX_WIRE).
 * Returns its length, or 0 if the payload is too long. */
size_t poise_frame_encode(const poise_header_t *h, const uint8_t *payload, size_t n,
                          uint8_t *out);
/* Decode one COBS-encoded frame (delimiter stripped) into *h and payload (capacity
 * POISE_MAX_PAYLOAD). Returns POISE_OK or POISE_ERR_COBS/LENGTH/CRC. */
int poise_frame_decode(const uint8_t *enc, size_t n, poise_header_t *h, uint8_t *payload,
                       size_t *payload_len);

/* Byte-wise stream decoder: never fails, counts what it drops, resynchronises on 0x00. */
typedef struct {
    uint8_t buf[POISE_MAX_ENCODED];
    size_t len;
    uint8_t overflow;
    uint32_t frames, crc, cobs, length;
} poise_rx_t;

void poise_rx_init(poise_rx_t *rx);
/* Feed one byte; returns 1 when it completed a valid frame (then *h, payload and *len are set),
 * else 0. */
int poise_rx_byte(poise_rx_t *rx, uint8_t byte, poise_header_t *h, uint8_t *payload,
                  size_t *len);

/* Little-endian helpers. */
void poise_put_u16(uint8_t *p, uint16_t v);
void poise_put_u32(uint8_t *p, uint32_t v);
void poise_put_f32(uint8_t *p, float v);
uint16_t poise_get_u16(const uint8_t *p);
uint32_t poise_get_u32(const uint8_t *p);
float poise_get_f32(const uint8_t *p);

#ifdef __cplusplus
}
#endif
#endif
