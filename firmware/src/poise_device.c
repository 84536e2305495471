/* poise device endpoint. See poise_device.h; mirrors poise/firmware_bridge/device.py. */
#include "poise_device.h"

#include <math.h>
#include <string.h>

static void send_msg(poise_device_t *dev, const poise_msg_t *msg, uint32_t now_us)
{
    uint8_t frame[POISE_MAX_WIRE];
    size_t n = poise_msg_encode(msg, POISE_PROTOCOL_VERSION, dev->tx_seq, now_us - dev->t0_us,
                                frame);
    dev->tx_seq++;
    if (n) {
        dev->hal.write(dev->hal.ctx, frame, n);
    }
}

static void send_ack(poise_device_t *dev, uint8_t ref_type, uint16_t ref_seq, uint8_t code,
                     uint16_t detail, uint32_t now)
{
    poise_msg_t m;
    m.type = POISE_ACK;
    m.u.ack.ref_type = ref_type;
    m.u.ack.ref_seq = ref_seq;
    m.u.ack.code = code;
    m.u.ack.detail = detail;
    send_msg(dev, &m, now);
}

static void send_fault(poise_device_t *dev, uint16_t code, uint8_t severity, uint8_t channel,
                       float value, const char *text, uint32_t now)
{
    poise_msg_t m;
    memset(&m, 0, sizeof m);
    m.type = POISE_FAULT;
    m.u.fault.code = code;
    m.u.fault.severity = severity;
    m.u.fault.channel = channel;
    m.u.fault.value = value;
    strncpy(m.u.fault.text, text, 16);
    send_msg(dev, &m, now);
}

void poise_device_init(poise_device_t *dev, const poise_hal_t *hal,
                       const poise_channel_t *channels, uint8_t n_q, uint8_t n_a,
                       const char *firmware_id, uint16_t rate_hz, uint16_t watchdog_ms)
{
    uint8_t i;
    memset(dev, 0, sizeof *dev);
    dev->hal = *hal;
    dev->channels = channels;
    dev->n_q = n_q;
    dev->n_a = n_a;
    for (i = 0; i < n_a && i < POISE_MAX_A; i++) {
        dev->effort_limit[i] = channels[n_q + i].effort_limit;
    }
    dev->firmware_id = firmware_id;
    dev->rate_hz = rate_hz;
    dev->watchdog_ms = watchdog_ms;
    dev->safe_mode = POISE_MODE_HOLD;
    poise_rx_init(&dev->rx);
    dev->t0_us = hal->micros(hal->ctx);
    dev->next_sensor_us = dev->t0_us;
    dev->hal.set_mode(dev->hal.ctx, POISE_MODE_DISABLED);
}

uint32_t poise_device_status(const poise_device_t *dev)
{
    uint32_t s = 0;
    if (dev->armed) s |= POISE_ST_ARMED;
    if (dev->estop) s |= POISE_ST_ESTOP;
    if (dev->watchdog_tripped) s |= POISE_ST_WATCHDOG;
    if (dev->fault_latched) s |= POISE_ST_FAULT;
    if (dev->limit) s |= POISE_ST_LIMIT;
    if (dev->rx_error) s |= POISE_ST_RX_ERROR;
    if (dev->ff && dev->armed) s |= POISE_ST_FEEDFORWARD;
    return s;
}

static void send_hello(poise_device_t *dev, uint32_t now)
{
    poise_msg_t m;
    uint8_t i;
    memset(&m, 0, sizeof m);
    m.type = POISE_HELLO;
    m.u.hello.protocol_version = POISE_PROTOCOL_VERSION;
    m.u.hello.n_coordinates = dev->n_q;
    m.u.hello.n_actuators = dev->n_a;
    m.u.hello.rate_hz = dev->rate_hz;
    m.u.hello.watchdog_ms = dev->watchdog_ms;
    m.u.hello.schema_checksum = poise_schema_checksum(dev->channels, (size_t)dev->n_q + dev->n_a);
    strncpy(m.u.hello.firmware_id, dev->firmware_id, 16);
    send_msg(dev, &m, now);
    for (i = 0; i < dev->n_q + dev->n_a; i++) {
        m.type = POISE_CHANNEL;
        m.u.channel = dev->channels[i];
        if (i >= dev->n_q) {
            m.u.channel.effort_limit = dev->effort_limit[i - dev->n_q];
        }
        send_msg(dev, &m, now);
    }
}

