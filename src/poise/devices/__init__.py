"""poise.devices: the one interface the controller and calibration use to reach a robot.

* :mod:`~poise.devices.base` — the :class:`~poise.devices.base.Device` protocol, its
  :class:`~poise.devices.base.DeviceInfo` and :class:`~poise.devices.base.Sample`.
"""
