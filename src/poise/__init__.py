"""poise: inverse kinematics and real-time control for robots that cannot hold every pose.

Subpackages, from the ground up (nothing lower imports anything higher):
``models`` → ``ik`` → ``sim`` → ``firmware_bridge`` → ``controller``, ``calibration``
→ ``telemetry`` → ``gui``, ``cli``.
"""

__version__ = "0.1.0"
