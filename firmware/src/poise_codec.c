/* poise wire protocol framing. See poise_codec.h. */
#include "poise_codec.h"

#include <string.h>

uint16_t poise_crc16(const uint8_t *data, size_t n)
{
    uint16_t crc = 0;
    size_t i;
    int b;
    for (i = 0; i < n; i++) {
        crc ^= (uint16_t)((uint16_t)data[i] << 8);
        for (b = 0; b < 8; b++) {
            crc = (crc & 0x8000u) ? (uint16_t)((crc << 1) ^ 0x1021u) : (uint16_t)(crc << 1);
        }
    }
    return crc;
}

uint32_t poise_crc32(uint32_t crc, const uint8_t *data, size_t n)
{
    size_t i;
    int b;
    crc = ~crc;
    for (i = 0; i < n; i++) {
        crc ^= data[i];
        for (b = 0; b < 8; b++) {
            crc = (crc & 1u) ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
        }
    }
    return ~crc;
}

size_t poise_cobs_encode(const uint8_t *in, size_t n, uint8_t *out)
{
    size_t code_idx = 0, o = 1, i;
    uint8_t code = 1;
    for (i = 0; i < n; i++) {
        if (in[i] == 0) {
            out[code_idx] = code;
            code_idx = o++;
            code = 1;
            continue;
        }
        out[o++] = in[i];
        if (++code == 0xFF) {
            out[code_idx] = code;
            code_idx = o++;
            code = 1;
        }
    }
    out[code_idx] = code;
    return o;
}

int poise_cobs_decode(const uint8_t *in, size_t n, uint8_t *out, size_t cap, size_t *out_len)
{
    size_t i = 0, o = 0, end, k;
    while (i < n) {
        uint8_t code = in[i];
        if (code == 0) {
            return POISE_ERR_COBS;
        }
        end = i + code;
        if (end > n) {
            return POISE_ERR_COBS;
        }
        for (k = i + 1; k < end; k++) {
            if (in[k] == 0) {
                return POISE_ERR_COBS;
            }
            if (o >= cap) {
                return POISE_ERR_LENGTH;
            }
            out[o++] = in[k];
        }
        i = end;
        if (code != 0xFF && i < n) {
            if (o >= cap) {
                return POISE_ERR_LENGTH;
            }
            out[o++] = 0;
        }
    }
    *out_len = o;
    return POISE_OK;
}

void poise_put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v & 0xFFu);
    p[1] = (uint8_t)(v >> 8);
}

void poise_put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v & 0xFFu);
    p[1] = (uint8_t)((v >> 8) & 0xFFu);
    p[2] = (uint8_t)((v >> 16) & 0xFFu);
    p[3] = (uint8_t)(v >> 24);
}

void poise_put_f32(uint8_t *p, float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    poise_put_u32(p, u);
}

uint16_t poise_get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (uint16_t)(p[1] << 8));
}

uint32_t poise_get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

float poise_get_f32(const uint8_t *p)
{
    uint32_t u = poise_get_u32(p);
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

size_t poise_frame_encode(const poise_header_t *h, const uint8_t *payload, size_t n,
                          uint8_t *out)
{
    uint8_t raw[POISE_MAX_RAW];
    size_t len;
    uint16_t crc;
    if (n > POISE_MAX_PAYLOAD) {
        return 0;
    }
    raw[0] = h->version;
    raw[1] = h->type;
    poise_put_u16(raw + 2, h->seq);
    poise_put_u32(raw + 4, h->timestamp_us);
    if (n) {
        memcpy(raw + POISE_HEADER_SIZE, payload, n);
    }
    crc = poise_crc16(raw, POISE_HEADER_SIZE + n);
    poise_put_u16(raw + POISE_HEADER_SIZE + n, crc);
    len = poise_cobs_encode(raw, POISE_HEADER_SIZE + n + POISE_CRC_SIZE, out);
    out[len] = 0;
    return len + 1;
}

int poise_frame_decode(const uint8_t *enc, size_t n, poise_header_t *h, uint8_t *payload,
                       size_t *payload_len)
{
    uint8_t raw[POISE_MAX_RAW];
    size_t len = 0, body;
    int rc;
    if (n > POISE_MAX_ENCODED) {
        return POISE_ERR_LENGTH;
    }
    rc = poise_cobs_decode(enc, n, raw, sizeof raw, &len);
    if (rc != POISE_OK) {
        return rc;
    }
    if (len < POISE_HEADER_SIZE + POISE_CRC_SIZE) {
        return POISE_ERR_LENGTH;
    }
    body = len - POISE_CRC_SIZE;
    if (poise_crc16(raw, body) != poise_get_u16(raw + body)) {
        return POISE_ERR_CRC;
    }
    h->version = raw[0];
    h->type = raw[1];
    h->seq = poise_get_u16(raw + 2);
    h->timestamp_us = poise_get_u32(raw + 4);
    *payload_len = body - POISE_HEADER_SIZE;
    if (*payload_len) {
        memcpy(payload, raw + POISE_HEADER_SIZE, *payload_len);
    }
    return POISE_OK;
}

void poise_rx_init(poise_rx_t *rx)
{
    memset(rx, 0, sizeof *rx);
}

int poise_rx_byte(poise_rx_t *rx, uint8_t byte, poise_header_t *h, uint8_t *payload,
                  size_t *len)
{
    int rc;
    if (byte != 0) {
        if (rx->overflow) {
            return 0;
        }
        if (rx->len >= sizeof rx->buf) {
            rx->overflow = 1;
            rx->len = 0;
            rx->length++;
            return 0;
        }
        rx->buf[rx->len++] = byte;
        return 0;
    }
    if (rx->overflow || rx->len == 0) {
        rx->overflow = 0;
        rx->len = 0;
        return 0;
    }
    rc = poise_frame_decode(rx->buf, rx->len, h, payload, len);
    rx->len = 0;
    switch (rc) {
    case POISE_OK:
        rx->frames++;
        return 1;
    case POISE_ERR_CRC:
        rx->crc++;
        break;
    case POISE_ERR_COBS:
        rx->cobs++;
        break;
    default:
        rx->length++;
        break;
    }
    return 0;
}