static void arm(poise_device_t *dev, uint8_t clear_estop, uint16_t seq, uint32_t now)
{
    float q[POISE_MAX_Q], qa[POISE_MAX_A], tau[POISE_MAX_A];
    uint16_t ps = 0;
    if (dev->estop && !clear_estop) {
        send_ack(dev, POISE_ARM, seq, POISE_E_BAD_STATE, 0, now);
        return;
    }
    dev->estop = dev->watchdog_tripped = dev->fault_latched = dev->limit_reported = 0;
    dev->hal.read_sensors(dev->hal.ctx, q, qa, tau, &ps);
    dev->hal.set_command(dev->hal.ctx, qa, NULL); /* no jump */
    dev->hal.set_mode(dev->hal.ctx, POISE_MODE_POSITION);
    dev->armed = 1;
    dev->last_feed_us = now;
    send_ack(dev, POISE_ARM, seq, POISE_E_OK, 0, now);
}

static int all_finite(const float *v, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) {
        if (!isfinite(v[i])) return 0;
    }
    return 1;
}

static void apply_setpoint(poise_device_t *dev, poise_setpoint_t *sp, uint16_t seq, uint32_t now)
{
    uint8_t i;
    int clipped = -1;
    float requested = 0.0f;
    if (!dev->armed) {
        return;
    }
    if (sp->n_a != dev->n_a || !all_finite(sp->qa_ref, sp->n_a) ||
        (sp->has_ff && !all_finite(sp->tau_ff, sp->n_a))) {
        dev->fault_latched = 1;
        send_fault(dev, POISE_F_BAD_SETPOINT, 1, POISE_NO_CHANNEL, (float)sp->n_a, "bad setpoint",
                   now);
        return;
    }
    for (i = 0; i < sp->n_a; i++) {
        const poise_channel_t *c = &dev->channels[dev->n_q + i];
        float x = sp->qa_ref[i];
        if (x < c->lower || x > c->upper) {
            if (clipped < 0) {
                clipped = i;
                requested = x;
            }
            sp->qa_ref[i] = x < c->lower ? c->lower : c->upper;
        }
    }
    dev->limit = clipped >= 0;
    if (dev->limit && !dev->limit_reported) {
        dev->limit_reported = 1;
        send_fault(dev, POISE_F_LIMIT, 1, (uint8_t)(dev->n_q + clipped), requested, "clipped", now);
    }
    dev->hal.set_command(dev->hal.ctx, sp->qa_ref, sp->has_ff ? sp->tau_ff : NULL);
    dev->ff = sp->has_ff;
    dev->last_setpoint_seq = seq;
}

static uint8_t configure(poise_device_t *dev, const poise_config_write_t *c)
{
    float v = c->value;
    if (!isfinite(v)) return POISE_E_OUT_OF_RANGE;
    switch (c->key) {
    case POISE_CFG_WATCHDOG_MS:
    case POISE_CFG_SENSOR_RATE_HZ:
    case POISE_CFG_SAFE_MODE:
        if (c->channel != POISE_NO_CHANNEL) return POISE_E_BAD_CHANNEL;
        if (c->key == POISE_CFG_WATCHDOG_MS) {
            if (v < 10.0f || v > 10000.0f) return POISE_E_OUT_OF_RANGE;
            dev->watchdog_ms = (uint16_t)(v + 0.5f);
        } else if (c->key == POISE_CFG_SENSOR_RATE_HZ) {
            if (v < 1.0f || v > 2000.0f) return POISE_E_OUT_OF_RANGE;
            dev->rate_hz = (uint16_t)(v + 0.5f);
        } else {
            if (v != 0.0f && v != 1.0f) return POISE_E_OUT_OF_RANGE;
            dev->safe_mode = v == 0.0f ? POISE_MODE_HOLD : POISE_MODE_DISABLED;
        }
        return POISE_E_OK;
    case POISE_CFG_EFFORT_LIMIT:
        if (c->channel < dev->n_q || c->channel >= dev->n_q + dev->n_a) return POISE_E_BAD_CHANNEL;
        if (v <= 0.0f) return POISE_E_OUT_OF_RANGE;
        if (dev->armed) return POISE_E_BAD_STATE;
        dev->effort_limit[c->channel - dev->n_q] = v;
        return POISE_E_OK;
    default:
        return POISE_E_UNKNOWN_KEY;
    }
}

