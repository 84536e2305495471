/* poise wire protocol messages. See poise_messages.h and docs/protocol.md. */
#include "poise_messages.h"

#include <string.h>

static void put_str(uint8_t *p, const char *s, size_t width)
{
    size_t n = strlen(s);
    if (n > width) {
        n = width;
    }
    memset(p, 0, width);
    memcpy(p, s, n);
}

static void get_str(char *dst, const uint8_t *p, size_t width)
{
    memcpy(dst, p, width);
    dst[width] = '\0';
}

static void put_floats(uint8_t *p, const float *v, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) {
        poise_put_f32(p + 4 * i, v[i]);
    }
}

static void get_floats(float *v, const uint8_t *p, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) {
        v[i] = poise_get_f32(p + 4 * i);
    }
}

static void pack_channel_schema(const poise_channel_t *c, uint8_t *o)
{
    o[0] = c->index;
    o[1] = c->kind;
    put_str(o + 2, c->name, 16);
    put_str(o + 18, c->unit, 8);
    put_str(o + 26, c->effort_unit, 8);
}

int poise_msg_pack(const poise_msg_t *msg, uint8_t *o)
{
    switch (msg->type) {
    case POISE_HELLO_REQUEST:
    case POISE_HEARTBEAT:
    case POISE_DISARM:
    case POISE_ESTOP:
        return 0;
    case POISE_HELLO: {
        const poise_hello_t *h = &msg->u.hello;
        o[0] = h->protocol_version;
        o[1] = h->n_coordinates;
        o[2] = h->n_actuators;
        o[3] = h->flags;
        poise_put_u16(o + 4, h->rate_hz);
        poise_put_u16(o + 6, h->watchdog_ms);
        poise_put_u32(o + 8, h->schema_checksum);
        put_str(o + 12, h->firmware_id, 16);
        return 28;
    }
    case POISE_CHANNEL: {
        const poise_channel_t *c = &msg->u.channel;
        pack_channel_schema(c, o);
        poise_put_f32(o + 34, c->lower);
        poise_put_f32(o + 38, c->upper);
        poise_put_f32(o + 42, c->effort_limit);
        return 46;
    }
    case POISE_SENSORS: {
        const poise_sensors_t *s = &msg->u.sensors;
        size_t off = 10;
        if (s->n_q > POISE_MAX_Q || s->n_a > POISE_MAX_A ||
            10u + 4u * (s->n_q + 2u * s->n_a) > POISE_MAX_PAYLOAD) {
            return -1;
        }
        poise_put_u32(o, s->status);
        poise_put_u16(o + 4, s->last_setpoint_seq);
        poise_put_u16(o + 6, s->last_rx_seq);
        o[8] = s->n_q;
        o[9] = s->n_a;
        put_floats(o + off, s->q, s->n_q);
        off += 4u * s->n_q;
        put_floats(o + off, s->qa, s->n_a);
        off += 4u * s->n_a;
        put_floats(o + off, s->tau, s->n_a);
        off += 4u * s->n_a;
        return (int)off;
    }
    case POISE_SETPOINT: {
        const poise_setpoint_t *s = &msg->u.setpoint;
        size_t off = 2;
        if (s->n_a > POISE_MAX_A) {
            return -1;
        }
        o[0] = s->has_ff ? 1u : 0u;
        o[1] = s->n_a;
        put_floats(o + off, s->qa_ref, s->n_a);
        off += 4u * s->n_a;
        if (s->has_ff) {
            put_floats(o + off, s->tau_ff, s->n_a);
            off += 4u * s->n_a;
        }
        return (int)off;
    }
    case POISE_ARM:
        o[0] = msg->u.arm_clear_estop ? 1u : 0u;
        return 1;
    case POISE_CONFIG_WRITE:
        poise_put_u16(o, msg->u.config.key);
        o[2] = msg->u.config.channel;
        o[3] = 0;
        poise_put_f32(o + 4, msg->u.config.value);
        return 8;
    case POISE_ACK:
        o[0] = msg->u.ack.ref_type;
        o[1] = msg->u.ack.code;
        poise_put_u16(o + 2, msg->u.ack.ref_seq);
        poise_put_u16(o + 4, msg->u.ack.detail);
        return 6;
    case POISE_FAULT:
        poise_put_u16(o, msg->u.fault.code);
        o[2] = msg->u.fault.channel;
        o[3] = msg->u.fault.severity;
        poise_put_f32(o + 4, msg->u.fault.value);
        put_str(o + 8, msg->u.fault.text, 16);
        return 24;
    default:
        return -1;
    }
}

