/* Host test of the reference firmware library:
 *   1. byte-for-byte against the protocol test vectors (text form written by the Python test
 *      from tests/vectors/protocol_vectors.json, see poise.firmware_bridge.vectors.c_text):
 *      encode each message from its fields, decode each frame and re-encode it;
 *   2. the stream decoder survives garbage and counts errors;
 *   3. the watchdog, e-stop latch and config acks of the device endpoint, with a fake HAL.
 * Usage: test_vectors VECTORS.txt ; prints "ok N checks" and exits 0, or the failures. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "poise_codec.h"
#include "poise_device.h"
#include "poise_messages.h"

static int failures = 0;
static int checks = 0;

#define CHECK(cond, ...)                                                                      \
    do {                                                                                      \
        checks++;                                                                             \
        if (!(cond)) {                                                                        \
            failures++;                                                                       \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                              \
            fprintf(stderr, __VA_ARGS__);                                                     \
            fputc('\n', stderr);                                                              \
        }                                                                                     \
    } while (0)

static size_t from_hex(const char *hex, uint8_t *out, size_t cap)
{
    size_t n = strlen(hex) / 2, i;
    if (strcmp(hex, "-") == 0) return 0;
    if (n > cap) n = cap;
    for (i = 0; i < n; i++) {
        unsigned v = 0;
        sscanf(hex + 2 * i, "%2x", &v);
        out[i] = (uint8_t)v;
    }
    return n;
}

static void to_hex(const uint8_t *b, size_t n, char *out)
{
    size_t i;
    for (i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", b[i]);
    out[2 * n] = '\0';
}

/* ---------------------------------------------------------------- token reader */
static char *tok[512];
static int ntok, ti;

static const char *next(void) { return ti < ntok ? tok[ti++] : "0"; }
static long inext(void) { return strtol(next(), NULL, 10); }
static unsigned long unext(void) { return strtoul(next(), NULL, 10); }
static float fnext(void) { return strtof(next(), NULL); }
static void snext(char *dst, size_t width)
{
    uint8_t buf[64];
    size_t n = from_hex(next(), buf, width);
    memcpy(dst, buf, n);
    dst[n] = '\0';
}
static int flist(float *dst, int cap)
{
    long n = inext(), i;
    if (n < 0) return -1;
    for (i = 0; i < n; i++) {
        float v = fnext();
        if (i < cap) dst[i] = v;
    }
    return (int)n;
}

static poise_channel_t seen_channels[8];
static size_t n_seen_channels = 0;
static uint32_t hello_schema = 0;

