/* poise wire protocol messages: C structs and little-endian (de)serialisation.
 * Layouts byte by byte: docs/protocol.md. C99, no dynamic allocation. */
#ifndef POISE_MESSAGES_H
#define POISE_MESSAGES_H

#include <stddef.h>
#include <stdint.h>

#include "poise_codec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Channel counts this firmware supports (the protocol allows n_q + 2 n_a <= 57). */
#define POISE_MAX_Q 16u
#define POISE_MAX_A 16u
#define POISE_NO_CHANNEL 0xFFu

enum poise_msg_type {
    POISE_HELLO_REQUEST = 0x01,
    POISE_HELLO = 0x02,
    POISE_CHANNEL = 0x03,
    POISE_SENSORS = 0x10,
    POISE_SETPOINT = 0x11,
    POISE_HEARTBEAT = 0x12,
    POISE_ARM = 0x20,
    POISE_DISARM = 0x21,
    POISE_ESTOP = 0x22,
    POISE_CONFIG_WRITE = 0x30,
    POISE_ACK = 0x31,
    POISE_FAULT = 0x40
};

enum poise_status_bits {
    POISE_ST_ARMED = 1u << 0,
    POISE_ST_ESTOP = 1u << 1,
    POISE_ST_WATCHDOG = 1u << 2,
    POISE_ST_FAULT = 1u << 3,
    POISE_ST_LIMIT = 1u << 4,
    POISE_ST_SATURATED = 1u << 5,
    POISE_ST_RX_ERROR = 1u << 6,
    POISE_ST_FEEDFORWARD = 1u << 7
};

enum poise_error_code {
    POISE_E_OK = 0,
    POISE_E_UNKNOWN_KEY = 1,
    POISE_E_OUT_OF_RANGE = 2,
    POISE_E_BAD_STATE = 3,
    POISE_E_BAD_CHANNEL = 4,
    POISE_E_MALFORMED = 5,
    POISE_E_UNSUPPORTED = 6
};

enum poise_fault_code {
    POISE_F_WATCHDOG = 1,
    POISE_F_ESTOP = 2,
    POISE_F_LIMIT = 3,
    POISE_F_EFFORT = 4,
    POISE_F_SENSOR = 5,
    POISE_F_BAD_SETPOINT = 6,
    POISE_F_PLANT = 7
};

enum poise_config_key {
    POISE_CFG_WATCHDOG_MS = 1,
    POISE_CFG_SENSOR_RATE_HZ = 2,
    POISE_CFG_SAFE_MODE = 3,
    POISE_CFG_EFFORT_LIMIT = 0x10
};

enum poise_channel_kind { POISE_KIND_COORDINATE = 0, POISE_KIND_ACTUATOR = 1 };

typedef struct {
    uint8_t protocol_version, n_coordinates, n_actuators, flags;
    uint16_t rate_hz, watchdog_ms;
    uint32_t schema_checksum;
    char firmware_id[17];
} poise_hello_t;

typedef struct {
    uint8_t index, kind;
    char name[17];
    char unit[9];
    char effort_unit[9];
    float lower, upper, effort_limit;
} poise_channel_t;

typedef struct {
    uint32_t status;
    uint16_t last_setpoint_seq, last_rx_seq;
    uint8_t n_q, n_a;
    float q[POISE_MAX_Q], qa[POISE_MAX_A], tau[POISE_MAX_A];
} poise_sensors_t;

typedef struct {
    uint8_t n_a, has_ff;
    float qa_ref[POISE_MAX_A], tau_ff[POISE_MAX_A];
} poise_setpoint_t;

typedef struct {
    uint16_t key;
    uint8_t channel;
    float value;
} poise_config_write_t;

typedef struct {
    uint8_t ref_type, code;
    uint16_t ref_seq, detail;
} poise_ack_t;

typedef struct {
    uint16_t code;
    uint8_t channel, severity;
    float value;
    char text[17];
} poise_fault_t;

typedef struct {
    uint8_t type; /* enum poise_msg_type */
    union {
        poise_hello_t hello;
        poise_channel_t channel;
        poise_sensors_t sensors;
        poise_setpoint_t setpoint;
        uint8_t arm_clear_estop;
        poise_config_write_t config;
        poise_ack_t ack;
        poise_fault_t fault;
    } u;
} poise_msg_t;

/* Payload of msg into out (capacity POISE_MAX_PAYLOAD); returns its length, or -1 if the
 * message does not fit (too many channels, unknown type). */
int poise_msg_pack(const poise_msg_t *msg, uint8_t *out);
/* Parse a payload; returns POISE_OK, POISE_ERR_TYPE or POISE_ERR_MALFORMED. */
int poise_msg_unpack(uint8_t type, const uint8_t *payload, size_t n, poise_msg_t *msg);
/* Whole wire frame of msg (capacity POISE_MAX_WIRE); returns its length or 0. */
size_t poise_msg_encode(const poise_msg_t *msg, uint8_t version, uint16_t seq,
                        uint32_t timestamp_us, uint8_t *out);
/* CRC-32 over bytes 0..33 (index, kind, name, unit, effort unit) of each Channel payload. */
uint32_t poise_schema_checksum(const poise_channel_t *channels, size_t n);

#ifdef __cplusplus
}
#endif
#endif