static void handle(poise_device_t *dev, const poise_header_t *h, poise_msg_t *m, uint32_t now)
{
    dev->rx_frames++;
    dev->last_rx_seq = h->seq;
    switch (m->type) {
    case POISE_SETPOINT:
        dev->last_feed_us = now;
        apply_setpoint(dev, &m->u.setpoint, h->seq, now);
        break;
    case POISE_HEARTBEAT:
        dev->last_feed_us = now;
        break;
    case POISE_HELLO_REQUEST:
        send_hello(dev, now);
        break;
    case POISE_ARM:
        arm(dev, m->u.arm_clear_estop, h->seq, now);
        break;
    case POISE_DISARM:
        dev->armed = 0;
        dev->hal.set_mode(dev->hal.ctx, dev->safe_mode);
        send_ack(dev, POISE_DISARM, h->seq, POISE_E_OK, 0, now);
        break;
    case POISE_ESTOP:
        dev->estop = 1;
        dev->armed = 0;
        dev->fault_latched = 1;
        dev->hal.set_mode(dev->hal.ctx, POISE_MODE_DISABLED);
        send_ack(dev, POISE_ESTOP, h->seq, POISE_E_OK, 0, now);
        send_fault(dev, POISE_F_ESTOP, 3, POISE_NO_CHANNEL, 0.0f, "e-stop", now);
        break;
    case POISE_CONFIG_WRITE:
        send_ack(dev, POISE_CONFIG_WRITE, h->seq, configure(dev, &m->u.config), m->u.config.key,
                 now);
        break;
    default:
        break; /* device->host types are ignored */
    }
}

void poise_device_rx(poise_device_t *dev, const uint8_t *data, size_t n)
{
    poise_header_t h;
    uint8_t payload[POISE_MAX_PAYLOAD];
    poise_msg_t m;
    size_t len = 0, i;
    uint32_t errors = dev->rx.crc + dev->rx.cobs + dev->rx.length;
    /* set by poise_rx_byte before use; cleared so that compilers that inline it across
     * files (avr-gcc -flto) see no read of an uninitialised value */
    memset(&h, 0, sizeof h);
    for (i = 0; i < n; i++) {
        if (!poise_rx_byte(&dev->rx, data[i], &h, payload, &len)) {
            continue;
        }
        if ((h.version != POISE_PROTOCOL_VERSION && h.type != POISE_HELLO_REQUEST) ||
            poise_msg_unpack(h.type, payload, len, &m) != POISE_OK) {
            dev->rx_dropped++;
            dev->rx_error = 1;
            continue;
        }
        handle(dev, &h, &m, dev->hal.micros(dev->hal.ctx));
    }
    if (dev->rx.crc + dev->rx.cobs + dev->rx.length != errors) {
        dev->rx_error = 1;
    }
}

int poise_device_check_watchdog(poise_device_t *dev, uint32_t now)
{
    uint32_t silence = now - dev->last_feed_us; /* wrap-safe */
    if (!dev->armed || silence <= (uint32_t)dev->watchdog_ms * 1000u) {
        return 0;
    }
    dev->armed = 0;
    dev->watchdog_tripped = 1;
    dev->fault_latched = 1;
    dev->watchdog_trips++;
    dev->hal.set_mode(dev->hal.ctx, dev->safe_mode);
    send_fault(dev, POISE_F_WATCHDOG, 2, POISE_NO_CHANNEL, (float)silence * 1e-6f, "host silent",
               now);
    return 1;
}

void poise_device_send_sensors(poise_device_t *dev, uint32_t now)
{
    poise_msg_t m;
    poise_sensors_t *s = &m.u.sensors;
    uint16_t plant = 0;
    uint8_t i;
    m.type = POISE_SENSORS;
    s->n_q = dev->n_q;
    s->n_a = dev->n_a;
    dev->hal.read_sensors(dev->hal.ctx, s->q, s->qa, s->tau, &plant);
    s->status = poise_device_status(dev) | ((uint32_t)plant << 16);
    for (i = 0; i < dev->n_a; i++) {
        float lim = dev->effort_limit[i];
        if (lim > 0.0f && fabsf(s->tau[i]) >= lim * (1.0f - 1e-6f)) {
            s->status |= POISE_ST_SATURATED;
        }
    }
    s->last_setpoint_seq = dev->last_setpoint_seq;
    s->last_rx_seq = dev->last_rx_seq;
    send_msg(dev, &m, now);
    dev->rx_error = 0;
}

void poise_device_poll(poise_device_t *dev)
{
    uint32_t now = dev->hal.micros(dev->hal.ctx);
    uint32_t period = 1000000u / (dev->rate_hz ? dev->rate_hz : 1u);
    poise_device_check_watchdog(dev, now);
    if ((int32_t)(now - dev->next_sensor_us) >= 0) {
        poise_device_send_sensors(dev, now);
        dev->next_sensor_us += period;
        if ((int32_t)(now - dev->next_sensor_us) > (int32_t)(10u * period)) {
            dev->next_sensor_us = now + period; /* fell behind: skip, don't burst */
        }
    }
}