static void check_message_line(int lineno)
{
    poise_msg_t m;
    uint8_t version, frame[POISE_MAX_WIRE], re[POISE_MAX_WIRE], payload[POISE_MAX_PAYLOAD];
    uint16_t seq;
    uint32_t ts;
    size_t n, i, plen = 0;
    char got[2 * POISE_MAX_WIRE + 1];
    const char *want;
    poise_rx_t rx;
    poise_header_t h;
    poise_msg_t dec;
    int decoded = 0;

    memset(&m, 0, sizeof m);
    m.type = (uint8_t)inext();
    version = (uint8_t)inext();
    seq = (uint16_t)inext();
    ts = (uint32_t)unext();
    switch (m.type) {
    case POISE_HELLO:
        m.u.hello.protocol_version = (uint8_t)inext();
        m.u.hello.n_coordinates = (uint8_t)inext();
        m.u.hello.n_actuators = (uint8_t)inext();
        m.u.hello.rate_hz = (uint16_t)inext();
        m.u.hello.watchdog_ms = (uint16_t)inext();
        m.u.hello.schema_checksum = (uint32_t)unext();
        snext(m.u.hello.firmware_id, 16);
        m.u.hello.flags = (uint8_t)inext();
        hello_schema = m.u.hello.schema_checksum;
        break;
    case POISE_CHANNEL:
        m.u.channel.index = (uint8_t)inext();
        m.u.channel.kind = (uint8_t)inext();
        snext(m.u.channel.name, 16);
        snext(m.u.channel.unit, 8);
        m.u.channel.lower = fnext();
        m.u.channel.upper = fnext();
        snext(m.u.channel.effort_unit, 8);
        m.u.channel.effort_limit = fnext();
        if (n_seen_channels < 8) seen_channels[n_seen_channels++] = m.u.channel;
        break;
    case POISE_SENSORS:
        m.u.sensors.status = (uint32_t)unext();
        m.u.sensors.last_setpoint_seq = (uint16_t)inext();
        m.u.sensors.last_rx_seq = (uint16_t)inext();
        m.u.sensors.n_q = (uint8_t)flist(m.u.sensors.q, POISE_MAX_Q);
        m.u.sensors.n_a = (uint8_t)flist(m.u.sensors.qa, POISE_MAX_A);
        flist(m.u.sensors.tau, POISE_MAX_A);
        break;
    case POISE_SETPOINT: {
        int nff;
        m.u.setpoint.n_a = (uint8_t)flist(m.u.setpoint.qa_ref, POISE_MAX_A);
        nff = flist(m.u.setpoint.tau_ff, POISE_MAX_A);
        m.u.setpoint.has_ff = nff >= 0;
        break;
    }
    case POISE_ARM:
        m.u.arm_clear_estop = (uint8_t)inext();
        break;
    case POISE_CONFIG_WRITE:
        m.u.config.key = (uint16_t)inext();
        m.u.config.value = fnext();
        m.u.config.channel = (uint8_t)inext();
        break;
    case POISE_ACK:
        m.u.ack.ref_type = (uint8_t)inext();
        m.u.ack.code = (uint8_t)inext();
        m.u.ack.ref_seq = (uint16_t)inext();
        m.u.ack.detail = (uint16_t)inext();
        break;
    case POISE_FAULT:
        m.u.fault.code = (uint16_t)inext();
        m.u.fault.severity = (uint8_t)inext();
        m.u.fault.channel = (uint8_t)inext();
        m.u.fault.value = fnext();
        snext(m.u.fault.text, 16);
        break;
    default:
        break;
    }
    want = next();
    /* encode from fields */
    n = poise_msg_encode(&m, version, seq, ts, frame);
    to_hex(frame, n, got);
    CHECK(strcmp(got, want) == 0, "line %d (type 0x%02x): encode\n  got  %s\n  want %s", lineno,
          m.type, got, want);
    /* decode the expected frame through the stream decoder, re-encode */
    n = from_hex(want, frame, sizeof frame);
    poise_rx_init(&rx);
    for (i = 0; i < n; i++) {
        if (poise_rx_byte(&rx, frame[i], &h, payload, &plen)) decoded++;
    }
    CHECK(decoded == 1, "line %d: stream decoder found %d frames", lineno, decoded);
    if (decoded != 1) return;
    CHECK(h.seq == seq && h.timestamp_us == ts && h.version == version, "line %d: header", lineno);
    CHECK(poise_msg_unpack(h.type, payload, plen, &dec) == POISE_OK, "line %d: unpack", lineno);
    n = poise_msg_encode(&dec, h.version, h.seq, h.timestamp_us, re);
    to_hex(re, n, got);
    CHECK(strcmp(got, want) == 0, "line %d: decode+encode\n  got  %s\n  want %s", lineno, got,
          want);
}

