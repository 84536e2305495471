/* poise device endpoint: message handling, arm/disarm, e-stop latch, config writes, faults and
 * the watchdog, as a portable library. The board code supplies small HAL hooks (poise_hal_t);
 * nothing here allocates or blocks. Same semantics as poise.firmware_bridge.device (Python). */
#ifndef POISE_DEVICE_H
#define POISE_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "poise_messages.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { POISE_MODE_POSITION = 0, POISE_MODE_HOLD = 1, POISE_MODE_DISABLED = 2 } poise_mode_t;

typedef struct {
    void *ctx;
    /* Microsecond clock (wraps at 2^32; the library uses wrap-safe differences). */
    uint32_t (*micros)(void *ctx);
    /* Write bytes to the serial port (a whole frame at a time). */
    void (*write)(void *ctx, const uint8_t *data, size_t n);
    /* Read encoders/sensors: q[n_q], qa[n_a], tau[n_a]; plant status bits 0..15. */
    void (*read_sensors)(void *ctx, float *q, float *qa, float *tau, uint16_t *plant_status);
    /* Switch the motor drivers: position control, hold here, or disabled (no effort). */
    void (*set_mode)(void *ctx, poise_mode_t mode);
    /* Actuator references (already clipped) and optional feed-forward (NULL if absent). */
    void (*set_command)(void *ctx, const float *qa_ref, const float *tau_ff);
} poise_hal_t;

typedef struct {
    poise_hal_t hal;
    const poise_channel_t *channels; /* n_q coordinates, then n_a actuators */
    float effort_limit[POISE_MAX_A];
    uint8_t n_q, n_a;
    const char *firmware_id;
    uint16_t rate_hz, watchdog_ms;
    poise_mode_t safe_mode;
    uint8_t armed, estop, watchdog_tripped, fault_latched, limit, ff, rx_error, limit_reported;
    uint16_t tx_seq, last_setpoint_seq, last_rx_seq;
    uint32_t t0_us, last_feed_us, next_sensor_us;
    uint32_t watchdog_trips, rx_frames, rx_dropped;
    poise_rx_t rx;
} poise_device_t;

void poise_device_init(poise_device_t *dev, const poise_hal_t *hal,
                       const poise_channel_t *channels, uint8_t n_q, uint8_t n_a,
                       const char *firmware_id, uint16_t rate_hz, uint16_t watchdog_ms);
/* Bytes received from the host (any amount, any split). */
void poise_device_rx(poise_device_t *dev, const uint8_t *data, size_t n);
/* Call often from loop(): runs the watchdog and sends a Sensors frame when one is due. */
void poise_device_poll(poise_device_t *dev);
/* Run the watchdog now (also done by poise_device_poll); returns 1 if it tripped now. */
int poise_device_check_watchdog(poise_device_t *dev, uint32_t now_us);
/* Build and send one Sensors frame now. */
void poise_device_send_sensors(poise_device_t *dev, uint32_t now_us);
/* Status word (device bits | plant bits << 16 are combined by send_sensors). */
uint32_t poise_device_status(const poise_device_t *dev);

#ifdef __cplusplus
}
#endif
#endif