int poise_msg_unpack(uint8_t type, const uint8_t *p, size_t n, poise_msg_t *msg)
{
    memset(msg, 0, sizeof *msg);
    msg->type = type;
    switch (type) {
    case POISE_HELLO_REQUEST:
    case POISE_HEARTBEAT:
    case POISE_DISARM:
    case POISE_ESTOP:
        return n == 0 ? POISE_OK : POISE_ERR_MALFORMED;
    case POISE_HELLO: {
        poise_hello_t *h = &msg->u.hello;
        if (n != 28) {
            return POISE_ERR_MALFORMED;
        }
        h->protocol_version = p[0];
        h->n_coordinates = p[1];
        h->n_actuators = p[2];
        h->flags = p[3];
        h->rate_hz = poise_get_u16(p + 4);
        h->watchdog_ms = poise_get_u16(p + 6);
        h->schema_checksum = poise_get_u32(p + 8);
        get_str(h->firmware_id, p + 12, 16);
        return POISE_OK;
    }
    case POISE_CHANNEL: {
        poise_channel_t *c = &msg->u.channel;
        if (n != 46) {
            return POISE_ERR_MALFORMED;
        }
        c->index = p[0];
        c->kind = p[1];
        get_str(c->name, p + 2, 16);
        get_str(c->unit, p + 18, 8);
        get_str(c->effort_unit, p + 26, 8);
        c->lower = poise_get_f32(p + 34);
        c->upper = poise_get_f32(p + 38);
        c->effort_limit = poise_get_f32(p + 42);
        return POISE_OK;
    }
    case POISE_SENSORS: {
        poise_sensors_t *s = &msg->u.sensors;
        size_t off = 10;
        if (n < 10) {
            return POISE_ERR_MALFORMED;
        }
        s->n_q = p[8];
        s->n_a = p[9];
        if (s->n_q > POISE_MAX_Q || s->n_a > POISE_MAX_A ||
            n != 10u + 4u * (s->n_q + 2u * s->n_a)) {
            return POISE_ERR_MALFORMED;
        }
        s->status = poise_get_u32(p);
        s->last_setpoint_seq = poise_get_u16(p + 4);
        s->last_rx_seq = poise_get_u16(p + 6);
        get_floats(s->q, p + off, s->n_q);
        off += 4u * s->n_q;
        get_floats(s->qa, p + off, s->n_a);
        off += 4u * s->n_a;
        get_floats(s->tau, p + off, s->n_a);
        return POISE_OK;
    }
    case POISE_SETPOINT: {
        poise_setpoint_t *s = &msg->u.setpoint;
        size_t want;
        if (n < 2 || (p[0] & ~1u) != 0) {
            return POISE_ERR_MALFORMED;
        }
        s->has_ff = p[0] & 1u;
        s->n_a = p[1];
        want = 2u + 4u * s->n_a * (s->has_ff ? 2u : 1u);
        if (s->n_a > POISE_MAX_A || n != want) {
            return POISE_ERR_MALFORMED;
        }
        get_floats(s->qa_ref, p + 2, s->n_a);
        if (s->has_ff) {
            get_floats(s->tau_ff, p + 2 + 4u * s->n_a, s->n_a);
        }
        return POISE_OK;
    }
    case POISE_ARM:
        if (n != 1 || (p[0] & ~1u) != 0) {
            return POISE_ERR_MALFORMED;
        }
        msg->u.arm_clear_estop = p[0] & 1u;
        return POISE_OK;
    case POISE_CONFIG_WRITE:
        if (n != 8) {
            return POISE_ERR_MALFORMED;
        }
        msg->u.config.key = poise_get_u16(p);
        msg->u.config.channel = p[2];
        msg->u.config.value = poise_get_f32(p + 4);
        return POISE_OK;
    case POISE_ACK:
        if (n != 6) {
            return POISE_ERR_MALFORMED;
        }
        msg->u.ack.ref_type = p[0];
        msg->u.ack.code = p[1];
        msg->u.ack.ref_seq = poise_get_u16(p + 2);
        msg->u.ack.detail = poise_get_u16(p + 4);
        return POISE_OK;
    case POISE_FAULT:
        if (n != 24) {
            return POISE_ERR_MALFORMED;
        }
        msg->u.fault.code = poise_get_u16(p);
        msg->u.fault.channel = p[2];
        msg->u.fault.severity = p[3];
        msg->u.fault.value = poise_get_f32(p + 4);
        get_str(msg->u.fault.text, p + 8, 16);
        return POISE_OK;
    default:
        return POISE_ERR_TYPE;
    }
}

size_t poise_msg_encode(const poise_msg_t *msg, uint8_t version, uint16_t seq,
                        uint32_t timestamp_us, uint8_t *out)
{
    uint8_t payload[POISE_MAX_PAYLOAD];
    poise_header_t h;
    int n = poise_msg_pack(msg, payload);
    if (n < 0) {
        return 0;
    }
    h.version = version;
    h.type = msg->type;
    h.seq = seq;
    h.timestamp_us = timestamp_us;
    return poise_frame_encode(&h, payload, (size_t)n, out);
}

uint32_t poise_schema_checksum(const poise_channel_t *channels, size_t n)
{
    uint8_t buf[34];
    uint32_t crc = 0;
    size_t i;
    for (i = 0; i < n; i++) {
        pack_channel_schema(&channels[i], buf);
        crc = poise_crc32(crc, buf, sizeof buf);
    }
    return crc;
}