static void check_vectors(const char *path)
{
    static char line[16384];
    int lineno = 0, msgs = 0;
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(2);
    }
    while (fgets(line, sizeof line, f)) {
        char *p;
        lineno++;
        ntok = 0;
        ti = 0;
        for (p = strtok(line, " \t\r\n"); p && ntok < 512; p = strtok(NULL, " \t\r\n")) {
            tok[ntok++] = p;
        }
        if (ntok == 0) continue;
        if (strcmp(tok[0], "MSG") == 0) {
            ti = 1;
            check_message_line(lineno);
            msgs++;
        } else if (strcmp(tok[0], "COBS") == 0) {
            static uint8_t raw[1024], enc[1100];
            char got[2300];
            size_t n = from_hex(tok[1], raw, sizeof raw), m;
            m = poise_cobs_encode(raw, n, enc);
            to_hex(enc, m, got);
            CHECK(strcmp(got, tok[2]) == 0, "line %d: COBS encode", lineno);
        } else if (strcmp(tok[0], "CRC") == 0) {
            uint8_t raw[256];
            size_t n = from_hex(tok[1], raw, sizeof raw);
            CHECK(poise_crc16(raw, n) == (uint16_t)strtoul(tok[2], NULL, 10), "line %d: CRC",
                  lineno);
        }
    }
    fclose(f);
    CHECK(msgs >= 12, "only %d message vectors", msgs);
    CHECK(n_seen_channels > 0 &&
              poise_schema_checksum(seen_channels, n_seen_channels) == hello_schema,
          "schema checksum of the channel vectors 0x%08x != hello's 0x%08x",
          (unsigned)poise_schema_checksum(seen_channels, n_seen_channels), (unsigned)hello_schema);
}

/* ---------------------------------------------------------------- stream robustness */
static void check_stream_decoder(void)
{
    poise_rx_t rx;
    poise_header_t h;
    uint8_t payload[POISE_MAX_PAYLOAD], frame[POISE_MAX_WIRE], garbage[600];
    size_t plen, n, i;
    int got = 0;
    poise_msg_t m;
    unsigned seed = 12345;
    memset(&m, 0, sizeof m);
    m.type = POISE_HEARTBEAT;
    n = poise_msg_encode(&m, 1, 77, 0, frame);
    for (i = 0; i < sizeof garbage; i++) {
        seed = seed * 1103515245u + 12345u;
        garbage[i] = (uint8_t)(seed >> 16);
    }
    poise_rx_init(&rx);
    for (i = 0; i < sizeof garbage; i++) got += poise_rx_byte(&rx, garbage[i], &h, payload, &plen);
    got = 0;
    poise_rx_byte(&rx, 0, &h, payload, &plen);
    for (i = 0; i < n; i++) got += poise_rx_byte(&rx, frame[i], &h, payload, &plen);
    CHECK(got == 1 && h.seq == 77, "resync after garbage (got %d)", got);
    CHECK(rx.crc + rx.cobs + rx.length > 0, "garbage counted");
    /* an over-long run is one length error */
    poise_rx_init(&rx);
    for (i = 0; i < 1000; i++) poise_rx_byte(&rx, 0x11, &h, payload, &plen);
    poise_rx_byte(&rx, 0, &h, payload, &plen);
    CHECK(rx.length == 1, "over-long run: %u length errors", (unsigned)rx.length);
}

/* ---------------------------------------------------------------- device with a fake HAL */
typedef struct {
    uint32_t now;
    poise_mode_t mode;
    float qa[2], ref[2];
    int commands;
    poise_rx_t rx;
    poise_msg_t last[32];
    int nlast;
} fake_t;

static uint32_t f_micros(void *c) { return ((fake_t *)c)->now; }
static void f_write(void *c, const uint8_t *d, size_t n)
{
    fake_t *f = (fake_t *)c;
    poise_header_t h;
    uint8_t payload[POISE_MAX_PAYLOAD];
    size_t plen, i;
    for (i = 0; i < n; i++) {
        if (poise_rx_byte(&f->rx, d[i], &h, payload, &plen) && f->nlast < 32) {
            poise_msg_unpack(h.type, payload, plen, &f->last[f->nlast++]);
        }
    }
}
static void f_read(void *c, float *q, float *qa, float *tau, uint16_t *st)
{
    fake_t *f = (fake_t *)c;
    q[0] = f->qa[0] * 100.0f;
    qa[0] = f->qa[0];
    qa[1] = f->qa[1];
    tau[0] = 2000.0f * (f->ref[0] - f->qa[0]);
    tau[1] = 2000.0f * (f->ref[1] - f->qa[1]);
    *st = 0;
}
static void f_mode(void *c, poise_mode_t m) { ((fake_t *)c)->mode = m; }
static void f_cmd(void *c, const float *r, const float *ff)
{
    fake_t *f = (fake_t *)c;
    (void)ff;
    f->ref[0] = r[0];
    f->ref[1] = r[1];
    f->commands++;
}

