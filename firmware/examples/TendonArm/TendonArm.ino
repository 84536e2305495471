// poise reference firmware: Arduino-style main for a tendon-driven arm (example of the
// "poise" library).
//
// Two joint encoders (measured coordinates) and two tendon motors with encoders and current
// sensing (actuators). The protocol, the watchdog and all safety logic live in the portable
// library (firmware/src); this file only provides the HAL hooks. Adapt the HAL section to your
// board: pins, encoder reading, motor driver, current-to-tension scale.
// Build: Arduino IDE: install firmware/ as a library (Sketch > Include Library > Add .ZIP
// Library, or copy it to ~/Arduino/libraries/poise), then File > Examples > poise > TendonArm.
// PlatformIO: lib_deps = poise=symlink://path/to/firmware (or file://). Serial: USB CDC, 1 Mbaud.

#include <Arduino.h>

#include <poise_device.h>  // C header with its own extern "C" guard

// ------------------------------------------------------------------------------ configuration
static const uint16_t RATE_HZ = 1000;     // sensor stream rate
static const uint16_t WATCHDOG_MS = 50;   // no setpoint/heartbeat this long -> safe state
static const float TENDON_M_PER_COUNT = 1.0e-5f;
static const float JOINT_RAD_PER_COUNT = 6.283185307f / 4096.0f;
static const float NEWTON_PER_AMP = 20.0f;
static const float KP = 2000.0f;           // tendon position loop [N/m]

static const poise_channel_t CHANNELS[4] = {
    {0, POISE_KIND_COORDINATE, "theta1", "rad", "", -1.5f, 1.5f, 0.0f},
    {1, POISE_KIND_COORDINATE, "theta2", "rad", "", -1.5f, 1.5f, 0.0f},
    {2, POISE_KIND_ACTUATOR, "tendon1", "m", "N", -0.03f, 0.03f, 40.0f},
    {3, POISE_KIND_ACTUATOR, "tendon2", "m", "N", -0.03f, 0.03f, 40.0f},
};

// ------------------------------------------------------------------------------ HAL (board)
static const int PWM_PIN[2] = {5, 6};
static const int DIR_PIN[2] = {7, 8};
static const int CURRENT_PIN[2] = {A0, A1};

static volatile long joint_counts[2];   // updated by encoder interrupts (not shown)
static volatile long tendon_counts[2];

static poise_mode_t mode = POISE_MODE_DISABLED;
static float qa_ref[2] = {0.0f, 0.0f};
static float tau_ff[2] = {0.0f, 0.0f};

static uint32_t hal_micros(void *) { return micros(); }

static void hal_write(void *, const uint8_t *data, size_t n) { Serial.write(data, n); }

static void hal_read_sensors(void *, float *q, float *qa, float *tau, uint16_t *status)
{
    for (int i = 0; i < 2; ++i) {
        q[i] = joint_counts[i] * JOINT_RAD_PER_COUNT;
        qa[i] = tendon_counts[i] * TENDON_M_PER_COUNT;
        tau[i] = analogRead(CURRENT_PIN[i]) * (5.0f / 1023.0f) * NEWTON_PER_AMP;
    }
    *status = 0;
}

static void hal_set_mode(void *, poise_mode_t m)
{
    if (m == POISE_MODE_HOLD) {
        for (int i = 0; i < 2; ++i) {
            qa_ref[i] = tendon_counts[i] * TENDON_M_PER_COUNT;
            tau_ff[i] = 0.0f;
        }
    }
    mode = m;
}

static void hal_set_command(void *, const float *ref, const float *ff)
{
    for (int i = 0; i < 2; ++i) {
        qa_ref[i] = ref[i];
        tau_ff[i] = ff ? ff[i] : 0.0f;
    }
}

// Low-level tendon position loop: tension command -> PWM (run every loop iteration).
static void drive_motors(void)
{
    for (int i = 0; i < 2; ++i) {
        float tension = 0.0f;
        if (mode != POISE_MODE_DISABLED) {
            float qa = tendon_counts[i] * TENDON_M_PER_COUNT;
            tension = KP * (qa_ref[i] - qa) + (mode == POISE_MODE_POSITION ? tau_ff[i] : 0.0f);
        }
        float limit = CHANNELS[2 + i].effort_limit;
        if (tension > limit) tension = limit;
        if (tension < -limit) tension = -limit;
        digitalWrite(DIR_PIN[i], tension >= 0.0f ? HIGH : LOW);
        analogWrite(PWM_PIN[i], (int)(255.0f * (tension >= 0.0f ? tension : -tension) / limit));
    }
}

// ------------------------------------------------------------------------------ main
static poise_device_t device;

void setup()
{
    for (int i = 0; i < 2; ++i) {
        pinMode(PWM_PIN[i], OUTPUT);
        pinMode(DIR_PIN[i], OUTPUT);
    }
    Serial.begin(1000000);
    poise_hal_t hal = {nullptr, hal_micros, hal_write, hal_read_sensors, hal_set_mode,
                       hal_set_command};
    poise_device_init(&device, &hal, CHANNELS, 2, 2, "poise-ref-0.1", RATE_HZ, WATCHDOG_MS);
}

void loop()
{
    uint8_t buf[64];
    int n = Serial.available();
    if (n > 0) {
        if (n > (int)sizeof buf) n = sizeof buf;
        n = Serial.readBytes(buf, n);
        poise_device_rx(&device, buf, (size_t)n);
    }
    poise_device_poll(&device);  // watchdog + sensor frame when due
    drive_motors();
}
