// Minimal host stand-in for Arduino.h, so that the sketch compiles and runs in the tests.
#ifndef ARDUINO_STUB_H
#define ARDUINO_STUB_H
#include <chrono>
#include <cstddef>
#include <cstdint>

#define HIGH 1
#define LOW 0
#define OUTPUT 1
#define A0 14
#define A1 15

inline unsigned long micros()
{
    using namespace std::chrono;
    return (unsigned long)duration_cast<microseconds>(steady_clock::now().time_since_epoch())
        .count();
}
inline void pinMode(int, int) {}
inline void digitalWrite(int, int) {}
inline void analogWrite(int, int) {}
inline int analogRead(int) { return 0; }

struct SerialStub {
    unsigned long written = 0;
    void begin(long) {}
    int available() { return 0; }
    int readBytes(uint8_t *, int) { return 0; }
    size_t write(const uint8_t *, size_t n) { written += n; return n; }
};
static SerialStub Serial;
#endif