static void host_send(poise_device_t *dev, poise_msg_t *m, uint16_t seq)
{
    uint8_t frame[POISE_MAX_WIRE];
    size_t n = poise_msg_encode(m, POISE_PROTOCOL_VERSION, seq, 0, frame);
    dev->rx_error = 0;
    poise_device_rx(dev, frame, n);
}

static const poise_msg_t *find(fake_t *f, uint8_t type)
{
    int i;
    for (i = f->nlast - 1; i >= 0; i--) {
        if (f->last[i].type == type) return &f->last[i];
    }
    return NULL;
}

static void check_device(void)
{
    static const poise_channel_t ch[3] = {
        {0, POISE_KIND_COORDINATE, "theta1", "rad", "", -3.0f, 3.0f, 0.0f},
        {1, POISE_KIND_ACTUATOR, "tendon1", "m", "N", -0.03f, 0.03f, 40.0f},
        {2, POISE_KIND_ACTUATOR, "tendon2", "m", "N", -0.03f, 0.03f, 40.0f},
    };
    fake_t f;
    poise_hal_t hal = {0, f_micros, f_write, f_read, f_mode, f_cmd};
    poise_device_t dev;
    poise_msg_t m;
    const poise_msg_t *r;
    memset(&f, 0, sizeof f);
    poise_rx_init(&f.rx);
    hal.ctx = &f;
    f.now = 1000;
    poise_device_init(&dev, &hal, ch, 1, 2, "c-test", 1000, 50);
    CHECK(f.mode == POISE_MODE_DISABLED, "starts disabled");

    memset(&m, 0, sizeof m);
    m.type = POISE_HELLO_REQUEST;
    host_send(&dev, &m, 0);
    r = find(&f, POISE_HELLO);
    CHECK(r && r->u.hello.n_actuators == 2 && strcmp(r->u.hello.firmware_id, "c-test") == 0 &&
              r->u.hello.schema_checksum == poise_schema_checksum(ch, 3),
          "hello");
    CHECK(f.nlast == 4, "hello + 3 channels (%d frames)", f.nlast);

    m.type = POISE_ARM;
    m.u.arm_clear_estop = 0;
    host_send(&dev, &m, 1);
    r = find(&f, POISE_ACK);
    CHECK(dev.armed && r && r->u.ack.code == POISE_E_OK && f.mode == POISE_MODE_POSITION, "arm");

    /* fed within the timeout: stays armed (also across the u32 clock wrap) */
    f.now = 40000;
    memset(&m, 0, sizeof m);
    m.type = POISE_SETPOINT;
    m.u.setpoint.n_a = 2;
    m.u.setpoint.qa_ref[0] = 0.01f;
    m.u.setpoint.qa_ref[1] = 0.5f; /* clipped to 0.03 */
    host_send(&dev, &m, 2);
    CHECK(f.ref[1] == 0.03f && dev.limit && dev.last_setpoint_seq == 2, "setpoint clipped");
    f.now = 89000; /* 49 ms of silence */
    poise_device_poll(&dev);
    CHECK(dev.armed, "not tripped at 49 ms");
    f.now = 91000; /* 51 ms */
    poise_device_poll(&dev);
    CHECK(!dev.armed && dev.watchdog_tripped && f.mode == POISE_MODE_HOLD, "tripped at 51 ms");
    r = find(&f, POISE_FAULT);
    CHECK(r && r->u.fault.code == POISE_F_WATCHDOG, "watchdog fault sent");
    r = find(&f, POISE_SENSORS);
    CHECK(r && (r->u.sensors.status & POISE_ST_WATCHDOG) && !(r->u.sensors.status & POISE_ST_ARMED),
          "sensors show the latch");
    /* latched: heartbeat and setpoints do not clear it */
    memset(&m, 0, sizeof m);
    m.type = POISE_HEARTBEAT;
    host_send(&dev, &m, 3);
    f.commands = 0;
    m.type = POISE_SETPOINT;
    m.u.setpoint.n_a = 2;
    host_send(&dev, &m, 4);
    poise_device_poll(&dev);
    CHECK(dev.watchdog_tripped && !dev.armed && f.commands == 0, "latched");
    memset(&m, 0, sizeof m);
    m.type = POISE_ARM;
    host_send(&dev, &m, 5);
    CHECK(dev.armed && !dev.watchdog_tripped, "re-armed");

    /* wrap-around of the microsecond clock */
    f.now = 0xFFFFFF00u;
    m.type = POISE_HEARTBEAT;
    host_send(&dev, &m, 6);
    f.now = 0x00000100u + 20000u; /* 20.5 ms later, across the wrap */
    poise_device_poll(&dev);
    CHECK(dev.armed, "no trip across the clock wrap");
    f.now += 40000u;
    poise_device_poll(&dev);
    CHECK(!dev.armed && dev.watchdog_tripped, "trip across the clock wrap");

    /* e-stop latch */
    memset(&m, 0, sizeof m);
    m.type = POISE_ARM;
    host_send(&dev, &m, 7);
    m.type = POISE_ESTOP;
    host_send(&dev, &m, 8);
    CHECK(dev.estop && !dev.armed && f.mode == POISE_MODE_DISABLED, "e-stop");
    m.type = POISE_ARM;
    host_send(&dev, &m, 9);
    r = find(&f, POISE_ACK);
    CHECK(!dev.armed && r && r->u.ack.code == POISE_E_BAD_STATE, "arm refused while e-stopped");
    m.u.arm_clear_estop = 1;
    host_send(&dev, &m, 10);
    CHECK(dev.armed && !dev.estop, "arm with clear_estop");

    /* config ack / nack */
    memset(&m, 0, sizeof m);
    m.type = POISE_CONFIG_WRITE;
    m.u.config.key = POISE_CFG_WATCHDOG_MS;
    m.u.config.channel = POISE_NO_CHANNEL;
    m.u.config.value = 5.0f;
    host_send(&dev, &m, 11);
    r = find(&f, POISE_ACK);
    CHECK(r && r->u.ack.code == POISE_E_OUT_OF_RANGE && r->u.ack.ref_seq == 11 &&
              r->u.ack.detail == POISE_CFG_WATCHDOG_MS,
          "nack out of range");
    m.u.config.value = 200.0f;
    host_send(&dev, &m, 12);
    r = find(&f, POISE_ACK);
    CHECK(r && r->u.ack.code == POISE_E_OK && dev.watchdog_ms == 200, "ack");
    m.u.config.key = POISE_CFG_EFFORT_LIMIT;
    m.u.config.channel = 1;
    m.u.config.value = 10.0f;
    host_send(&dev, &m, 13);
    r = find(&f, POISE_ACK);
    CHECK(r && r->u.ack.code == POISE_E_BAD_STATE, "effort limit refused while armed");
    m.u.config.key = 0x777;
    host_send(&dev, &m, 14);
    r = find(&f, POISE_ACK);
    CHECK(r && r->u.ack.code == POISE_E_UNKNOWN_KEY, "unknown key");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s VECTORS.txt\n", argv[0]);
        return 2;
    }
    check_vectors(argv[1]);
    check_stream_decoder();
    check_device();
    if (failures) {
        fprintf(stderr, "%d of %d checks failed\n", failures, checks);
        return 1;
    }
    printf("ok %d checks\n", checks);
    return 0;
}
